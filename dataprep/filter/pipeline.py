"""`ptk filter`'s run: each read task a job that applies the steps to its documents and writes its
kept records, its removed rows and its rejected rows; then the rows joined and the stats written.

    with LocalRunner(2) as runner:
        stats = run_filter(["corpus/"], Path("out"), FilterOptions(read_filters(DEFAULT_FILTERS)), runner)

Outputs (OUT): `part-NNNNN.jsonl.zst` (a read task's kept records, in input order), `removed.jsonl`
(a row per removed document: id, source, line, the filter that removed it, its value and threshold),
`rejected.jsonl` (records the readers could not read, with their reasons), and, last, `stats.json`:
documents and text bytes in, kept, removed (per filter and per step) and rejected, with
input = kept + removed + rejected checked before it is written.

A document goes through the steps in the filters file's order, each reading the text as the
steps before it left it (C4 drops lines; PII redacts); the first step to remove it is its reason.
A step that leaves no text removes the document as `<step>.no_text_left`. The language step's
labels and rules hold for the text kept: a document whose text a later step changed is identified
again on the text left (its `lang` and `lang_score` replaced) and removed by the language step's
rule (`language.languages`, `language.min_score`) where it no longer passes; a document whose text
no later step changed is not read again. A job runs the steps on
a batch of documents at a time (BATCH_DOCS), one step after another, and writes the batch's rows in
input order: the same rows as one document at a time.

Resume: a job's `OUT/.work/done-NNNNN.json` (its counts), written after its part and its rows,
marks it finished; a rerun of the same command (same inputs, filters and fields: the work
directory's plan) keeps finished jobs and redoes the rest, into the same bytes. The jobs' outputs
depend on their documents only, so any `--workers` and `--executor` give the same bytes.
"""

from __future__ import annotations

import contextlib
import gc
import json
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pretrainkit import __version__
from pretrainkit.dataprep.classifiers.score_models import model_files
from pretrainkit.dataprep.compressed_parts import compressed_part
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.filter.language_filter import LanguageStep
from pretrainkit.dataprep.filter.language_rules import RULES_OFF_STEPS, untuned
from pretrainkit.dataprep.filter.records import kept_record, removed_row
from pretrainkit.dataprep.filter.rules import Doc, Removal
from pretrainkit.dataprep.filter.steps import StepSpec, build_step
from pretrainkit.dataprep.kernels.numba_cache import kernels_cached
from pretrainkit.dataprep.readers import Document, ReadTask, in_batches, inputs_named, read_task, reason_kind
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.dataprep.summary import input_row, keep_rates, summary_table
from pretrainkit.dataprep.workdir import file_stamp
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.output_folders import FILTER
from pretrainkit.stage_layout import KEPT_SUFFIX, REJECTED_NAME, REMOVED_NAME, part_name

# A job runs each step on a batch of documents before the next step: a step's code, tables and model
# then stay in the processor's caches from one document to the next (one document through all the
# steps at a time, language ID cost ~30 us a page, ~23 us in batches). Small enough that what the
# steps found of a document (its code points, its words) is still cached when the next step reads it.
BATCH_DOCS = 128
BATCH_CHARS = 1 << 19


@dataclass(frozen=True)
class FilterOptions:
    steps: tuple[StepSpec, ...]
    text_field: str = "text"
    id_field: str = "id"

    def __post_init__(self) -> None:
        if not self.steps:
            raise UserError("no filter steps to run")


@dataclass(frozen=True)
class FilterJob:
    index: int
    task: ReadTask
    options: FilterOptions
    out_dir: str
    work_dir: str

    def path(self, kind: str) -> Path:
        return work_piece(Path(self.work_dir), kind, self.index)


def work_piece(work: Path, kind: str, index: int) -> Path:
    """A job's file in the work folder: its counts (`done`, which marks it finished) or its rows."""
    return work / f"{kind}-{index:05d}{'.json' if kind == 'done' else '.jsonl'}"


