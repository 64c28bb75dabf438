"""Dedup's match stage: documents with an equal hash of one kind, as pairs of keys in pair files.

    exact = match(ExactHashes(), parts, work, runner, budget)          # (later, first occurrence) pairs
    candidates = match(BandHashes(num_perm, bands, rows, skip_path), parts, work, runner, budget)

A round is two sets of jobs. Bucket (per index part): the part's hash entries (h1, h2, key),
scattered by hash into one file per part with each chunk's partitions in order. Match (per
partition): a partition's entries from every part, grouped by equal hashes
(`pretrainkit.dataprep.dedup.grouping`), the pairs fanned out to pair files
(`pretrainkit.dataprep.dedup.pairs`). The kind says which hash, which documents take part, and
how the pairs are laid out for the stage that reads them: `ExactHashes` by range of the later
key (a resolve job reads its range's), `BandHashes` by hash of the pair (a verify job reads one
partition of candidates). A round's `matched` marker is written once every pair file is: its
bucket files are deleted then, and a rerun after a kill skips the round.
"""

from __future__ import annotations

import math
import shutil
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import ClassVar

import numpy as np

from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.dedup.grouping import band_halves, group_pairs, scatter_entries
from pretrainkit.dataprep.dedup.index import IndexPart, Parts
from pretrainkit.dataprep.dedup.minhash import MinHasher
from pretrainkit.dataprep.dedup.pairs import by_hash, by_range, distinct, pack, unpack, write_fanout
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.files import atomic_write
from pretrainkit.stage_layout import part_name

BUCKET_CHUNK_DOCS = 1 << 16
ENTRY_BYTES = (
    24  # what a match job holds per entry, at most: (h1, h2, key) uint64 (`pretrainkit.dataprep.dedup.grouping`)
)


@dataclass(frozen=True)
class PairFiles:
    """A round's pair files: `directory` holds `partitions` partitions (`pretrainkit.dataprep.dedup.pairs`)."""

    directory: Path
    partitions: int


@dataclass(frozen=True)
class ExactHashes:
    """The exact (content) hash of every document: each later document paired with the first
    occurrence of its hash, by range of `budget.range_docs` keys of the later."""

    name: ClassVar[str] = "exact"
    entry_type: ClassVar[type] = np.uint64
    hashes_per_doc: ClassVar[int] = 1
    pair_predecessors: ClassVar[bool] = False  # each document with its group's first only

    def eligible(self, part: IndexPart, offset: int) -> np.ndarray:
        return np.ones(part.docs, dtype=bool)  # a finished index holds its run's kept documents only

    def hashes(self, part: IndexPart, lo: int, hi: int, is_old: bool) -> tuple[np.ndarray, np.ndarray]:
        hashes = np.asarray(part.exact[lo:hi])
        return hashes[:, :1], hashes[:, 1:]

    def pair_files(self, pairs_dir: str, total: int, range_docs: int, partitions: int) -> PairFiles:
        return PairFiles(Path(f"{pairs_dir}-range-{range_docs}"), math.ceil(total / range_docs))

    def write_pairs(self, later: np.ndarray, earlier: np.ndarray, job: _MatchJob) -> None:
        pairs = np.stack([later, earlier], axis=1)
        write_fanout(Path(job.pairs_dir), job.partition, pairs, by_range(pairs, job.range_docs), job.fanout)


@dataclass(frozen=True)
class BandHashes:
    """The LSH band hashes of the documents with words that `skip_path` does not flag (uint8 per
    key, 1 = an exact duplicate): (low, high) candidate pairs, by hash of the pair, distinct within
    a match partition (not across: the same pair may come from several bands). An old part's
    signatures are made of its shingle sets, with this run's `num_perm`."""

    num_perm: int
    bands: int
    rows: int
    skip_path: str

    name: ClassVar[str] = "bands"
    entry_type: ClassVar[type] = np.uint32  # `pretrainkit.dataprep.dedup.grouping`: band entries are 12 bytes
    pair_predecessors: ClassVar[bool] = True

    @property
    def hashes_per_doc(self) -> int:
        return self.bands

    def eligible(self, part: IndexPart, offset: int) -> np.ndarray:
        skipped = np.fromfile(self.skip_path, dtype=np.uint8, count=part.docs, offset=offset) != 0
        return ~skipped & (np.asarray(part.counts) > 0)  # documents without words have no signature

    def hashes(self, part: IndexPart, lo: int, hi: int, is_old: bool) -> tuple[np.ndarray, np.ndarray]:
        if is_old:
            return band_halves(part.band_hashes_of_sets(lo, hi, self._hasher, self.bands, self.rows))
        return band_halves(part.band_hashes(lo, hi, self.bands, self.rows))

    @cached_property
    def _hasher(self) -> MinHasher:  # made in the worker that hashes an old part, once per job
        return MinHasher(self.num_perm)

    def pair_files(self, pairs_dir: str, total: int, range_docs: int, partitions: int) -> PairFiles:
        # A match partition finds at most two candidates per entry: as many pair partitions keep
        # each verification job within a match job's memory.
        return PairFiles(Path(f"{pairs_dir}-hash-{partitions}"), partitions)

    def write_pairs(self, later: np.ndarray, earlier: np.ndarray, job: _MatchJob) -> None:
        new = later >= job.first_new_key  # old-old pairs were settled by the old run (and earlier < later)
        pairs = unpack(distinct(pack(earlier[new], later[new])), np.uint32)
        write_fanout(Path(job.pairs_dir), job.partition, pairs, by_hash(pairs, job.fanout), job.fanout)


MatchKind = ExactHashes | BandHashes


