"""`ptk score`'s run: each read task a job that scores its documents with every classifier and writes
them, with their scores, to its part; then the rejected rows joined and the stats written.

    with LocalRunner(2) as runner:
        options = ScoreOptions((ClassifierSpec("dclm.bin", label="hq", name="dclm"),))
        stats = run_stage(ScoreStage(), ["corpus/"], Path("out"), options, runner)

Outputs (OUT): `part-NNNNN.jsonl.zst` (a read task's records, every one, in input order, each with
`score_NAME` added per classifier, `int_score_NAME` for a regression head, and `score_max` /
`score_mean` over the classifiers' scores as `combine` asks), `rejected.jsonl` (records the
readers could not read: no text field, bad JSON) and, last, `stats.json`: documents in, scored
and rejected, and each score field's distribution (`pretrainkit.dataprep.quality.score_stats`:
mean, min, max, quantiles, histogram).

A job scores a batch of documents at a time (BATCH_DOCS): each classifier reads the batch's texts
in one call (fastText's compiled loop; a Hugging Face model's batches of similar length), so a
document's scores depend on the batch it was read in only as far as float error (a Hugging Face
model's padding: under 1e-6, hidden by the rounding), and the batches are the read task's, the same
on any workers.

Resume: a job's `OUT/.work/done-NNNNN.json` (its counts), written after its part and its rows, marks
it finished; a rerun of the same command (same inputs, classifiers, model files and fields: the work
directory's plan) keeps finished jobs and redoes the rest, into the same bytes. Any `--workers` and
`--executor` give the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from pretrainkit import __version__
from pretrainkit.dataprep.classifiers.score_models import (
    SCORE_DECIMALS,
    CheckedClassifier,
    ClassifierSpec,
    check_classifier,
    load_scorer,
    model_files,
)
from pretrainkit.dataprep.compressed_parts import compressed_part
from pretrainkit.dataprep.filter.pipeline import work_piece
from pretrainkit.dataprep.filter.records import kept_record
from pretrainkit.dataprep.filter.rules import Doc
from pretrainkit.dataprep.quality.score_stats import ScoreCounts, summary
from pretrainkit.dataprep.readers import Document, ReadTask, in_batches, read_task, reason_kind
from pretrainkit.dataprep.stage import Run, Stage
from pretrainkit.dataprep.summary import input_row, summary_table
from pretrainkit.dataprep.workdir import file_stamp
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.output_folders import SCORE
from pretrainkit.remote.staging import shown
from pretrainkit.stage_layout import KEPT_SUFFIX, part_name

BATCH_DOCS = 512  # documents a classifier reads in one call
BATCH_CHARS = 1 << 22
COMBINE = ("max", "mean")  # score_max, score_mean: over the classifiers' scores


@dataclass(frozen=True)
class ScoreOptions:
    classifiers: tuple[ClassifierSpec, ...]
    combine: tuple[str, ...] = ()
    text_field: str = "text"
    id_field: str = "id"


@dataclass(frozen=True)
class ScoreJob:
    index: int
    task: ReadTask
    classifiers: tuple[CheckedClassifier, ...]
    options: ScoreOptions
    out_dir: str
    work_dir: str

    def path(self, kind: str) -> Path:
        return work_piece(Path(self.work_dir), kind, self.index)


class ScoreStage(Stage):
    name = "score"
    kind = SCORE

    def validate(self, options: ScoreOptions) -> None:
        if not options.classifiers:
            raise UserError("score: no classifier (give --classifier MODEL)")
        fields = [spec.field_name for spec in options.classifiers]
        repeated = sorted({f for f in fields if fields.count(f) > 1})
        if repeated:
            raise UserError(f"score: two classifiers would write score_{repeated[0]}; give each its own --name")
        unknown = [c for c in options.combine if c not in COMBINE]
        if unknown:
            raise UserError(f"score: --combine {unknown[0]}: not one of {', '.join(COMBINE)}")
        if options.combine and len(options.classifiers) < 2:
            raise UserError("score: --combine needs two classifiers or more")

    def options_json(self, options: ScoreOptions) -> dict:
        data = asdict(options)
        for classifier in data["classifiers"]:  # a fetched model by its URL, as the command was given it
            classifier["model"] = shown(classifier["model"])
        return data

    def named_files(self, options: ScoreOptions) -> list[str]:
        return [spec.model for spec in options.classifiers]

    def checked_files(self, run: Run) -> list[str]:
        return [f for spec in run.options.classifiers for f in model_files(spec.model)]

    def prepare(self, options: ScoreOptions) -> tuple[CheckedClassifier, ...]:
        return tuple(check_classifier(spec) for spec in options.classifiers)

    def plan(self, run: Run) -> dict:
        return {
            "tasks": [(t.file.path, t.start, t.end) for t in run.jobs],
            "options": self.options_json(run.options),
            "models": [file_stamp(f) for f in self.checked_files(run)],
            "version": __version__,
        }

    def run_jobs(self, run: Run) -> list[dict]:
        jobs = [ScoreJob(i, t, run.state, run.options, str(run.out_dir), str(run.work)) for i, t in enumerate(run.jobs)]
        return run.runner.run(score_part, jobs, "score", weights=[t.nbytes for t in run.jobs], unit="B")

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        return [work_piece(run.work, name.removesuffix(".jsonl"), i) for i in range(len(run.jobs))]

    def stats(self, run: Run, results: list[dict]) -> dict:
        fields = _fields(run.state, run.options.combine)
        docs, rejected = sum(r["docs"] for r in results), sum(r["rejected"] for r in results)
        return {
            "input_docs": docs + rejected,
            "scored_docs": docs,
            "rejected": rejected,
            "rejected_reasons": dict(sorted(sum((Counter(r["rejected_reasons"]) for r in results), Counter()).items())),
            "scores": {f: summary([ScoreCounts.from_json(r["scores"][f]) for r in results]) for f in fields},
            "options": self.options_json(run.options),
            "version": __version__,
        }

    def usable(self, run: Run, results: list[dict], stats: dict) -> bool:
        return stats["scored_docs"] > 0

    def rejection_reasons(self, run: Run, results: list[dict]) -> Counter:
        return sum((Counter(r["rejected_reasons"]) for r in results), Counter())

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        rows = [
            ("input docs", f"{result['input_docs']:,}"),
            ("scored", f"{result['scored_docs']:,}"),
            ("rejected", f"{result['rejected']:,}"),
        ]
        for name, s in result["scores"].items():
            if s["docs"]:
                q = s["quantiles"]
                rows.append((name, f"mean {s['mean']:.4f}, p10 {q['p10']}, median {q['p50']}, p90 {q['p90']}"))
        rows.append(input_row(result["input_bytes"], seconds))
        return summary_table("score", out_dir, rows)


def _fields(classifiers: tuple[CheckedClassifier, ...], combine: tuple[str, ...]) -> list[str]:
    """The fields a record gains, in order: each classifier's, then the combined scores'."""
    return [f for c in classifiers for f in c.fields] + [f"score_{how}" for how in combine]


def _combined(fields: dict, score_fields: list[str], combine: tuple[str, ...]) -> None:
    """score_HOW of the classifiers' scores (their `score_fields`), for each way of `combine`."""
    scores = [fields[name] for name in score_fields]
    for how in combine:
        value = max(scores) if how == "max" else sum(scores) / len(scores)
        fields[f"score_{how}"] = round(value, SCORE_DECIMALS)