class FilterStage(Stage):
    name = "filter"
    kind = FILTER
    row_names = (REMOVED_NAME, REJECTED_NAME)

    def announce(self) -> None:
        if not kernels_cached(__package__):  # else the first run on a machine would be silent while they compile
            print("filter: compiling kernels (first run only, ~20 s)", file=sys.stderr, flush=True)

    def named_files(self, options: FilterOptions) -> list[str]:
        """The classifier step's model (`pretrainkit.dataprep.filter.classifier`)."""
        return [s.settings.model for s in options.steps if s.name == "classifier"]

    def checked_files(self, run: Run) -> list[str]:
        return [f for model in self.named_files(run.options) for f in model_files(model)]

    def options_json(self, options: FilterOptions) -> dict:
        return {"filters": [s.as_json() for s in options.steps]}

    def plan(self, run: Run) -> dict:
        options = run.options
        models = self.checked_files(run)  # a changed model is another plan (a plan without one: as before)
        return {
            "tasks": [(t.file.path, t.start, t.end) for t in run.jobs],
            "filters": [s.as_json() for s in options.steps],
            "fields": [options.text_field, options.id_field],
            "version": __version__,
            **({"models": [file_stamp(f) for f in models]} if models else {}),
        }

    def run_jobs(self, run: Run) -> list[dict]:
        jobs = [FilterJob(i, t, run.options, str(run.out_dir), str(run.work)) for i, t in enumerate(run.jobs)]
        return run.runner.run(filter_part, jobs, "filter", weights=[t.nbytes for t in run.jobs], unit="B")

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        return [work_piece(run.work, name.removesuffix(".jsonl"), i) for i in range(len(run.jobs))]

    def stats(self, run: Run, results: list[dict]) -> dict:
        return _stats(results, run.options)

    def usable(self, run: Run, results: list[dict], stats: dict) -> bool:
        if stats["kept_docs"] == 0 and stats["removed_docs"] > 0:  # read, but a run that kept nothing is no output
            by_filter = Counter({rule: row["docs"] for rule, row in stats["removed_by_filter"].items()})
            top = "; ".join(f"{rule}: {docs:,}" for rule, docs in by_filter.most_common(3))
            listed = run.out_dir / REMOVED_NAME
            raise UserError(
                f"{inputs_named(run.inputs)}: the filters removed all {stats['removed_docs']:,} documents "
                f"({top}; each listed in {listed}); nothing kept"
            )
        return stats["kept_docs"] + stats["removed_docs"] > 0

    def rejection_reasons(self, run: Run, results: list[dict]) -> Counter:
        return sum((Counter(p["rejected_reasons"]) for p in results), Counter())

    def result(self, run: Run, stats: dict, results: list[dict]) -> dict:
        """The stats, with each step's time (all jobs together, of the jobs this run did) for the summary."""
        step_seconds: Counter = sum((Counter(p["seconds"]) for p in results), Counter())
        return dict(super().result(run, stats, results), step_seconds=dict(step_seconds))

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        rows = [
            ("input docs", f"{result['input_docs']:,}"),
            ("kept", f"{result['kept_docs']:,}"),
            ("removed", f"{result['removed_docs']:,} (see {out_dir / REMOVED_NAME})"),
        ]
        order = [name for step in result["filters"] for name in step]  # the steps in the order they ran
        by_step = result["removed_by_step"]
        rows += [(f"  {step}", f"{by_step[step]['docs']:,}") for step in order if step in by_step]
        rows.append(("rejected", f"{result['rejected']:,}"))
        if result["identified_languages"]:
            rows.append(("kept by language", keep_rates(result["identified_languages"], result["languages"])))
        if result.get("language_rules_off"):
            off = sorted(result["language_rules_off"].items(), key=lambda kv: (-kv[1], kv[0]))
            rows.append(("no language rules", ", ".join(f"{lang} {n:,}" for lang, n in off) + " (docs/filter.md)"))
        if result["pii"]:
            rows.append(("PII redacted", ", ".join(f"{kind} {n:,}" for kind, n in result["pii"].items())))
        rows.append(input_row(result["input_bytes"], seconds))
        return summary_table("filter", out_dir, rows)


def run_filter(inputs: list[str], out_dir: Path, options: FilterOptions, runner: JobRunner) -> dict:
    """Filter `inputs` into `out_dir` on `runner` (an entered runner); returns the stats written to
    `stats.json`, with `seconds`, `input_bytes` and `step_seconds` (each step's time, all jobs
    together, of the jobs this run did)."""
    return run_stage(FilterStage(), inputs, out_dir, options, runner)


