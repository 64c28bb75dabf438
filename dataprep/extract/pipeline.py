"""`ptk extract`'s run: WARC and HTML inputs to JSONL parts of page texts, in jobs that resume after a kill.

    stats = run_extract(["crawl/", "page.html"], Path("out"), runner)   # runner: `dataprep.executors`
    stats = run_extract(inputs, out, runner, ExtractOptions("resiliparse"))   # another extractor

Jobs: one per WARC file (per `WARC_JOB_BYTES` of a larger `.warc.gz`: a part of it, as
`pretrainkit.dataprep.extract.warc.read_warc` reads one), and one per run of consecutive HTML files
of about `HTML_JOB_BYTES`; the list depends only on the inputs. Job N writes
`OUT/part-NNNNN.jsonl.zst` (its pages' records, in input order: `id`, `url`, `date`, `text`),
`OUT/.work/part-NNNNN.rejected` (its rejected rows),
then `OUT/.work/part-NNNNN.json` (its counts), which marks it finished: a rerun after a kill keeps
the finished jobs (while the inputs are unchanged) and redoes the rest. Then `OUT/rejected.jsonl`
(the jobs' rows in job order) and, last, `OUT/stats.json`. So the output is byte-identical for any
executor and worker count, and a finished OUT reads as input to `ptk dedup` and `ptk tokenize` as
a dedup output does: its parts only.

Accounting: every WARC record, every HTML file and every unreadable stretch of a file is one of
`kept`, `skipped` (by reason: not a page) or `rejected` (by reason, a row of rejected.jsonl each:
`id` where known, `source`, `offset` in a WARC, `reason`); stats.json's `records` is their sum.
Invalid bytes in a page's encoding are replaced and counted (`invalid_byte_pages`,
`invalid_byte_sequences`), never a failure.
"""

from __future__ import annotations

import importlib.metadata
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import orjson
from resiliparse.parse.html import HTMLParserException

from pretrainkit import __version__
from pretrainkit.dataprep.compressed_parts import compressed_part
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.extract.charset import decode_html
from pretrainkit.dataprep.extract.html import DEFAULT_EXTRACTOR, EXTRACTORS, TooDeep, main_text
from pretrainkit.dataprep.extract.pages import Broken, Page, Skipped, page_of
from pretrainkit.dataprep.extract.warc import Unreadable, read_warc
from pretrainkit.dataprep.readers import InputFile, input_format, inputs_named
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.dataprep.summary import summary_table
from pretrainkit.dataprep.workdir import remove_parts
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.output_folders import EXTRACT
from pretrainkit.stage_layout import KEPT_SUFFIX, REJECTED_NAME, STATS_NAME, part_name

WARC_SUFFIXES = (".warc", ".warc.gz")
HTML_SUFFIXES = (".html", ".htm", ".xhtml")
INPUT_SUFFIXES = WARC_SUFFIXES + HTML_SUFFIXES
HTML_JOB_BYTES = 4 << 20  # HTML files per job, by size
WARC_JOB_BYTES = 256 << 20  # a larger .warc.gz is read by several jobs (Common Crawl's files: ~1 GB)
RESILIPARSE = f"resiliparse {importlib.metadata.version('resiliparse')}"  # another version, other texts


@dataclass(frozen=True)
class ExtractOptions:
    extractor: str = DEFAULT_EXTRACTOR  # one of `EXTRACTORS` (`pretrainkit.dataprep.extract.html`)

    @property
    def label(self) -> str:
        """The extractor and its library's version, as the plan and stats.json name it."""
        return RESILIPARSE if self.extractor == "resiliparse" else f"{self.extractor}, {RESILIPARSE}"


@dataclass(frozen=True)
class ExtractJob:
    index: int
    files: tuple[InputFile, ...]  # one WARC file, or consecutive HTML files
    out_dir: str
    work_dir: str
    start: int = 0  # the part of a WARC file this job reads: its records whose gzip member starts
    end: int | None = None  # in [start, end); None: to the end of the file
    extractor: str = DEFAULT_EXTRACTOR

    @property
    def nbytes(self) -> int:
        return (self.end if self.end is not None else sum(f.size for f in self.files)) - self.start


