"""`ptk dedup --paragraphs`'s run: a paragraph repeated across the corpus is kept at its first
occurrence and removed from every later document (the boilerplate that survives extraction: menus,
cookie notices, bylines), as dolma's paragraph dedup does, through files, in bounded memory.

    with LocalRunner(2) as runner:
        stats = run_paragraphs(["corpus/"], Path("out"), ParagraphOptions(min_length=1), runner)

What a paragraph is and how two are compared: `pretrainkit.dataprep.paragraphs.lines` (a line;
surrounding whitespace stripped; blank lines never removed). Which occurrence is kept:
`pretrainkit.dataprep.paragraphs.rule` (the first in corpus order: input file order, then the
documents' order, then the lines'; a repeat inside the document of the first occurrence is kept).
Three stages, each a set of independent jobs whose results are files in `OUT/.work`:

1. scan    (per read task)  an entry (hash, document, line) per paragraph, bucketed by hash;
           the copies a chunk of entries finds in its own later documents are removed there.
2. resolve (per partition, a range of buckets)  the entries of each hash in corpus order: every
           one of a later document than the first is removed; the removals by read task.
3. write   (per read task)  the kept records (`part-NNNNN.jsonl.zst`, input order) without their
           removed lines, a changed one's language identified again (`relabel`), and the rows of
           documents left shorter than `--min-length` or in none of `--languages`.

Outputs (OUT): `part-NNNNN.jsonl.zst`, `removed.jsonl` (a row per removed document: id, source,
line, `filter`: `paragraphs.min_length`, value: the length left, threshold; or, with `languages`,
`paragraphs.languages`, value: the language of the text left), `rejected.jsonl`, and, last,
`stats.json`: documents in, kept, removed (by reason), relabelled and rejected, paragraphs and text bytes
in, out and removed, with input = kept + removed + rejected, the text bytes, and the removed
paragraphs the write stage applied = those the scan and resolve stages found, checked before it is
written.

Memory (`--memory-limit`, shared as `pretrainkit.dataprep.budget` shares it): a scan job holds
one batch of texts and one chunk of entries; a resolve job one partition (24 bytes per paragraph, a
few times over while sorting), and the number of partitions grows with the paragraphs so that a
partition stays within its share (at most `BUCKETS` partitions: ~11 billion paragraphs at the
largest share); a write job the removals of a window of 65,536 documents (8 bytes each). The main
process holds the jobs' counts only. Copies of one paragraph all go to one partition, but the scan
finds those in later documents of its chunk itself, so a paragraph puts at most one document's
entries per scan chunk there (a line in every document of 100M short documents: ~1,300 entries,
not 100M). Every process holds a whole document while it works on it, as dedup's do.

Resume: each job's marker (its counts, or its bounds file) is written after its files; a rerun of
the same command (same inputs, options and fields: the work directory's plan) keeps finished jobs
and redoes the rest. Once every partition is resolved, `resolved.json` records the partition count
and the scan's entry files are deleted, so a rerun with other `--workers` or `--memory-limit` goes
on writing. The jobs' outputs depend on the corpus only: any `--workers` and `--executor` give the
same bytes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

from pretrainkit import __version__
from pretrainkit.arguments import int_in
from pretrainkit.dataprep.budget import DedupBudget, run_budget
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.filter.language_codes import checked_codes
from pretrainkit.dataprep.filter.length import MOST_CHARS, MinLengthSettings
from pretrainkit.dataprep.paragraphs.relabel import LANGUAGES_REASON
from pretrainkit.dataprep.paragraphs.resolve import ResolveJob, resolve_partition
from pretrainkit.dataprep.paragraphs.scan import BUCKETS, ENTRY_BYTES, ScanJob, scan_part, scan_path
from pretrainkit.dataprep.paragraphs.write import MIN_LENGTH_REASON, REASONS, WriteJob, write_part
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.dataprep.summary import input_row, summary_table
from pretrainkit.files import write_text_atomic
from pretrainkit.output_folders import PARAGRAPHS, Kind
from pretrainkit.stage_layout import REJECTED_NAME, REMOVED_NAME

WORK_FORMAT = 2  # of the files in .work/: a rerun by code that lays them out otherwise starts afresh
RESOLVED_NAME = "resolved.json"
DEFAULT_MIN_LENGTH = MinLengthSettings().min_chars  # `ptk filter`'s min_length default: 1 character
MIN_LENGTH = int_in(0, MOST_CHARS)  # --min-length's type; the check of a pipeline file's or a caller's


@dataclass(frozen=True)
class ParagraphOptions:
    min_length: int = DEFAULT_MIN_LENGTH
    text_field: str = "text"
    id_field: str = "id"
    languages: list[str] | None = None  # a changed document identified in none of them is removed; None: all kept

    def __post_init__(self) -> None:
        MIN_LENGTH.check(self.min_length, "min_length")
        if self.languages is not None:
            object.__setattr__(self, "languages", checked_codes(self.languages))  # sorted, each once

    def as_json(self) -> dict:
        """As stats.json shows them: `languages` only where given (a run without it writes what it always did)."""
        shown = asdict(self)
        if self.languages is None:
            del shown["languages"]
        return shown


@dataclass(frozen=True)
class ParagraphStage(Stage):
    """`budget`: a `DedupBudget`, or the bytes of memory to share (None: `default_memory_limit()`);
    it sizes the partitions and never changes the output."""

    budget: DedupBudget | int | None = None
    name: ClassVar[str] = "paragraphs"
    kind: ClassVar[Kind] = PARAGRAPHS
    row_names: ClassVar[tuple[str, ...]] = (REMOVED_NAME, REJECTED_NAME)

    def options_json(self, options: ParagraphOptions) -> dict:
        return options.as_json()

    def plan(self, run: Run) -> dict:
        return {
            "work_format": WORK_FORMAT,
            "tasks": [(t.file.path, t.start, t.end) for t in run.jobs],
            "options": asdict(run.options),
            "version": __version__,
        }

    def run_jobs(self, run: Run) -> tuple[list[dict], list[dict], int]:
        """The scan, resolve and write stages: their counts and the paragraphs the resolve removed."""
        tasks, work, options = run.jobs, run.work, run.options
        fields = (options.text_field, options.id_field)
        scans = run.runner.run(
            scan_part,
            [ScanJob(i, t, *fields, str(work)) for i, t in enumerate(tasks)],
            "scan paragraphs",
            weights=[t.nbytes for t in tasks],
            unit="B",
        )
        resolved = _resolve(scans, len(tasks), work, run.runner, run_budget(self.budget, run.runner.workers))
        resolve_dir = work / f"resolve-{resolved['partitions']}"
        written = run.runner.run(
            write_part,
            [
                WriteJob(
                    i,
                    t,
                    *fields,
                    options.min_length,
                    options.languages,
                    str(run.out_dir),
                    str(work),
                    str(resolve_dir),
                    resolved["partitions"],
                )
                for i, t in enumerate(tasks)
            ],
            "write paragraphs",
            weights=[t.nbytes for t in tasks],
            unit="B",
        )
        return scans, written, resolved["removed"]

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        if name == REMOVED_NAME:
            return [run.work / f"removed-{i:05d}.jsonl" for i in range(len(run.jobs))]
        return [scan_path(run.work, i, "rejected") for i in range(len(run.jobs))]

    def stats(self, run: Run, results: tuple[list[dict], list[dict], int]) -> dict:
        return _stats(*results, run.options)

    def usable(self, run: Run, results: tuple, stats: dict) -> bool:
        return stats["kept_docs"] + stats["removed_docs"] > 0

    def rejection_reasons(self, run: Run, results: tuple[list[dict], list[dict], int]) -> Counter:
        return sum((Counter(s["rejected_reasons"]) for s in results[0]), Counter())

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        removed = result["removed_text_bytes"]
        removed_bytes = removed["paragraphs"] + removed["documents"]
        share = result["paragraphs_removed"] / max(1, result["paragraphs"])
        options, by_reason = result["options"], result["removed_by_reason"]
        short = f"left shorter than --min-length {options['min_length']}"
        rows = [("input docs", f"{result['input_docs']:,}"), ("kept", f"{result['kept_docs']:,}")]
        if "languages" in options:
            rows += [
                ("removed", f"{result['removed_docs']:,} (see {out_dir / REMOVED_NAME})"),
                (f"  {short}", f"{by_reason[MIN_LENGTH_REASON]['docs']:,}"),
                (f"  not in --languages {','.join(options['languages'])}", f"{by_reason[LANGUAGES_REASON]['docs']:,}"),
            ]
        else:
            rows.append(("removed", f"{result['removed_docs']:,} ({short}; see {out_dir / REMOVED_NAME})"))
        rows += [
            ("rejected", f"{result['rejected']:,}"),
            ("paragraphs removed", f"{result['paragraphs_removed']:,} of {result['paragraphs']:,} ({share:.1%})"),
            ("docs changed", f"{result['docs_changed']:,} lost a paragraph or more"),
        ]
        if result["relabelled_docs"]:
            rows.append(("relabelled", f"{result['relabelled_docs']:,} kept docs whose lang changed on the text left"))
        rows += [
            (
                "text removed",
                f"{removed_bytes:,} of {result['input_text_bytes']:,} bytes "
                f"({removed_bytes / max(1, result['input_text_bytes']):.1%})",
            ),
            input_row(result["input_bytes"], seconds),
        ]
        return summary_table("dedup --paragraphs", out_dir, rows)


def run_paragraphs(
    inputs: list[str], out_dir: Path, options: ParagraphOptions, runner: JobRunner, budget: DedupBudget | None = None
) -> dict:
    """Remove repeated paragraphs of `inputs` into `out_dir` on `runner` (an entered runner); returns
    the stats written to `stats.json`, with `seconds` and `input_bytes` for the summary."""
    return run_stage(ParagraphStage(budget), inputs, out_dir, options, runner)


def partitions_for(entries: int, workers: int, budget: DedupBudget) -> int:
    """Partitions of hashes for `entries` paragraphs: each within the budget's partition size, at
    least two per worker (no worker waits on a last, lone one), at most `BUCKETS`."""
    return min(BUCKETS, max(2 * workers, math.ceil(entries * ENTRY_BYTES / budget.partition_bytes)))


def _resolve(scans: list[dict], tasks: int, work: Path, runner: JobRunner, budget: DedupBudget) -> dict:
    """Run the resolve stage, once: its partition count and removed paragraphs, as `resolved.json` keeps them."""
    resolved_path = work / RESOLVED_NAME
    if resolved_path.exists():  # resolved by an earlier run, whose entry files are gone
        return json.loads(resolved_path.read_text())
    partitions = partitions_for(sum(s["entries"] for s in scans), runner.workers, budget)
    resolve_dir = work / f"resolve-{partitions}"  # a rerun with another --memory-limit cuts its own
    resolve_dir.mkdir(exist_ok=True)
    removed = runner.run(
        resolve_partition,
        [ResolveJob(p, partitions, tasks, str(work), str(resolve_dir)) for p in range(partitions)],
        "resolve paragraphs",
        unit="partition",
    )
    resolved = {"partitions": partitions, "removed": sum(removed)}
    write_text_atomic(resolved_path, json.dumps(resolved))
    for i in range(tasks):  # nothing reads them again: their pages need not be written back
        for suffix in ("bin", "bounds"):
            scan_path(work, i, suffix).unlink(missing_ok=True)
    return resolved


def _stats(scans: list[dict], written: list[dict], resolved_removed: int, options: ParagraphOptions) -> dict:
    def total(parts: list[dict], key: str) -> int:
        return sum(p[key] for p in parts)

    reasons = REASONS if options.languages is not None else (MIN_LENGTH_REASON,)
    by_reason = {
        r: {"docs": sum(w["removed"][r][0] for w in written), "bytes": sum(w["removed"][r][1] for w in written)}
        for r in REASONS
    }
    removed_docs = sum(r["docs"] for r in by_reason.values())
    stats = {
        "input_docs": total(scans, "docs") + total(scans, "rejected"),
        "kept_docs": total(written, "kept"),
        "removed_docs": removed_docs,
        "removed_by_reason": {r: by_reason[r] for r in reasons},
        "relabelled_docs": total(written, "relabelled"),
        "rejected": total(scans, "rejected"),
        "rejected_reasons": dict(sorted(sum((Counter(s["rejected_reasons"]) for s in scans), Counter()).items())),
        "paragraphs": total(scans, "entries"),
        "paragraphs_removed": total(written, "paragraphs_removed"),
        "docs_changed": total(written, "docs_changed"),
        "input_text_bytes": total(scans, "text_bytes"),
        "output_text_bytes": total(written, "output_bytes"),
        "removed_text_bytes": {
            "paragraphs": total(written, "kept_input_bytes") - total(written, "output_bytes"),
            "documents": sum(r["bytes"] for r in by_reason.values()),
        },
        "options": options.as_json(),
        "version": __version__,
    }
    removed_bytes = stats["removed_text_bytes"]
    if (
        stats["input_docs"] != stats["kept_docs"] + stats["removed_docs"] + stats["rejected"]
        or [s["docs"] for s in scans] != [w["docs"] for w in written]
        or any(by_reason[r]["docs"] for r in REASONS if r not in reasons)
        or stats["input_text_bytes"]
        != stats["output_text_bytes"] + removed_bytes["paragraphs"] + removed_bytes["documents"]
        or stats["input_text_bytes"] != total(written, "text_bytes")
        or stats["paragraphs_removed"] != resolved_removed + total(scans, "local_removed")
    ):
        raise RuntimeError(f"paragraph dedup accounting does not add up (resolved {resolved_removed}): {stats}")
    return stats
