"""Exact and MinHash-LSH near-duplicate removal over corpora of any size that fits on disk.

    stats = run_dedup(["corpus/"], Path("out"), DedupOptions(threshold=0.8), workers=4)

Stages, each a set of independent jobs whose results are files (so a killed run resumes where it
stopped, and the output is the same for any number of workers):

1. scan    (per read task)  read records; write the index part (band hashes, exact hash, shingle
                            set, id, id hash and input line per document), the records that are not
                            their input line verbatim, and the rejected rows.
2. exact   (per part, then per partition)  exact hashes scattered by hash into partitions, then
                            sorted: equal hashes give (duplicate, first occurrence) pairs, written
                            by each match job to pair files by range of the duplicate's key.
3. bands   (same, for band hashes of the documents that are not exact duplicates)  equal band
                            hashes give candidate pairs, written to pair files by hash of the pair.
                            A matched round's bucket files are deleted at once.
4. resolve (per pair partition, main process, per range of keys)  each partition's distinct
                            candidates verified by the exact Jaccard of their shingle sets (the
                            verified ones: links files); connected components over the links
                            (`pretrainkit.dataprep.dedup.clusters`, in the main process); per range of keys,
                            the removed flags and `duplicates.jsonl` rows (per cluster the first
                            document in input order is kept), concatenated in key order.
5. write   (per read task)  copy the kept records, unchanged: from the input file where a record
                            is its line verbatim, else from the scan's record file; and, in a
                            thread of the same job, turn the task's index part into the finished
                            index's, its kept documents only, in place. Then the rest of the
                            task's scan files is deleted: before the first job, what the write
                            stage needs of the earlier ones is recorded (`resolved.json`), and a
                            rerun goes straight on writing, whatever its worker count or memory
                            limit (scanning a task again where a job had begun on its part).

Memory (`--memory-limit`, `pretrainkit.dataprep.dedup.budget`): a worker holds one 256 KB text batch while
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
import os
import shutil
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.dedup.budget import MIN_RANGE_DOCS, DedupBudget, default_memory_limit
from pretrainkit.dataprep.dedup.grouping import band_halves, group_pairs, scatter_entries
from pretrainkit.dataprep.dedup.index import FINISHED_SUFFIXES, DedupIndex, FinishJob, IndexPart, ScanJob, finish_part, part_files_whole, part_name, scan_part, written_part_files
from pretrainkit.dataprep.dedup.kept import WriteJob, write_kept
from pretrainkit.dataprep.dedup.pairs import by_hash, by_range, distinct, pack, partition_pairs, read_partition, unpack, write_fanout
from pretrainkit.dataprep.dedup.resolve import Parts, ResolveJob, VerifyJob, cluster, resolve_range, verify_partition
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.dedup.minhash import MinHasher, lsh_params
from pretrainkit.dataprep.readers import DEDUP_STATS_NAME, discover_inputs, nothing_usable, plan_read_tasks, reason_kind, refuse_inputs_inside
from pretrainkit.dataprep.workdir import open_work_dir, remove_work_dir
from pretrainkit import __version__
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, output_directory, remove_temporaries, write_concatenation_atomic, write_text_atomic, writing_into

BUCKET_CHUNK_DOCS = 1 << 16
WORK_FORMAT = 6  # of the files in .work/: a rerun by code that lays them out otherwise starts afresh
ENTRY_BYTES = 24  # what a match job holds per entry, at most: (h1, h2, key) uint64 (`pretrainkit.dataprep.dedup.grouping`)


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
        if not 0.0 < self.threshold <= 1.0:
            raise UserError(f"--threshold must be in (0, 1], got {self.threshold}")
        if not 8 <= self.num_perm <= 1024:
            raise UserError(f"--num-perm must be in [8, 1024], got {self.num_perm}")
        if not 1 <= self.ngram <= 64:
            raise UserError(f"--ngram must be in [1, 64], got {self.ngram}")


def run_dedup(inputs: list[str], out_dir: Path, options: DedupOptions, workers: int = 1, runner: JobRunner | None = None,
              budget: DedupBudget | None = None) -> dict:
    """Deduplicate `inputs` into `out_dir`; returns the stats written to `out_dir/stats.json`
    (plus `seconds` and `input_bytes` for the summary). The jobs run on `runner` (an entered
    `pretrainkit.dataprep.executors` runner), else on `workers` local processes. `budget` (default: from
    `default_memory_limit()`) sizes the pieces the work is cut into; it never changes the output."""
    budget = budget or DedupBudget.for_limit(default_memory_limit(), runner.workers if runner is not None else workers)
    with writing_into(out_dir):  # outside the local runner: its workers stop before temporaries are swept
        if runner is not None:
            return _dedup(inputs, Path(out_dir), options, runner, budget)
        with LocalRunner(workers) as local:
            return _dedup(inputs, Path(out_dir), options, local, budget)


def _dedup(inputs: list[str], out_dir: Path, options: DedupOptions, runner: JobRunner, budget: DedupBudget) -> dict:
    options.validate()
    started = time.monotonic()
    files = discover_inputs(inputs)
    refuse_inputs_inside(files, out_dir)
    output_directory(out_dir)
    runner.check_paths([f.path for f in files] + ([options.against] if options.against else []), out_dir)
    old = _open_against(options)
    tasks = plan_read_tasks(files, runner=runner)
    bands, rows = lsh_params(options.threshold, options.num_perm) if options.near else (0, 0)

    work = out_dir / ".work"
    index_dir = out_dir / "index"
    _prepare_work_dir(work, index_dir, files, tasks, options, old)
    for d in (out_dir, index_dir):
        remove_temporaries(d)
    (out_dir / DEDUP_STATS_NAME).unlink(missing_ok=True)  # until this run ends, the directory is no finished output

    scan_jobs = [
        ScanJob(i, t, str(work / "parts"), str(work / f"rejected-{i:05d}.jsonl"), str(work / f"records-{i:05d}.jsonl"),
                str(work / f"records-{i:05d}.verbatim"), options.num_perm, options.ngram, options.text_field, options.id_field, bands, rows)
        for i, t in enumerate(tasks)
    ]
    scans = runner.run(scan_part, scan_jobs, "scan", weights=[t.nbytes for t in tasks], unit="B")
    new = DedupIndex.from_parts(work / "parts", options.ngram, [s["docs"] for s in scans])
    old_parts = old.parts if old else []
    all_parts = old_parts + new.parts
    offsets = np.concatenate(([0], np.cumsum([p.docs for p in all_parts], dtype=np.int64)))
    first_new_key = int(offsets[len(old_parts)])
    total = int(offsets[-1])

    if total >= 1 << 32:
        raise UserError(f"{total:,} documents in one run; at most {(1 << 32) - 1:,}: split the corpus and chain runs with --against")
    removed_path = work / "removed.u8"
    resolved_path = work / "resolved.json"  # what the write stage needs of the stages before it
    if resolved_path.exists():  # the write stage had begun: its jobs may have deleted scan files those stages read
        resolved = json.loads(resolved_path.read_text())
    else:
        resolved = _find_duplicates(options, all_parts, offsets, len(old_parts), work, runner, budget, (bands, rows), removed_path)
        write_text_atomic(resolved_path, json.dumps(resolved))
    found = resolved["found"]
    # duplicates.jsonl and rejected.jsonl are joined by a thread of this process while the workers
    # write and index (this process would otherwise copy them, hundreds of MB, with the workers idle).
    with ThreadPoolExecutor(1) as joiner:
        joined = [joiner.submit(write_concatenation_atomic, [Path(p) for p in resolved["rows"]], out_dir / "duplicates.jsonl"),
                  joiner.submit(write_concatenation_atomic, [work / f"rejected-{i:05d}.jsonl" for i in range(len(tasks))],
                                out_dir / "rejected.jsonl")]
        written = runner.run(
            _write_outputs,
            [_OutputJob(WriteJob(i, tasks[i], scan_jobs[i].records_path, scan_jobs[i].verbatim_path, str(out_dir)),
                        FinishJob(str(new.parts[i].base), str(index_dir / part_name(i)), scans[i]["docs"]), scan_jobs[i],
                        str(removed_path), int(offsets[len(old_parts) + i]) - first_new_key, str(work / f"written-{i:05d}.json"))
             for i in range(len(tasks))],
            "write", weights=[t.nbytes for t in tasks], unit="B",
        )
        for j in joined:
            j.result()

    rejected = sum(s["rejected"] for s in scans)
    docs = sum(s["docs"] for s in scans)
    stats = {
        "input_docs": docs + rejected,
        "kept_docs": sum(kept for kept, _ in written),
        "exact_duplicates": sum(e for e, _ in found),
        "near_duplicates": sum(n for _, n in found),
        "rejected": rejected,
        "docs_without_words": sum(s["no_words"] for s in scans),
        "against_docs": first_new_key,
        "options": {k: v for k, v in asdict(options).items() if k != "against"},
        "lsh": {"bands": bands, "rows": rows},
        "version": __version__,
    }
    if stats["input_docs"] != stats["kept_docs"] + stats["exact_duplicates"] + stats["near_duplicates"] + rejected:
        raise RuntimeError(f"dedup accounting does not add up: {stats}")
    meta = DedupIndex.meta(options.ngram, [docs for _, docs in written])
    write_text_atomic(index_dir / "meta.json", json.dumps(meta, indent=1) + "\n")
    _remove_stale_parts(out_dir, index_dir, len(tasks))
    for d in (out_dir, index_dir):
        remove_temporaries(d)  # of job attempts that died mid-write (a retried Ray task)
    write_text_atomic(out_dir / DEDUP_STATS_NAME, json.dumps(stats, indent=2, sort_keys=True) + "\n")
    remove_work_dir(work)
    if docs == 0:
        raise nothing_usable(inputs, _rejection_reasons(out_dir / "rejected.jsonl"), out_dir / "rejected.jsonl")
    return dict(stats, seconds=time.monotonic() - started, input_bytes=sum(t.nbytes for t in tasks))


def _find_duplicates(options: DedupOptions, all_parts: list[IndexPart], offsets: np.ndarray, n_old_parts: int, work: Path,
                     runner: JobRunner, budget: DedupBudget, lsh: tuple[int, int], removed_path: Path) -> dict:
    """The match rounds, verification, clustering and resolve: writes `removed_path` (a flag per new
    document) and returns the resolve jobs' (exact, near) counts and their duplicates.jsonl pieces."""
    bands, rows = lsh
    first_new_key, total = int(offsets[n_old_parts]), int(offsets[-1])
    # ranges of keys (resolve jobs) no larger than the limit allows, and at least two per worker
    per_worker = math.ceil((total - first_new_key) / (2 * runner.workers))
    budget = replace(budget, range_docs=min(budget.range_docs, max(MIN_RANGE_DOCS, per_worker)))
    round_args = (all_parts, offsets, n_old_parts, work, runner, budget)
    ranges = math.ceil(total / budget.range_docs)
    exact_dir, _ = _match_round("exact", *round_args)
    parts = Parts.of(all_parts, offsets)
    labels_path = None
    if options.near:
        _write_exact_flags(exact_dir, ranges, total, budget.range_docs, work / "exact_duplicates.u8")
        candidates_dir, fanout = _match_round("bands", *round_args, lsh=(options.num_perm, bands, rows), skip_path=str(work / "exact_duplicates.u8"))
        links_dir = work / f"links-{candidates_dir.name}"
        links = [links_dir / f"{q:05d}.bin" for q in range(fanout)]
        runner.run(verify_partition,
                   [VerifyJob(str(candidates_dir), q, str(links[q]), parts, options.threshold, budget.verify_pairs, budget.shingle_bytes) for q in range(fanout)],
                   "verify", weights=[partition_pairs(candidates_dir, q) for q in range(fanout)], unit="pair")
        if any(f.stat().st_size for f in links):
            labels_path = work / "labels.u32"
            cluster(links, labels_path, total, budget)

    resolve_dir = work / f"resolve-{budget.range_docs}"
    resolve_jobs = [
        ResolveJob(lo, hi, str(exact_dir), r, str(labels_path) if labels_path else None, str(resolve_dir / f"{r:05d}.removed"),
                   str(resolve_dir / f"{r:05d}.jsonl"), str(resolve_dir / f"{r:05d}.json"), parts, budget.verify_pairs, budget.shingle_bytes, budget.describe_rows)
        for r in range(first_new_key // budget.range_docs, ranges)
        for lo, hi in [(max(r * budget.range_docs, first_new_key), min((r + 1) * budget.range_docs, total))] if lo < hi
    ]
    found = runner.run(resolve_range, resolve_jobs, "resolve", weights=[j.hi - j.lo for j in resolve_jobs], unit="doc")
    write_concatenation_atomic([Path(j.removed_path) for j in resolve_jobs], removed_path)
    return {"found": found, "rows": [j.rows_path for j in resolve_jobs]}


def _open_against(options: DedupOptions) -> DedupIndex | None:
    if options.against is None:
        return None
    old = DedupIndex.open(options.against)
    if old.ngram != options.ngram:  # its shingle sets are of n-grams; any --num-perm or --threshold hashes them
        raise UserError(f"{options.against}: index was built with --ngram {old.ngram}, this run uses --ngram {options.ngram}")
    return old


def _prepare_work_dir(work: Path, index_dir: Path, files, tasks, options: DedupOptions, old: DedupIndex | None) -> None:
    """Keep an interrupted run's finished jobs only if inputs and options are unchanged."""
    plan = {
        "work_format": WORK_FORMAT,
        "inputs": [(f.path, f.size, os.stat(f.path).st_mtime_ns) for f in files],
        "tasks": [(t.file.path, t.start, t.end) for t in tasks],
        "options": asdict(options),
        "against": (str(old.directory.resolve()), [p.docs for p in old.parts]) if old else None,
    }

    def clear_index() -> None:
        for p in index_dir.glob("part-*") if index_dir.is_dir() else []:
            p.unlink()
        (index_dir / "meta.json").unlink(missing_ok=True)

    open_work_dir(work, plan, on_reset=clear_index)
    (work / "parts").mkdir(exist_ok=True)
    index_dir.mkdir(parents=True, exist_ok=True)


def _write_exact_flags(exact_dir: Path, ranges: int, total: int, range_docs: int, path: Path) -> None:
    """uint8 per key, 1 for an exact duplicate (left out of the band round), one range at a time."""
    with atomic_write(path, durable=False) as f:
        for r in range(ranges):
            lo = r * range_docs
            flags = np.zeros(min(range_docs, total - lo), dtype=np.uint8)
            flags[read_partition(exact_dir, r)[:, 0].astype(np.int64) - lo] = 1
            f.write(flags.tobytes())


def _match_round(kind: str, parts: list[IndexPart], offsets: np.ndarray, n_old_parts: int, work: Path, runner: JobRunner,
                 budget: DedupBudget, lsh: tuple[int, int, int] = (0, 0, 0), skip_path: str | None = None) -> tuple[Path, int]:
    """Bucket then match one kind of hash; returns the pair files the match jobs wrote (`pretrainkit.dataprep.dedup.pairs`)
    and their number of partitions. "exact": (later, first occurrence) key pairs, by range of `budget.range_docs` keys of the later. "bands": (low, high)
    candidate pairs, by hash of the pair, distinct within a match partition (not across: the same
    pair may come from several bands)."""
    total = int(offsets[-1])
    per_doc = lsh[1] if kind == "bands" else 1
    # at least two per worker, so that no worker waits on a last, lone partition
    partitions = max(2 * runner.workers, math.ceil(total * ENTRY_BYTES * per_doc / budget.partition_bytes))
    bucket_dir = work / f"buckets-{kind}-{partitions}"  # a rerun with another --memory-limit cuts its own
    # A match partition finds at most two candidates per entry: as many pair partitions keep each
    # verification job within a match job's memory.
    fanout = partitions if kind == "bands" else math.ceil(total / budget.range_docs)
    pairs_dir = work / (f"pairs-{kind}-{partitions}-hash-{fanout}" if kind == "bands" else f"pairs-{kind}-{partitions}-range-{budget.range_docs}")
    matched = pairs_dir / "matched"  # the round's marker: its bucket files are gone, the pairs all there
    if matched.exists():
        return pairs_dir, fanout
    bucket_bounds = runner.run(
        _bucket_part,
        [_BucketJob(kind, str(p.base), p.docs, int(offsets[i]), i, i < n_old_parts, *lsh, partitions, str(bucket_dir), skip_path)
         for i, p in enumerate(parts)],
        f"bucket {kind}", weights=[p.docs for p in parts], unit="doc",
    )
    first_new_key = int(offsets[n_old_parts])
    runs = [tuple((i, int(lo), int(hi)) for i, b in enumerate(bucket_bounds) for lo, hi in zip(b[:, p], b[:, p + 1]) if hi > lo)
            for p in range(partitions)]
    runner.run(_match_partition, [_MatchJob(kind, str(bucket_dir), runs[p], p, first_new_key, str(pairs_dir), fanout, budget.range_docs)
                                  for p in range(partitions)], f"match {kind}",
               weights=[sum(hi - lo for _, lo, hi in r) for r in runs], unit="entry")
    matched.touch()
    # Nothing reads the bucket files again: deleted now, the pages the disk has not taken yet are
    # dropped instead of written back while the later stages work (a gigabyte at 6M documents).
    shutil.rmtree(bucket_dir)
    return pairs_dir, fanout


@dataclass(frozen=True)
class _BucketJob:
    kind: str
    base: str
    docs: int
    offset: int
    part: int
    is_old: bool
    num_perm: int  # (num_perm, bands, rows): the band round's; an old part's signatures are made of its shingle sets
    bands: int
    rows: int
    partitions: int
    bucket_dir: str
    skip_path: str | None  # uint8 per global key, 1 = leave out (exact duplicates, in the band round)


def _bucket_part(job: _BucketJob) -> np.ndarray:
    """Scatter one part's hashes by partition into one file, a chunk of documents at a time (each
    chunk's entries grouped by partition); returns where each chunk's partitions start in it
    (int64 [chunks, partitions + 1], in entries), also written last, as the job's marker."""
    bounds_path = Path(job.bucket_dir) / f"part-{job.part:05d}.bounds"
    if bounds_path.exists():
        return np.fromfile(bounds_path, dtype=np.int64).reshape(-1, job.partitions + 1)
    part = IndexPart(Path(job.base), job.docs)
    eligible = np.ones(job.docs, dtype=bool)  # a finished index holds its run's kept documents only
    if job.skip_path:
        eligible &= np.fromfile(job.skip_path, dtype=np.uint8, count=job.docs, offset=job.offset) == 0
    if job.kind == "bands":
        eligible &= np.asarray(part.counts) > 0  # documents without words have no signature
    chunk_bounds = [np.zeros((0, job.partitions + 1), np.int64)]
    hasher = MinHasher(job.num_perm) if job.kind == "bands" and job.is_old else None
    written = 0
    with atomic_write(Path(job.bucket_dir) / f"part-{job.part:05d}.bin", durable=False) as f:
        for lo in range(0, job.docs, BUCKET_CHUNK_DOCS):
            hi = min(lo + BUCKET_CHUNK_DOCS, job.docs)
            ok = eligible[lo:hi]
            if not ok.any():
                continue
            if job.kind != "bands":
                hashes = np.asarray(part.exact[lo:hi])
                h1, h2 = hashes[:, :1], hashes[:, 1:]
            elif job.is_old:
                h1, h2 = band_halves(part.band_hashes_of_sets(lo, hi, hasher, job.bands, job.rows))
            else:
                h1, h2 = band_halves(part.band_hashes(lo, hi, job.bands, job.rows))
            entries, bounds = scatter_entries(h1, h2, ok, job.offset + lo, job.partitions)
            f.write(entries)
            chunk_bounds.append(written + bounds[None, :])
            written += len(entries)
    bounds = np.concatenate(chunk_bounds)
    with atomic_write(bounds_path, durable=False) as f:
        f.write(bounds.tobytes())
    return bounds


@dataclass(frozen=True)
class _MatchJob:
    kind: str
    bucket_dir: str
    runs: tuple[tuple[int, int, int], ...]  # (part, first entry, end) of the partition's entries in each part's file
    partition: int
    first_new_key: int
    pairs_dir: str
    fanout: int
    range_docs: int


def _match_partition(job: _MatchJob) -> None:
    """Groups of equal (h1, h2) in one partition, as pairs written to pair files (see `_match_round`).

    The groups are found by `pretrainkit.dataprep.dedup.grouping.group_pairs` (a hash table, linear in the
    entries); within a band group each member is paired with the group's first member and with
    its predecessor: enough to connect the group through verified pairs in the common case, and
    linear in the group size even for boilerplate shared by thousands of documents."""
    done = Path(job.pairs_dir) / f"done-{job.partition:05d}"
    if done.exists():  # finished by an earlier, interrupted run
        return
    later, earlier = group_pairs(_read_entries(Path(job.bucket_dir), job.runs, _entry_type(job.kind)), job.kind == "bands")
    if job.kind != "bands":
        pairs = np.stack([later, earlier], axis=1)
        write_fanout(Path(job.pairs_dir), job.partition, pairs, by_range(pairs, job.range_docs), job.fanout)
    else:
        new = later >= job.first_new_key  # old-old pairs were settled by the old run (and earlier < later)
        pairs = unpack(distinct(pack(earlier[new], later[new])), np.uint32)
        write_fanout(Path(job.pairs_dir), job.partition, pairs, by_hash(pairs, job.fanout), job.fanout)
    done.parent.mkdir(parents=True, exist_ok=True)  # no partition may have pairs
    done.touch()


def _entry_type(kind: str) -> type:
    return np.uint32 if kind == "bands" else np.uint64  # `pretrainkit.dataprep.dedup.grouping`: band entries are 12 bytes


def _read_entries(bucket_dir: Path, runs: tuple[tuple[int, int, int], ...], dtype: type) -> np.ndarray:
    """The entries of the runs, in order, as `dtype` [n, 3], by positioned reads into one array."""
    entries = np.empty((sum(hi - lo for _, lo, hi in runs), 3), dtype)
    entry_bytes = entries.itemsize * 3
    at = 0
    for part, lo, hi in runs:
        with open(bucket_dir / f"part-{part:05d}.bin", "rb") as f:
            f.seek(lo * entry_bytes)
            if f.readinto(memoryview(entries[at : at + hi - lo]).cast("B")) != (hi - lo) * entry_bytes:
                raise RuntimeError(f"{f.name}: shorter than its bounds say")
        at += hi - lo
    return entries


@dataclass(frozen=True)
class _OutputJob:
    records: WriteJob
    index: FinishJob
    scan: ScanJob  # run again where a run stopped while the job had begun finishing the index part
    removed_path: str  # uint8 per new document of the run, 1 where it was removed
    first: int  # position of the task's first document in the removed flags
    done_path: str  # (kept records, index documents), written once both are; marks the job finished


def _write_outputs(job: _OutputJob) -> tuple[int, int]:
    """A read task's kept records and its finished index part: (kept records, index documents).
    The index part (`finish_part`, made of the scan's files in place) is finished by a thread while
    this one compresses the records, so neither waits for the disk with the CPU idle. Then what is
    left of the scan's files of the task is deleted: here, while other jobs work, rather than all at
    the end with the workers idle (and pages the disk has not taken yet are dropped unwritten)."""
    done = Path(job.done_path)
    if done.exists():  # finished by an earlier, interrupted run
        return tuple(json.loads(done.read_text()))
    if not part_files_whole(job.index.work_base):  # an earlier run had begun finishing the part
        Path(f"{job.index.work_base}.json").unlink()
        scan_part(job.scan)
    keep = np.fromfile(job.removed_path, dtype=np.uint8, count=job.index.docs, offset=job.first) == 0
    lines = np.fromfile(f"{job.index.work_base}.lines", dtype=np.uint64).astype(np.int64)  # before finish_part takes the file
    arrays = written_part_files(job.index.work_base, job.scan.bands)
    with ThreadPoolExecutor(1) as pool:
        # first the arrays no step reads any more (band and id hashes), in the thread: deleting a
        # file whose blocks are on disk can wait for the device to discard them
        deleted = pool.submit(_unlink, [p for p in arrays if not p.endswith(FINISHED_SUFFIXES)])
        index_docs = pool.submit(finish_part, job.index, keep)
        counts = write_kept(job.records, keep, lines), index_docs.result()
        deleted.result()
    with atomic_write(done, "w", durable=False) as f:
        f.write(json.dumps(counts))
    _unlink(arrays + [job.records.records_path, job.records.verbatim_path])  # the arrays are the index's now, unless it was finished before a rescan
    return counts


def _unlink(paths: list[str]) -> None:
    for path in paths:
        Path(path).unlink(missing_ok=True)


def _rejection_reasons(path: Path) -> Counter:
    with open(path, encoding="utf-8") as f:
        return Counter(reason_kind(json.loads(line)["reason"]) for line in f)


def _remove_stale_parts(out_dir: Path, index_dir: Path, n_tasks: int) -> None:
    """Parts left by an earlier run over more input would otherwise look like output."""
    for d, pattern in ((out_dir, "part-*.jsonl.zst"), (index_dir, "part-*")):
        for p in d.glob(pattern):
            if int(p.name[5:10]) >= n_tasks:
                p.unlink()
