"""Exact and MinHash-LSH near-duplicate removal over corpora of any size that fits on disk.

    with LocalRunner(4) as runner:
        stats = run_dedup(["corpus/"], Path("out"), DedupOptions(threshold=0.8), runner)

The run is a sequence of stages, each a module with one entry point, each a set of independent
jobs whose results are files (so a killed run resumes where it stopped, and the output is the
same for any number of workers or executor):

1. scan    (`scan`, per read task)  read records; write the index part (band hashes, exact hash,
                shingle set, id and input line per document), the records that are not their input
                line verbatim, and the rejected rows.
2. match   (`match`, per part, then per partition)  `ExactHashes`: exact hashes scattered by hash
                into partitions, where equal hashes give (duplicate, first occurrence) pairs, written
                to pair files by range of the duplicate's key; then, with near-dedup, `BandHashes`:
                the same for the band hashes of the documents that are not exact duplicates, as
                candidate pairs, written to pair files by hash of the pair.
3. verify  (`verify`, per candidate partition)  each partition's distinct candidates whose shingle
                sets' exact Jaccard reaches the threshold: the links.
4. cluster (`clusters`, main process)  connected components over the links (transitive: a chain of
                links joins a cluster, so two members may be less similar than the threshold).
5. resolve (`resolve`, per range of keys)  the removed flags and `duplicates.jsonl` rows (per
                cluster the first document in input order is kept), concatenated in key order.
6. write   (`write`, per read task)  copy the kept records, unchanged: from the input file where a
                record is its line verbatim, else from the scan's record file; and, in a thread of
                the same job, turn the task's index part into the finished index's, its kept
                documents only, in place. Then the rest of the task's scan files is deleted: before
                the first job, what the write stage needs of the earlier ones is recorded
                (`resolved.json`), and a rerun goes straight on writing, whatever its worker count
                or memory limit (scanning a task again where a job had begun on its part).

Records are identified by their input file and line, never by their id: ids need not be unique,
and records are compared by content only (the same corpus given twice keeps each document once).

Memory (`--memory-limit`, `pretrainkit.dataprep.budget`): a worker holds one 256 KB text batch while
scanning, one chunk of a part's hashes while bucketing them, one partition while matching (24
bytes per hash entry, 12 for a band's; partitions are sized from the limit, so their number grows
with the corpus and their size does not), one pair partition while verifying (as many as the
match partitions: at most two candidates per entry) with a chunk of shingle sets at a time
(`pretrainkit.dataprep.dedup.similarity`: positioned reads, never memory-mapped), and one range of keys while
resolving (`range_docs`, ~64 bytes per key). No pairs or flags of the whole run are ever in one
process: they are files. The main process's only state that grows with the corpus is the
clustering's label per document (4 bytes, a memory-mapped file in the work directory whose pages
the kernel can write back), and it reads the links a range's worth of pairs at a time. At most
2^32 - 1 documents per run.

`--against INDEX`: the old index's kept documents take the first keys, so every cluster that
contains one of them is represented by it, and the new documents in it are removed with
`duplicate_of` naming the old id. Old documents are never written; their band hashes come from
their shingle sets, with this run's `--num-perm` and threshold (the index keeps no signatures).
"""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np

from pretrainkit import __version__
from pretrainkit.arguments import int_in, number_in
from pretrainkit.dataprep.budget import MIN_RANGE_DOCS, DedupBudget, run_budget
from pretrainkit.dataprep.dedup.clusters import cluster
from pretrainkit.dataprep.dedup.index import DedupIndex, Parts
from pretrainkit.dataprep.dedup.match import BandHashes, ExactHashes, PairFiles, match
from pretrainkit.dataprep.dedup.minhash import lsh_params
from pretrainkit.dataprep.dedup.pairs import read_partition
from pretrainkit.dataprep.dedup.resolve import resolve
from pretrainkit.dataprep.dedup.scan import Scanning, scan
from pretrainkit.dataprep.dedup.verify import verify
from pretrainkit.dataprep.dedup.write import write
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.kernels.numba_cache import kernels_cached
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.dataprep.summary import input_row, summary_table
from pretrainkit.dataprep.workdir import remove_parts
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.output_folders import DEDUP, Kind
from pretrainkit.remote.staging import shown
from pretrainkit.stage_layout import PART_PREFIX

WORK_FORMAT = 7  # of the files in .work/: a rerun by code that lays them out otherwise starts afresh
INDEX_NAME = "index"  # OUT/index: the finished index, what a later run reads with --against


# The settings' ranges: `ptk dedup`'s argument types, and the check of a pipeline file's or a caller's options
THRESHOLD = number_in(0, 1, lo_open=True)
NUM_PERM = int_in(8, 1024)
NGRAM = int_in(1, 64)