def match(kind: MatchKind, parts: Parts, work: Path, runner: JobRunner, budget: DedupBudget) -> PairFiles:
    """Bucket then match one kind of hash over every part (see the module docstring)."""
    # at least two per worker, so that no worker waits on a last, lone partition
    partitions = max(
        2 * runner.workers, math.ceil(parts.total * ENTRY_BYTES * kind.hashes_per_doc / budget.partition_bytes)
    )
    bucket_dir = work / f"buckets-{kind.name}-{partitions}"  # a rerun with another --memory-limit cuts its own
    out = kind.pair_files(str(work / f"pairs-{kind.name}-{partitions}"), parts.total, budget.range_docs, partitions)
    matched = out.directory / "matched"  # the round's marker: its bucket files are gone, the pairs all there
    if matched.exists():
        return out
    described = parts.open()
    bucket_bounds = runner.run(
        _bucket_part,
        [
            _BucketJob(
                kind=kind,
                part=i,
                base=str(p.base),
                docs=p.docs,
                offset=int(parts.offsets[i]),
                is_old=i < parts.old,
                partitions=partitions,
                bucket_dir=str(bucket_dir),
            )
            for i, p in enumerate(described)
        ],
        f"bucket {kind.name}",
        weights=[p.docs for p in described],
        unit="doc",
    )
    runs = [
        tuple(
            (i, int(lo), int(hi))
            for i, b in enumerate(bucket_bounds)
            for lo, hi in zip(b[:, p], b[:, p + 1])
            if hi > lo
        )
        for p in range(partitions)
    ]
    runner.run(
        _match_partition,
        [
            _MatchJob(
                kind=kind,
                bucket_dir=str(bucket_dir),
                runs=runs[p],
                partition=p,
                first_new_key=parts.first_new_key,
                pairs_dir=str(out.directory),
                fanout=out.partitions,
                range_docs=budget.range_docs,
            )
            for p in range(partitions)
        ],
        f"match {kind.name}",
        weights=[sum(hi - lo for _, lo, hi in r) for r in runs],
        unit="entry",
    )
    matched.parent.mkdir(parents=True, exist_ok=True)  # no partition may have pairs
    matched.touch()
    # Nothing reads the bucket files again: deleted now, the pages the disk has not taken yet are
    # dropped instead of written back while the later stages work (a gigabyte at 6M documents).
    shutil.rmtree(bucket_dir)
    return out


@dataclass(frozen=True)
class _BucketJob:
    kind: MatchKind
    part: int
    base: str
    docs: int
    offset: int  # the part's first key
    is_old: bool  # a part of the --against index
    partitions: int
    bucket_dir: str


def _bucket_part(job: _BucketJob) -> np.ndarray:
    """Scatter one part's hashes by partition into one file, a chunk of documents at a time (each
    chunk's entries grouped by partition); returns where each chunk's partitions start in it
    (int64 [chunks, partitions + 1], in entries), also written last, as the job's marker."""
    bounds_path = Path(job.bucket_dir) / f"{part_name(job.part)}.bounds"
    if bounds_path.exists():
        return np.fromfile(bounds_path, dtype=np.int64).reshape(-1, job.partitions + 1)
    part = IndexPart(Path(job.base), job.docs)
    eligible = job.kind.eligible(part, job.offset)
    chunk_bounds = [np.zeros((0, job.partitions + 1), np.int64)]
    written = 0
    with atomic_write(Path(job.bucket_dir) / f"{part_name(job.part)}.bin", durable=False) as f:
        for lo in range(0, job.docs, BUCKET_CHUNK_DOCS):
            hi = min(lo + BUCKET_CHUNK_DOCS, job.docs)
            ok = eligible[lo:hi]
            if not ok.any():
                continue
            h1, h2 = job.kind.hashes(part, lo, hi, job.is_old)
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
    kind: MatchKind
    bucket_dir: str
    runs: tuple[tuple[int, int, int], ...]  # (part, first entry, end) of the partition's entries in each part's file
    partition: int
    first_new_key: int
    pairs_dir: str
    fanout: int
    range_docs: int


def _match_partition(job: _MatchJob) -> None:
    """Groups of equal (h1, h2) in one partition, as pairs written to pair files (`MatchKind.write_pairs`).

    The groups are found by `pretrainkit.dataprep.dedup.grouping.group_pairs` (a hash table, linear in the
    entries); within a band group each member is paired with the group's first member and with
    its predecessor: enough to connect the group through verified pairs in the common case, and
    linear in the group size even for boilerplate shared by thousands of documents."""
    done = Path(job.pairs_dir) / f"done-{job.partition:05d}"
    if done.exists():  # finished by an earlier, interrupted run
        return
    entries = _read_entries(Path(job.bucket_dir), job.runs, job.kind.entry_type)
    later, earlier = group_pairs(entries, predecessors=job.kind.pair_predecessors)
    job.kind.write_pairs(later, earlier, job)
    done.parent.mkdir(parents=True, exist_ok=True)  # no partition may have pairs
    done.touch()


def _read_entries(bucket_dir: Path, runs: tuple[tuple[int, int, int], ...], dtype: type) -> np.ndarray:
    """The entries of the runs, in order, as `dtype` [n, 3], by positioned reads into one array."""
    entries = np.empty((sum(hi - lo for _, lo, hi in runs), 3), dtype)
    entry_bytes = entries.itemsize * 3
    at = 0
    for part, lo, hi in runs:
        with open(bucket_dir / f"{part_name(part)}.bin", "rb") as f:
            f.seek(lo * entry_bytes)
            if f.readinto(memoryview(entries[at : at + hi - lo]).cast("B")) != (hi - lo) * entry_bytes:
                raise RuntimeError(f"{f.name}: shorter than its bounds say")
        at += hi - lo
    return entries
