"""`ptk split`'s run: a scored corpus cut into quality buckets by a numeric field, each bucket a corpus
folder, the cut points at quantiles weighted by text length (as Nemotron-CC weights its buckets by
tokens) or given.

    with LocalRunner(2) as runner:
        stats = run_split(["scored/"], Path("out"), SplitOptions("score_edu", quantiles=5), runner)

Two passes, each a job per read task:

1. measure  each document's score (the record's `by` field: a number, finite) and text length in
            UTF-8 bytes, into `OUT/.work/measure-NNNNN.npy` (16 bytes per document, no text); a
            record without the field, or with one that is no finite number, fails the run in one
            line naming the file and line.
2. write    each document's record, as it was read, into `OUT/bucket-KK/part-NNNNN.jsonl.zst`
            (every bucket gets a part per job, maybe empty: the same layout as every stage's output).

Between them the main process reads the measures of all documents (16 bytes each) and finds the cut
points (`weighted_cuts`): with K quantiles, cut j is the score of the document at which the running
total of text bytes, in score order, first passes j/K of all the bytes. A document's bucket is the
number of cuts at or below its score (`bucket_of`): a score equal to a cut goes to the bucket above
it, so that ties never split between buckets. Each bucket then holds ~1/K of the text bytes, give or
take the document that straddles a cut and any run of tied scores there. With `thresholds` the cuts
are the ones given.

Outputs (OUT): `bucket-00/` (lowest scores) ... `bucket-KK/`, `rejected.jsonl` (records the readers
could not read), `buckets.json` (each bucket's cut range, lowest and highest score, documents and text
bytes), `mixture.yaml` (`pretrainkit.dataprep.quality.split_mixture`: a template mixing the buckets
once tokenized) and, last, `stats.json` (the same buckets with the run's counts and options).

Resume: each job's marker (`measure-NNNNN.json`, `write-NNNNN.json`) is written after its files; a
rerun of the same command keeps finished jobs. The cuts depend on the multiset of (score, length)
pairs only and the parts on their read task only, so any `--workers` gives the same bytes.
"""

from __future__ import annotations

import contextlib
import json
import math
import shutil
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import orjson

from pretrainkit import __version__
from pretrainkit.dataprep.compressed_parts import compressed_part
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.quality.split_mixture import MixtureTemplate, mixture_yaml
from pretrainkit.dataprep.readers import Document, ReadTask, read_task, reason_kind
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.dataprep.summary import input_row, summary_table
from pretrainkit.dataprep.workdir import remove_parts
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.output_folders import SPLIT, Kind
from pretrainkit.stage_layout import KEPT_SUFFIX, REJECTED_NAME, part_name

MOST_BUCKETS = 100  # bucket folders are numbered with two digits
BUCKETS_NAME = "buckets.json"
MIXTURE_NAME = "mixture.yaml"
BUCKET_PREFIX = "bucket-"


def bucket_name(index: int) -> str:
    """`bucket-KK`: bucket `index`'s folder under OUT (0: the lowest scores)."""
    return f"{BUCKET_PREFIX}{index:02d}"


@dataclass(frozen=True)
class SplitOptions:
    by: str  # the record field holding the score
    quantiles: int | None = None  # K buckets of ~1/K of the text bytes each
    thresholds: tuple[float, ...] | None = None  # or fixed cut points, increasing: len + 1 buckets
    text_field: str = "text"
    id_field: str = "id"
    mixture: MixtureTemplate = MixtureTemplate()

    def __post_init__(self) -> None:
        if (self.quantiles is None) == (self.thresholds is None):
            raise UserError("give either --quantiles K or --thresholds A,B,...")
        if self.quantiles is not None and not 2 <= self.quantiles <= MOST_BUCKETS:
            raise UserError(f"--quantiles must be from 2 to {MOST_BUCKETS}, got {self.quantiles}")
        if self.thresholds is not None:
            cuts = self.thresholds
            if not 1 <= len(cuts) < MOST_BUCKETS:
                raise UserError(f"--thresholds takes 1 to {MOST_BUCKETS - 1} cut points, got {len(cuts)}")
            if not all(math.isfinite(c) for c in cuts):
                raise UserError(f"--thresholds must be finite numbers, got {','.join(map(str, cuts))}")
            if any(a >= b for a, b in zip(cuts, cuts[1:])):
                raise UserError(f"--thresholds must increase, got {','.join(map(str, cuts))}")
        self.mixture.check(self.buckets)

    @property
    def buckets(self) -> int:
        return self.quantiles if self.quantiles is not None else len(self.thresholds) + 1