def _stats(parts: list[dict], options: FilterOptions) -> dict:
    def total(key: str) -> int:
        return sum(p[key] for p in parts)

    removed: dict[str, list[int]] = {}
    for p in parts:
        for rule, (docs, size) in p["removed"].items():
            entry = removed.setdefault(rule, [0, 0])
            entry[0] += docs
            entry[1] += size
    by_step: dict[str, dict[str, int]] = {}
    for rule, (docs, size) in removed.items():
        entry = by_step.setdefault(rule.split(".")[0], {"docs": 0, "bytes": 0})
        entry["docs"] += docs
        entry["bytes"] += size
    stats = {
        "input_docs": total("docs") + total("rejected"),
        "kept_docs": total("kept"),
        "removed_docs": sum(docs for docs, _ in removed.values()),
        "rejected": total("rejected"),
        "input_text_bytes": total("text_bytes"),
        "kept_text_bytes": total("kept_bytes"),
        "removed_text_bytes": sum(size for _, size in removed.values()),
        "output_text_bytes": total("output_bytes"),
        "removed_by_filter": {rule: {"docs": d, "bytes": b} for rule, (d, b) in sorted(removed.items())},
        "removed_by_step": dict(sorted(by_step.items())),
        "rejected_reasons": dict(sorted(sum((Counter(p["rejected_reasons"]) for p in parts), Counter()).items())),
        "languages": dict(sorted(sum((Counter(p["languages"]) for p in parts), Counter()).items())),
        "identified_languages": dict(
            sorted(sum((Counter(p["identified_languages"]) for p in parts), Counter()).items())
        ),
        "language_rules_off": dict(sorted(sum((Counter(p.get("rules_off", {})) for p in parts), Counter()).items())),
        "pii": dict(sorted(sum((Counter(p["pii"]) for p in parts), Counter()).items())),
        "filters": [s.as_json() for s in options.steps],
        "options": {"text_field": options.text_field, "id_field": options.id_field},
        "version": __version__,
    }
    if not stats["language_rules_off"]:  # written only where a language had no rules: English's stats as they were
        del stats["language_rules_off"]
    if (
        stats["input_docs"] != stats["kept_docs"] + stats["removed_docs"] + stats["rejected"]
        or stats["input_text_bytes"] != stats["kept_text_bytes"] + stats["removed_text_bytes"]
    ):
        raise RuntimeError(f"filter accounting does not add up: {stats}")
    return stats


_BUILT: dict[str, list] = {}  # per process: a worker builds a run's steps (a model) once


def _steps(specs: tuple[StepSpec, ...]) -> list:
    key = json.dumps([s.as_json() for s in specs], sort_keys=True)
    if key not in _BUILT:
        _BUILT.clear()
        _BUILT[key] = [build_step(s) for s in specs]
    return _BUILT[key]