@dataclass(frozen=True)
class DedupOptions:
    threshold: float = 0.8
    num_perm: int = 128
    ngram: int = 5
    text_field: str = "text"
    id_field: str = "id"
    near: bool = True
    against: str | None = None

    def validate(self) -> None:
        THRESHOLD.check(self.threshold, "threshold")
        NUM_PERM.check(self.num_perm, "num_perm")
        NGRAM.check(self.ngram, "ngram")


@dataclass(frozen=True)
class DedupStage(Stage):
    """`budget`: a `DedupBudget`, or the bytes of memory to share (None: `default_memory_limit()`);
    it sizes the pieces the work is cut into and never changes the output."""

    budget: DedupBudget | int | None = None
    name: ClassVar[str] = "dedup"
    kind: ClassVar[Kind] = DEDUP
    owned_folders: ClassVar[tuple[str, ...]] = (INDEX_NAME,)
    row_names: ClassVar[tuple[str, ...]] = ()  # the write stage's jobs join duplicates.jsonl and rejected.jsonl

    def validate(self, options: DedupOptions) -> None:
        options.validate()

    def announce(self) -> None:
        if not kernels_cached(__package__):  # else the first run on a machine would be silent for its 10-55 s
            print("dedup: compiling kernels (first run only)", file=sys.stderr, flush=True)

    def options_json(self, options: DedupOptions) -> dict:
        return dict(asdict(options), against=options.against and shown(options.against))  # as given: a URL

    def prepare(self, options: DedupOptions) -> DedupIndex | None:
        """The `--against` index, opened and checked."""
        return _open_against(options)

    def checked_files(self, run: Run) -> list[str]:
        return [run.options.against] if run.options.against else []

    def plan(self, run: Run) -> dict:
        old = run.state
        return {
            "work_format": WORK_FORMAT,
            "tasks": [(t.file.path, t.start, t.end) for t in run.jobs],
            "options": asdict(run.options),
            "against": (str(old.directory.resolve()), [p.docs for p in old.parts]) if old else None,
        }

    def reset(self, run: Run) -> None:
        """The finished index of an earlier run of another plan (its kept parts are rewritten or removed)."""
        index_dir = run.out_dir / INDEX_NAME
        for p in index_dir.glob(f"{PART_PREFIX}*") if index_dir.is_dir() else []:
            p.unlink()
        (index_dir / "meta.json").unlink(missing_ok=True)

    def opened(self, run: Run) -> None:
        (run.work / "parts").mkdir(exist_ok=True)
        (run.out_dir / INDEX_NAME).mkdir(parents=True, exist_ok=True)
        super().opened(run)

    def run_jobs(self, run: Run) -> dict:
        """The scan, the stages that find the duplicates (once: `resolved.json`) and the write."""
        options, work = run.options, run.work
        bands, rows = lsh_params(options.threshold, options.num_perm) if options.near else (0, 0)
        scanning = Scanning(
            num_perm=options.num_perm,
            ngram=options.ngram,
            text_field=options.text_field,
            id_field=options.id_field,
            bands=bands,
            rows=rows,
        )
        scan_jobs, scans = scan(run.jobs, work, scanning, run.runner)
        new = DedupIndex.from_parts(work / "parts", options.ngram, [s["docs"] for s in scans])
        old_parts = run.state.parts if run.state else []
        parts = Parts.of(old_parts + new.parts, old=len(old_parts))
        if parts.total >= 1 << 32:
            raise UserError(
                f"{parts.total:,} documents in one run; at most {(1 << 32) - 1:,}: "
                "split the corpus and chain runs with --against"
            )
        removed_path = work / "removed.u8"
        resolved_path = work / "resolved.json"  # what the write stage needs of the stages before it
        if resolved_path.exists():  # the write stage had begun: its jobs may have deleted scan files those stages read
            resolved = json.loads(resolved_path.read_text())
        else:
            budget = run_budget(self.budget, run.runner.workers)
            resolved = _find_duplicates(options, parts, work, run.runner, budget, (bands, rows), removed_path)
            write_text_atomic(resolved_path, json.dumps(resolved))
        written = write(scan_jobs, scans, resolved["rows"], removed_path, run.out_dir, run.runner)
        return {"scans": scans, "found": resolved["found"], "written": written, "parts": parts, "lsh": (bands, rows)}

    def after_rows(self, run: Run, results: dict) -> dict:
        """The finished index: its meta, and no part of an earlier run over more input."""
        index_dir = run.out_dir / INDEX_NAME
        meta = DedupIndex.meta(run.options.ngram, [docs for _, docs in results["written"]])
        write_text_atomic(index_dir / "meta.json", json.dumps(meta, indent=1) + "\n")
        remove_parts(index_dir, len(run.jobs), f"{PART_PREFIX}*")
        return results

    def stats(self, run: Run, results: dict) -> dict:
        scans, found = results["scans"], results["found"]
        bands, rows = results["lsh"]
        rejected = sum(s["rejected"] for s in scans)
        stats = {
            "input_docs": sum(s["docs"] for s in scans) + rejected,
            "kept_docs": sum(kept for kept, _ in results["written"]),
            "exact_duplicates": sum(e for e, _ in found),
            "near_duplicates": sum(n for _, n in found),
            "rejected": rejected,
            "docs_without_words": sum(s["no_words"] for s in scans),
            "against_docs": results["parts"].first_new_key,
            "options": {k: v for k, v in asdict(run.options).items() if k != "against"},
            "lsh": {"bands": bands, "rows": rows},
            "version": __version__,
        }
        if stats["input_docs"] != stats["kept_docs"] + stats["exact_duplicates"] + stats["near_duplicates"] + rejected:
            raise RuntimeError(f"dedup accounting does not add up: {stats}")
        return stats

    def usable(self, run: Run, results: dict, stats: dict) -> bool:
        return stats["input_docs"] > stats["rejected"]

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        rows = [
            ("input docs", f"{result['input_docs']:,}"),
            ("kept", f"{result['kept_docs']:,}"),
            ("exact duplicates", f"{result['exact_duplicates']:,}"),
            ("near duplicates", f"{result['near_duplicates']:,}"),
            ("rejected", f"{result['rejected']:,}"),
            input_row(result["input_bytes"], seconds),
        ]
        if result["against_docs"]:
            rows.insert(1, ("against (old) docs", f"{result['against_docs']:,}"))
        return summary_table("dedup", out_dir, rows)


