"""Dedup's resolve stage: candidates verified, clusters found, and what each range of keys removes.

    verify_partition(VerifyJob(...))     # a worker: one pair partition's candidates -> its links file
    cluster(link_files, labels_path, total, budget)   # the main process: component labels, a file
    resolve_range(ResolveJob(...))       # a worker: removed flags and duplicates rows of a key range

Nothing here holds a stage's pairs or a flag per document in memory: candidates and exact pairs
come from pair files (`pretrainkit.dataprep.dedup.pairs`) a partition at a time; the verified pairs (links)
go to one file per partition; the clustering keeps its labels (4 bytes per key) in a
memory-mapped file of the work directory and reads the links a chunk at a time; and each range
job writes its piece of `removed.u8` and `duplicates.jsonl`, which the pipeline concatenates.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.dedup.budget import DedupBudget
from pretrainkit.dataprep.dedup.clusters import label_components
from pretrainkit.dataprep.dedup.index import IndexPart
from pretrainkit.dataprep.dedup.pairs import distinct, pack, pair_chunks, read_partition, unpack
from pretrainkit.dataprep.dedup.rows import write_duplicates
from pretrainkit.dataprep.dedup.similarity import pair_similarities, pairs_reaching
from pretrainkit.files import atomic_write, write_text_atomic

LABEL = np.dtype("<u4")


@dataclass(frozen=True)
class Parts:
    """What a job needs to read the index parts: (base, docs) of each, and the offsets."""

    described: tuple[tuple[str, int], ...]
    offsets: np.ndarray

    @classmethod
    def of(cls, parts: list[IndexPart], offsets: np.ndarray) -> "Parts":
        return cls(tuple((str(p.base), p.docs) for p in parts), offsets)

    def open(self) -> list[IndexPart]:
        return [IndexPart(Path(b), n) for b, n in self.described]


@dataclass(frozen=True)
class VerifyJob:
    candidates_dir: str  # pair partitions of (low, high) candidate keys
    partition: int
    links_path: str
    parts: Parts
    threshold: float
    chunk_pairs: int
    chunk_bytes: int


def verify_partition(job: VerifyJob) -> None:
    """Write the partition's distinct candidates whose shingle sets' Jaccard reaches the threshold."""
    if Path(job.links_path).exists():  # finished by an earlier, interrupted run
        return
    found = read_partition(Path(job.candidates_dir), job.partition)
    packed = distinct(pack(found[:, 0], found[:, 1]))  # the same pair from other bands
    del found
    pairs = unpack(packed, np.uint32)
    del packed
    linked = pairs[pairs_reaching(job.threshold, pairs, job.parts.open(), job.parts.offsets, job.chunk_pairs, job.chunk_bytes)]
    with atomic_write(job.links_path, durable=False) as f:
        f.write(linked.tobytes())


def cluster(link_files: list[Path], labels_path: Path, total: int, budget: DedupBudget) -> None:
    """Write `labels_path`: uint32 [total], the smallest key of each key's component over the links
    (the key itself when it has none), built in place in a memory-mapped temporary, then renamed."""
    if labels_path.exists():  # finished by an earlier, interrupted run
        return
    with atomic_write(labels_path, durable=False) as f:
        for lo in range(0, total, budget.range_docs):
            f.write(np.arange(lo, min(lo + budget.range_docs, total), dtype=LABEL).tobytes())
        f.flush()
        label = np.memmap(f.name, dtype=LABEL, mode="r+", shape=(total,))
        label_components(label, lambda: (c for p in link_files for c in pair_chunks(p, budget.range_docs)), budget.range_docs)
        label.flush()
        del label


@dataclass(frozen=True)
class ResolveJob:
    lo: int  # keys lo .. hi - 1, new documents all, within one range of the exact pair files
    hi: int
    exact_dir: str
    exact_partition: int
    labels_path: str | None  # None: no near-duplicate links (or --no-near)
    removed_path: str
    rows_path: str
    done_path: str
    parts: Parts
    verify_pairs: int
    shingle_bytes: int
    describe_rows: int


def resolve_range(job: ResolveJob) -> tuple[int, int]:
    """Removed flags (uint8 per key) and duplicates.jsonl rows of keys lo .. hi - 1; returns the
    (exact, near) duplicates among them. An exact duplicate names its first occurrence; a near one
    its component's smallest key, with the Jaccard of the two."""
    done = Path(job.done_path)
    if done.exists():  # finished by an earlier, interrupted run
        return tuple(json.loads(done.read_text()))
    exact = read_partition(Path(job.exact_dir), job.exact_partition).astype(np.int64)
    exact = exact[exact[:, 0] >= job.lo]  # the range's keys below lo are old documents
    members = roots = np.empty(0, np.int64)
    if job.labels_path is not None:
        keys = np.arange(job.lo, job.hi, dtype=np.int64)
        label = np.fromfile(job.labels_path, dtype=LABEL, count=job.hi - job.lo, offset=job.lo * LABEL.itemsize)
        linked = label != keys
        members, roots = keys[linked], label[linked].astype(np.int64)
    removed = np.zeros(job.hi - job.lo, dtype=np.uint8)
    removed[exact[:, 0] - job.lo] = 1
    removed[members - job.lo] = 1
    parts = job.parts.open()
    similarity = pair_similarities(np.stack([members, roots], axis=1), parts, job.parts.offsets, job.verify_pairs, job.shingle_bytes)
    with atomic_write(job.removed_path, durable=False) as f:
        f.write(removed.tobytes())
    write_duplicates(Path(job.rows_path), np.concatenate([exact[:, 0], members]), np.concatenate([exact[:, 1], roots]),
                     np.concatenate([np.zeros(len(exact), np.int8), np.ones(len(members), np.int8)]),
                     np.concatenate([np.ones(len(exact)), similarity]), parts, job.parts.offsets, job.describe_rows)
    counts = (len(exact), len(members))
    write_text_atomic(done, json.dumps(counts))
    return counts