class ExtractStage(Stage):
    """Its options: `ExtractOptions`, the extractor."""

    name = "extract"
    kind = EXTRACT
    input_suffixes = INPUT_SUFFIXES

    def validate(self, options: ExtractOptions) -> None:
        if options.extractor not in EXTRACTORS:
            raise UserError(f"--extractor: unknown extractor {options.extractor!r} (known: {', '.join(EXTRACTORS)})")

    def with_fields(self, options: ExtractOptions, text_field: str, id_field: str) -> ExtractOptions:
        return options  # it reads pages, not records (a pipeline refuses other fields with an extract stage)

    def plan_jobs(self, run: Run) -> list[ExtractJob]:
        return plan_jobs(run.files, run.out_dir, run.work, run.options.extractor)

    def plan(self, run: Run) -> dict:
        return {
            "jobs": [([f.path for f in job.files], job.start, job.end) for job in run.jobs],
            "extractor": run.options.label,
            "version": __version__,
        }

    def reset(self, run: Run) -> None:
        """An earlier run's outputs, before a run of another plan writes its own."""
        remove_parts(run.out_dir)
        for stale in (run.out_dir / REJECTED_NAME, run.out_dir / STATS_NAME):
            stale.unlink(missing_ok=True)

    def run_jobs(self, run: Run) -> list[dict]:
        return run.runner.run(extract_part, run.jobs, "extract", weights=[j.nbytes for j in run.jobs], unit="B")

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        return [run.work / f"{part_name(j.index)}.rejected" for j in run.jobs]

    def refuse_unusable(self, run: Run, results: list[dict]) -> None:
        """No page with text: the run fails with no stats.json (its work folder kept)."""
        stats = self.stats(run, results)
        if not stats["kept"]:
            raise UserError(
                f"{inputs_named(run.inputs)}: no page with text in the inputs ({_outcomes(stats, run.out_dir)})"
            )

    def stats(self, run: Run, results: list[dict]) -> dict:
        return _stats(run.files, results, run.options.label)

    def publish(self, run: Run, stats: dict) -> None:
        write_text_atomic(run.out_dir / STATS_NAME, json.dumps(stats, indent=2) + "\n")

    def result(self, run: Run, stats: dict, results: list[dict]) -> dict:
        return stats

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        mb = result["input_bytes"] / 1e6
        seconds = max(seconds, 1e-9)

        def by_reason(counts: dict) -> str:
            total = sum(counts.values())
            shown = ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]))
            return f"{total:,}" + (f" ({shown})" if shown else "")

        rows = [
            ("records", f"{result['records']:,} in {result['input_files']:,} files"),
            ("pages kept", f"{result['kept']:,}"),
            ("skipped", by_reason(result["skipped"])),
            ("rejected", f"{by_reason(result['rejected'])}, listed in {out_dir / REJECTED_NAME}"),
            (
                "invalid bytes",
                f"{result['invalid_byte_sequences']:,} sequences in {result['invalid_byte_pages']:,} pages, "
                "each replaced by U+FFFD",
            ),
            ("input", f"{mb:,.1f} MB in {seconds:.1f} s ({result['kept'] / seconds:,.0f} pages/s)"),
        ]
        return summary_table("extract", out_dir, rows)


def run_extract(inputs: list[str], out_dir: Path, runner: JobRunner, options: ExtractOptions | None = None) -> dict:
    """Write `out_dir` (parts, rejected.jsonl, then stats.json) and return the stats."""
    return run_stage(ExtractStage(), inputs, out_dir, options or ExtractOptions(), runner)


def plan_jobs(
    files: list[InputFile], out_dir: Path, work: Path, extractor: str = DEFAULT_EXTRACTOR
) -> list[ExtractJob]:
    groups: list[tuple[list[InputFile], int, int | None]] = []  # (files, start, end)
    for f in files:
        warc = input_format(f.path, WARC_SUFFIXES) is not None
        last = groups[-1][0] if groups else None
        if last and not warc and _is_html_group(last) and sum(g.size for g in last) < HTML_JOB_BYTES:
            last.append(f)
        elif input_format(f.path, (".warc.gz",)) and f.size > WARC_JOB_BYTES:
            cuts = range(0, f.size, WARC_JOB_BYTES)
            groups += [
                ([f], start, start + WARC_JOB_BYTES if start + WARC_JOB_BYTES < f.size else None) for start in cuts
            ]
        else:
            groups.append(([f], 0, None))
    return [
        ExtractJob(i, tuple(g), str(out_dir), str(work), start, end, extractor)
        for i, (g, start, end) in enumerate(groups)
    ]


def _is_html_group(group: list[InputFile]) -> bool:
    return input_format(group[0].path, HTML_SUFFIXES) is not None


class _Counts:
    """One job's tally; `as_json` is its done-marker's content."""

    def __init__(self) -> None:
        self.kept = 0
        self.skipped: Counter = Counter()
        self.rejected: Counter = Counter()
        self.invalid_byte_pages = 0
        self.invalid_byte_sequences = 0

    def as_json(self) -> dict:
        return {
            "kept": self.kept,
            "skipped": dict(sorted(self.skipped.items())),
            "rejected": dict(sorted(self.rejected.items())),
            "invalid_byte_pages": self.invalid_byte_pages,
            "invalid_byte_sequences": self.invalid_byte_sequences,
        }