def weighted_cuts(scores: np.ndarray, lengths: np.ndarray, k: int) -> np.ndarray:
    """The k - 1 cut points that cut `scores` (float64) weighted by `lengths` (int64) into k buckets of
    ~equal weight: cut j is the score of the first document, in score order, at which the running
    weight passes j/k of the total (exactly: running * k > j * total, in integers). Depends on the
    multiset of (score, length) pairs only: tied scores share their cut whatever their order."""
    if len(scores) == 0:
        raise ValueError("no scores to cut")
    order = np.argsort(scores, kind="stable")
    running = np.cumsum(lengths[order], dtype=np.int64)
    total = int(running[-1])
    # The first index where running * k > j * total: searchsorted on running for j * total / k, exactly.
    # running * k > j * total  <=>  running > floor(j * total / k), all integers.
    bounds = np.array([j * total // k for j in range(1, k)], dtype=np.int64)
    first = np.minimum(np.searchsorted(running, bounds, side="right"), len(order) - 1)
    return scores[order[first]]


def bucket_of(scores: np.ndarray, cuts: np.ndarray) -> np.ndarray:
    """Each score's bucket: how many cuts are at or below it (a tie with a cut goes up)."""
    return np.searchsorted(cuts, scores, side="right")


@dataclass(frozen=True)
class SplitJob:
    index: int
    task: ReadTask
    options: SplitOptions
    out_dir: str
    work_dir: str
    cuts: tuple[float, ...] = ()  # the write pass's

    def path(self, kind: str, suffix: str = "json") -> Path:
        return Path(self.work_dir) / f"{kind}-{self.index:05d}.{suffix}"


def _score(document: Document, by: str, path: str) -> float:
    """The record's `by` field as a finite float, or a one-line error naming the file (`path`) and line."""
    where = f"{path}:{document.line}"
    try:
        record = orjson.loads(document.record)
    except orjson.JSONDecodeError:  # what only json reads: NaN, Infinity (the readers accepted the line)
        record = json.loads(document.record)
    if by not in record:
        raise UserError(f"{where}: no field {by!r} to split by (ptk score writes score_NAME)")
    value = record[by]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{where}: field {by!r} is {json.dumps(value)[:40]}, not a number")
    if not math.isfinite(value):
        raise UserError(f"{where}: field {by!r} is {value}, not a finite number")
    return float(value)


def measure_part(job: SplitJob) -> dict:
    """The measure pass of one read task: its scores and lengths (`.npy`), its rejected rows; its counts."""
    done = job.path("measure")
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    scores: list[float] = []
    lengths: list[int] = []
    reasons: Counter = Counter()
    with atomic_write(job.path("rejected", "jsonl"), durable=False) as rejected:
        for item in read_task(job.task, job.options.text_field, job.options.id_field):
            if type(item) is not Document:
                rejected.write(json.dumps(item.to_json(), ensure_ascii=False).encode("utf-8") + b"\n")
                reasons[reason_kind(item.reason)] += 1
                continue
            scores.append(_score(item, job.options.by, job.task.file.path))
            lengths.append(len(item.text.encode("utf-8", "surrogatepass")))
    with atomic_write(job.path("measure", "npy")) as f:
        np.save(f, np.array(scores, dtype=np.float64))
        np.save(f, np.array(lengths, dtype=np.int64))
    result = {"docs": len(scores), "rejected": sum(reasons.values()), "rejected_reasons": dict(reasons)}
    write_text_atomic(done, json.dumps(result))
    return result


def read_measures(work: Path, index: int) -> tuple[np.ndarray, np.ndarray]:
    """A measure job's (scores, lengths)."""
    with open(work / f"measure-{index:05d}.npy", "rb") as f:
        return np.load(f), np.load(f)


def write_part(job: SplitJob) -> dict:
    """The write pass of one read task: each record into its bucket's part; per bucket, its documents,
    text bytes and lowest and highest score (None where it got none)."""
    done = job.path("write")
    if done.exists():
        return json.loads(done.read_text())
    scores, lengths = read_measures(Path(job.work_dir), job.index)
    buckets = bucket_of(scores, np.array(job.cuts, dtype=np.float64))
    k = job.options.buckets
    with contextlib.ExitStack() as stack:
        parts = []
        for b in range(k):
            raw = stack.enter_context(
                atomic_write(Path(job.out_dir) / bucket_name(b) / f"{part_name(job.index)}{KEPT_SUFFIX}")
            )
            parts.append(stack.enter_context(compressed_part(raw)))
        documents = (
            i for i in read_task(job.task, job.options.text_field, job.options.id_field) if type(i) is Document
        )
        read = 0
        for ordinal, item in enumerate(documents):
            parts[buckets[ordinal]].write(item.record + b"\n")
            read += 1
    if read != len(scores):
        raise RuntimeError(f"{job.task.file.path}: read {read} documents, measured {len(scores)} (the input changed?)")
    result = {
        "docs": np.bincount(buckets, minlength=k).tolist(),
        "text_bytes": np.bincount(buckets, weights=lengths, minlength=k).astype(np.int64).tolist(),
        "lowest": [_float_or_none(scores[buckets == b], np.min) for b in range(k)],
        "highest": [_float_or_none(scores[buckets == b], np.max) for b in range(k)],
    }
    write_text_atomic(done, json.dumps(result))
    return result


def _float_or_none(values: np.ndarray, reduce) -> float | None:
    return float(reduce(values)) if len(values) else None


@dataclass(frozen=True)
class SplitStage(Stage):
    """`buckets`: how many bucket folders the run writes (`SplitOptions.buckets`), the folders it owns."""

    buckets: int = 2
    name: ClassVar[str] = "split"
    kind: ClassVar[Kind] = SPLIT
    row_names: ClassVar[tuple[str, ...]] = (REJECTED_NAME,)

    def owned(self, out_dir: Path) -> tuple[list[Path], list[Path]]:
        folders, trees = super().owned(out_dir)
        return folders + [Path(out_dir) / bucket_name(b) for b in range(self.buckets)], trees

    def options_json(self, options: SplitOptions) -> dict:
        return asdict(options)

    def plan(self, run: Run) -> dict:
        return {
            "tasks": [(t.file.path, t.start, t.end) for t in run.jobs],
            "options": asdict(run.options),
            "version": __version__,
        }

    def reset(self, run: Run) -> None:
        """Another plan's buckets (maybe more of them), its bucket list and mixture go."""
        for folder in run.out_dir.glob(f"{BUCKET_PREFIX}*"):
            shutil.rmtree(folder)
        for name in (BUCKETS_NAME, MIXTURE_NAME):
            (run.out_dir / name).unlink(missing_ok=True)

    def run_jobs(self, run: Run) -> tuple[list[dict], np.ndarray, list[dict]]:
        options, weights = run.options, [t.nbytes for t in run.jobs]
        jobs = [SplitJob(i, t, options, str(run.out_dir), str(run.work)) for i, t in enumerate(run.jobs)]
        measured = run.runner.run(measure_part, jobs, "measure", weights=weights, unit="B")
        if options.thresholds is not None:
            cuts = np.array(options.thresholds, dtype=np.float64)
        elif sum(m["docs"] for m in measured):
            scores, lengths = zip(*(read_measures(run.work, i) for i in range(len(jobs))))
            cuts = weighted_cuts(np.concatenate(scores), np.concatenate(lengths), options.quantiles)
        else:
            return measured, np.empty(0), []  # nothing usable: the record says so
        for b in range(options.buckets):
            (run.out_dir / bucket_name(b)).mkdir(exist_ok=True)
        jobs = [
            SplitJob(i, t, options, str(run.out_dir), str(run.work), tuple(cuts.tolist()))
            for i, t in enumerate(run.jobs)
        ]
        written = run.runner.run(write_part, jobs, "split", weights=weights, unit="B")
        return measured, cuts, written

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        return [run.work / f"rejected-{i:05d}.jsonl" for i in range(len(run.jobs))]

    def after_rows(self, run: Run, results: tuple) -> tuple:
        for b in range(self.buckets):  # an earlier run over more input left these
            remove_parts(run.out_dir / bucket_name(b), len(run.jobs))
        return results

    def stats(self, run: Run, results: tuple[list[dict], np.ndarray, list[dict]]) -> dict:
        return _stats(*results, run.options)

    def publish(self, run: Run, stats: dict) -> None:
        """buckets.json and mixture.yaml, then the record, last."""
        write_text_atomic(run.out_dir / BUCKETS_NAME, json.dumps(stats["buckets"], indent=2) + "\n")
        write_text_atomic(run.out_dir / MIXTURE_NAME, mixture_yaml(stats["buckets"], run.options.mixture))
        super().publish(run, stats)

    def usable(self, run: Run, results: tuple, stats: dict) -> bool:
        return stats["input_docs"] > stats["rejected"]

    def rejection_reasons(self, run: Run, results: tuple) -> Counter:
        return sum((Counter(m["rejected_reasons"]) for m in results[0]), Counter())

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        rows = [("input docs", f"{result['input_docs']:,}"), ("rejected", f"{result['rejected']:,}")]
        total = max(1, result["text_bytes"])
        for b in result["buckets"]:
            rows.append(
                (
                    b["name"],
                    f"{b['docs']:,} docs, {b['text_bytes']:,} bytes ({b['text_bytes'] / total:.1%}), "
                    f"{result['options']['by']} in [{_bound(b['from'], '-inf')}, {_bound(b['to'], 'inf')})",
                )
            )
        rows.append(input_row(result["input_bytes"], seconds))
        return summary_table("split", out_dir, rows, tail=[f"  mixture template: {out_dir / MIXTURE_NAME}"])


def _bound(bound: float | None, unbounded: str) -> str:
    return unbounded if bound is None else f"{bound:.6g}"


def run_split(inputs: list[str], out_dir: Path, options: SplitOptions, runner: JobRunner) -> dict:
    """Split `inputs` into buckets under `out_dir` on `runner` (an entered runner); returns the stats
    written to `stats.json`, with `seconds` and `input_bytes`."""
    return run_stage(SplitStage(options.buckets), inputs, out_dir, options, runner)


def _stats(measured: list[dict], cuts: np.ndarray, written: list[dict], options: SplitOptions) -> dict:
    k = options.buckets
    bounds = [None, *cuts.tolist(), None]
    buckets = []
    for b in range(k):
        lowest = [w["lowest"][b] for w in written if w["lowest"][b] is not None]
        highest = [w["highest"][b] for w in written if w["highest"][b] is not None]
        buckets.append(
            {
                "name": bucket_name(b),
                "from": bounds[b] if written else None,  # the bucket holds scores >= from and < to (None: no bound)
                "to": bounds[b + 1] if written else None,
                "lowest": min(lowest, default=None),
                "highest": max(highest, default=None),
                "docs": sum(w["docs"][b] for w in written),
                "text_bytes": sum(w["text_bytes"][b] for w in written),
            }
        )
    stats = {
        "input_docs": sum(m["docs"] + m["rejected"] for m in measured),
        "rejected": sum(m["rejected"] for m in measured),
        "rejected_reasons": dict(sorted(sum((Counter(m["rejected_reasons"]) for m in measured), Counter()).items())),
        "text_bytes": sum(b["text_bytes"] for b in buckets),
        "buckets": buckets,
        "options": asdict(options),
        "version": __version__,
    }
    if written and sum(b["docs"] for b in buckets) != stats["input_docs"] - stats["rejected"]:
        raise RuntimeError(f"split accounting does not add up: {stats}")
    return stats