def filter_part(job: FilterJob) -> dict:
    """Filter one read task: its kept records into `part-NNNNN.jsonl.zst`, its removed and rejected
    rows into the work directory; returns (and records, last) its counts."""
    done = job.path("done")
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    counts = Counter()
    removed: dict[str, list[int]] = {}
    reasons, languages, identified, pii, rules_off = Counter(), Counter(), Counter(), Counter(), Counter()
    with contextlib.ExitStack() as stack:
        stack.enter_context(_collector_paused())
        steps = _steps(job.options.steps)  # a worker's first job builds them: the model, the compiled kernels
        language_dependent = any(s.name in RULES_OFF_STEPS for s in steps)
        seconds = {s.name: 0.0 for s in steps}
        # The rows are not fsynced: a rerun rewrites any job whose done file (written last) is missing.
        removed_rows = stack.enter_context(atomic_write(job.path("removed"), durable=False))
        rejected_rows = stack.enter_context(atomic_write(job.path("rejected"), durable=False))
        raw = stack.enter_context(atomic_write(Path(job.out_dir) / f"{part_name(job.index)}{KEPT_SUFFIX}"))
        kept = stack.enter_context(compressed_part(raw))
        items = read_task(job.task, job.options.text_field, job.options.id_field)
        for batch in in_batches(items, BATCH_DOCS, BATCH_CHARS):
            docs = [Doc(item.text) for item in batch if type(item) is Document]
            verdicts = zip(docs, _run_steps(steps, docs, seconds))  # in the order of the batch's documents
            for item in batch:
                if type(item) is not Document:
                    rejected_rows.write(json.dumps(item.to_json(), ensure_ascii=False).encode("utf-8") + b"\n")
                    counts["rejected"] += 1
                    reasons[reason_kind(item.reason)] += 1
                    continue
                doc, removal = next(verdicts)
                # a document the language-dependent rules judged with those rules off: no rules for its language
                if language_dependent and (lang := untuned(doc.fields)):
                    if removal is None or not removal.filter.startswith(f"{LanguageStep.name}."):
                        rules_off[lang] += 1
                if "lang" in doc.fields:  # kept or not: each language's keep rate is of these
                    identified[doc.fields["lang"]] += 1
                size = len(item.text.encode("utf-8", "surrogatepass"))
                counts["docs"] += 1
                counts["text_bytes"] += size
                if removal is not None:
                    removed_rows.write(removed_row(item, removal, doc))
                    entry = removed.setdefault(removal.filter, [0, 0])
                    entry[0] += 1
                    entry[1] += size
                    continue
                kept.write(kept_record(item, doc, job.options.text_field) + b"\n")
                counts["kept"] += 1
                counts["kept_bytes"] += size
                counts["output_bytes"] += len(doc.text.encode("utf-8", "surrogatepass"))
                if "lang" in doc.fields:
                    languages[doc.fields["lang"]] += 1
                pii.update(doc.fields.get("pii", {}))
    result = {
        **{k: counts[k] for k in ("docs", "rejected", "kept", "text_bytes", "kept_bytes", "output_bytes")},
        "removed": removed,
        "rejected_reasons": dict(reasons),
        "languages": dict(languages),
        "identified_languages": dict(identified),
        "pii": dict(pii),
        **({"rules_off": dict(rules_off)} if rules_off else {}),
        "seconds": seconds,
    }
    write_text_atomic(done, json.dumps(result))
    return result


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cycle collector off while a job runs: its documents, rows and arrays form no cycles and
    are freed as each batch ends, yet their allocations set off collections: with it off, `ptk filter`
    took ~5% less time (a worker's first job, which loads the model and the kernels, included)."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.enable()


def _run_steps(steps: list, docs: list[Doc], seconds: dict[str, float]) -> list[Removal | None]:
    """Each document's removal (None: kept): the steps in order, each on the documents no step before
    it removed, until one removes it or all keep it; each step's time is added to `seconds`."""
    removals: list[Removal | None] = [None] * len(docs)
    alive = list(range(len(docs)))
    clock = time.perf_counter
    language, judged = None, {}  # the language step, and the text it judged of each document it kept
    for step in steps:
        began = clock()
        batch = [docs[i] for i in alive]
        found = step.check_many(batch) if hasattr(step, "check_many") else [step.check(doc) for doc in batch]
        alive = _survivors(step.name, alive, batch, found, removals)
        seconds[step.name] += clock() - began
        if isinstance(step, LanguageStep):
            language, judged = step, {i: docs[i].text for i in alive}
    if language is not None:
        began = clock()
        changed = [i for i in alive if docs[i].text != judged[i]]  # by a later step: C4's lines, PII
        batch = [docs[i] for i in changed]
        _survivors(language.name, changed, batch, language.check_many(batch), removals)
        seconds[language.name] += clock() - began
    return removals


def _survivors(name: str, alive: list[int], batch: list[Doc], found: list, removals: list) -> list[int]:
    """The documents of `alive` that step `name` kept (its verdicts `found` on `batch`); the others'
    removals set, a document left without text removed as `<step>.no_text_left`."""
    left = []
    for i, doc, removal in zip(alive, batch, found):
        if removal is None and (not doc.text or doc.text.isspace()):
            removal = Removal(f"{name}.no_text_left", 0, 1)
        if removal is None:
            left.append(i)
        else:
            removals[i] = removal
    return left