def run_dedup(
    inputs: list[str], out_dir: Path, options: DedupOptions, runner: JobRunner, budget: DedupBudget | None = None
) -> dict:
    """Deduplicate `inputs` into `out_dir`; returns the stats written to `out_dir/stats.json`
    (plus `seconds` and `input_bytes` for the summary). The jobs run on `runner` (an entered
    `pretrainkit.dataprep.executors` runner)."""
    return run_stage(DedupStage(budget), inputs, out_dir, options, runner)


def _find_duplicates(
    options: DedupOptions,
    parts: Parts,
    work: Path,
    runner: JobRunner,
    budget: DedupBudget,
    lsh: tuple[int, int],
    removed_path: Path,
) -> dict:
    """The match, verify, cluster and resolve stages: writes `removed_path` (a flag per new
    document) and returns the resolve jobs' (exact, near) counts and their duplicates.jsonl pieces."""
    bands, rows = lsh
    # ranges of keys (resolve jobs) no larger than the limit allows, and at least two per worker
    per_worker = math.ceil((parts.total - parts.first_new_key) / (2 * runner.workers))
    budget = replace(budget, range_docs=min(budget.range_docs, max(MIN_RANGE_DOCS, per_worker)))
    exact = match(ExactHashes(), parts, work, runner, budget)
    labels_path = None
    if options.near:
        skip_path = work / "exact_duplicates.u8"
        _write_exact_flags(exact, parts.total, budget.range_docs, skip_path)
        candidates = match(
            BandHashes(num_perm=options.num_perm, bands=bands, rows=rows, skip_path=str(skip_path)),
            parts,
            work,
            runner,
            budget,
        )
        links = verify(candidates, parts, options.threshold, work, runner, budget)
        if any(f.stat().st_size for f in links.files):
            labels_path = work / "labels.u32"
            cluster(links.files, labels_path, parts.total, budget)
            return resolve(parts, exact, (labels_path, links.by_range), work, runner, budget, removed_path)
    return resolve(parts, exact, None, work, runner, budget, removed_path)


def _open_against(options: DedupOptions) -> DedupIndex | None:
    if options.against is None:
        return None
    old = DedupIndex.open(options.against)
    if old.ngram != options.ngram:  # its shingle sets are of n-grams; any --num-perm or --threshold hashes them
        raise UserError(
            f"{options.against}: index was built with --ngram {old.ngram}, this run uses --ngram {options.ngram}"
        )
    return old


def _write_exact_flags(exact: PairFiles, total: int, range_docs: int, path: Path) -> None:
    """uint8 per key, 1 for an exact duplicate (left out of the band round), one range at a time."""
    with atomic_write(path, durable=False) as f:
        for r in range(exact.partitions):
            lo = r * range_docs
            flags = np.zeros(min(range_docs, total - lo), dtype=np.uint8)
            flags[read_partition(exact.directory, r)[:, 0].astype(np.int64) - lo] = 1
            f.write(flags.tobytes())