def extract_part(job: ExtractJob) -> dict:
    """Extract one job's pages into its part and rejected rows; returns its counts."""
    base = Path(job.work_dir) / part_name(job.index)
    done = Path(f"{base}.json")
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    counts = _Counts()
    part = Path(job.out_dir) / f"{part_name(job.index)}{KEPT_SUFFIX}"
    with atomic_write(part) as raw, atomic_write(f"{base}.rejected", "wb", durable=False) as rejected:
        with compressed_part(raw) as out:
            for f in job.files:
                for row in _file_rows(f, counts, job.start, job.end, job.extractor):
                    if "text" in row:
                        out.write(orjson.dumps(row) + b"\n")
                    else:
                        rejected.write(orjson.dumps(row) + b"\n")
    meta = counts.as_json()
    write_text_atomic(done, json.dumps(meta))
    return meta


def _file_rows(f: InputFile, counts: _Counts, start: int, end: int | None, extractor: str):
    """The records (with `text`) and rejected rows of one input file (of its part from `start` to `end`,
    a WARC), in order; skips only counted."""
    if input_format(f.path, HTML_SUFFIXES) is not None:
        with open(f.path, "rb") as fh:
            html = fh.read()
        if not html.strip():
            yield _rejected(counts, {"id": f.rel, "source": f.rel}, "empty file")
            return
        yield _page_row(Page(f.rel, None, None, html, None), {"id": f.rel, "source": f.rel}, counts, extractor)
        return
    for item in read_warc(f.path, start, end):
        where = {"source": f.rel, "offset": item.offset}
        if isinstance(item, Unreadable):
            yield _rejected(counts, where, item.reason)
            continue
        found = page_of(item)
        if isinstance(found, Skipped):
            counts.skipped[found.reason] += 1
        elif isinstance(found, Broken):
            yield _rejected(counts, {"id": item.headers.get("warc-record-id"), **where}, found.reason)
        else:
            yield _page_row(found, {"id": found.id, **where}, counts, extractor)


def _page_row(page: Page, where: dict, counts: _Counts, extractor: str) -> dict:
    html, invalid = decode_html(page.html, page.charset)
    if invalid:
        counts.invalid_byte_pages += 1
        counts.invalid_byte_sequences += invalid
    try:
        text = main_text(html, extractor)
    except HTMLParserException as e:
        return _rejected(counts, where, f"HTML cannot be parsed: {e}")
    except TooDeep as e:
        return _rejected(counts, where, str(e))
    if not text:
        return _rejected(counts, where, "no extractable text")
    counts.kept += 1
    return {"id": page.id, "url": page.url, "date": page.date, "text": text}


def _rejected(counts: _Counts, where: dict, reason: str) -> dict:
    counts.rejected[_reason_kind(reason)] += 1
    return {**where, "reason": reason}


def _reason_kind(reason: str) -> str:
    """A reason without its particulars (byte counts, what a line began with), for counting."""
    return re.split(r" \(|: |; ", reason, maxsplit=1)[0]


def _stats(files: list[InputFile], counts: list[dict], extractor: str) -> dict:
    skipped = sum((Counter(c["skipped"]) for c in counts), Counter())
    rejected = sum((Counter(c["rejected"]) for c in counts), Counter())
    kept = sum(c["kept"] for c in counts)
    return {
        "pretrainkit_version": __version__,
        "extractor": extractor,
        "input_files": len(files),
        "input_bytes": sum(f.size for f in files),
        "records": kept + sum(skipped.values()) + sum(rejected.values()),
        "kept": kept,
        "skipped": dict(sorted(skipped.items())),
        "rejected": dict(sorted(rejected.items())),
        "invalid_byte_pages": sum(c["invalid_byte_pages"] for c in counts),
        "invalid_byte_sequences": sum(c["invalid_byte_sequences"] for c in counts),
    }


def _outcomes(stats: dict, out_dir: Path) -> str:
    skipped, rejected = sum(stats["skipped"].values()), sum(stats["rejected"].values())
    top = ", ".join(f"{reason}: {n}" for reason, n in Counter(stats["skipped"]).most_common(3))
    return (
        f"{stats['records']} records: {skipped} skipped{f' ({top})' if top else ''}, "
        f"{rejected} rejected (see {out_dir / REJECTED_NAME})"
    )