def score_part(job: ScoreJob) -> dict:
    """Score one read task: its records with their scores into `part-NNNNN.jsonl.zst`, its rejected
    rows into the work directory; returns (and records, last) its counts."""
    done = job.path("done")
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    scorers = [load_scorer(c) for c in job.classifiers]  # a worker's first job loads the models
    counts = {f: ScoreCounts() for f in _fields(job.classifiers, job.options.combine)}
    score_fields = [c.score_field for c in job.classifiers]
    docs, rejected, reasons = 0, 0, Counter()
    text_field = job.options.text_field
    # The rows are not fsynced: a rerun rewrites any job whose done file (written last) is missing.
    with (
        atomic_write(job.path("rejected"), durable=False) as rejected_rows,
        atomic_write(Path(job.out_dir) / f"{part_name(job.index)}{KEPT_SUFFIX}") as raw,
        compressed_part(raw) as kept,
    ):
        for batch in in_batches(read_task(job.task, text_field, job.options.id_field), BATCH_DOCS, BATCH_CHARS):
            documents = [item for item in batch if type(item) is Document]
            texts = [d.text for d in documents]
            each = [s.fields(texts) for s in scorers]
            scored = iter(range(len(documents)))
            for item in batch:
                if type(item) is not Document:
                    rejected_rows.write(json.dumps(item.to_json(), ensure_ascii=False).encode("utf-8") + b"\n")
                    rejected += 1
                    reasons[reason_kind(item.reason)] += 1
                    continue
                i = next(scored)
                doc = Doc(item.text)
                for fields in each:
                    doc.fields.update(fields[i])
                if job.options.combine:
                    _combined(doc.fields, score_fields, job.options.combine)
                for name, value in doc.fields.items():
                    counts[name].add(value)
                kept.write(kept_record(item, doc, text_field) + b"\n")
                docs += 1
    result = {
        "docs": docs,
        "rejected": rejected,
        "rejected_reasons": dict(reasons),
        "scores": {name: c.as_json() for name, c in counts.items()},
    }
    write_text_atomic(done, json.dumps(result))
    return result
