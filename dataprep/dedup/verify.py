"""Dedup's verify stage: the band round's candidate pairs whose shingle sets are similar enough.

    links = verify(candidates, parts, threshold, work, runner, budget)

One job per candidate partition reads the partition's pairs (`pretrainkit.dataprep.dedup.pairs`),
drops the repeats (the same pair from other bands) and keeps those whose exact Jaccard of the two
shingle sets reaches the threshold (`pretrainkit.dataprep.dedup.similarity`, a chunk of sets at a
time): the links. It writes them twice: as its links file, (low, high) uint32 key pairs, for the
cluster stage, and both ways round, (key, linked key), to pair files by range of the first key,
where a resolve job finds the links of its range's documents. The links file, written last,
marks the job done.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.dedup.index import Parts
from pretrainkit.dataprep.dedup.match import PairFiles
from pretrainkit.dataprep.dedup.pairs import (
    by_range,
    distinct,
    pack,
    partition_pairs,
    read_partition,
    unpack,
    write_fanout,
)
from pretrainkit.dataprep.dedup.similarity import pairs_reaching
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.files import atomic_write


@dataclass(frozen=True)
class Links:
    files: list[Path]  # (low, high) key pairs, one file per candidate partition
    by_range: PairFiles  # (key, linked key), both ways round, by range of `budget.range_docs` keys of the first


def verify(
    candidates: PairFiles, parts: Parts, threshold: float, work: Path, runner: JobRunner, budget: DedupBudget
) -> Links:
    links_dir = work / f"links-{candidates.directory.name}-range-{budget.range_docs}"
    by_range_files = PairFiles(links_dir / "by-range", math.ceil(parts.total / budget.range_docs))
    jobs = [
        _VerifyJob(
            candidates_dir=str(candidates.directory),
            partition=q,
            links_path=str(links_dir / f"{q:05d}.bin"),
            by_range_dir=str(by_range_files.directory),
            ranges=by_range_files.partitions,
            range_docs=budget.range_docs,
            parts=parts,
            threshold=threshold,
            chunk_pairs=budget.verify_pairs,
            chunk_bytes=budget.shingle_bytes,
        )
        for q in range(candidates.partitions)
    ]
    runner.run(
        _verify_partition,
        jobs,
        "verify",
        weights=[partition_pairs(candidates.directory, q) for q in range(candidates.partitions)],
        unit="pair",
    )
    return Links([Path(j.links_path) for j in jobs], by_range_files)


@dataclass(frozen=True)
class _VerifyJob:
    candidates_dir: str  # pair partitions of (low, high) candidate keys
    partition: int
    links_path: str
    by_range_dir: str
    ranges: int
    range_docs: int
    parts: Parts
    threshold: float
    chunk_pairs: int
    chunk_bytes: int


def _verify_partition(job: _VerifyJob) -> None:
    """Write the partition's distinct candidates whose shingle sets' Jaccard reaches the threshold."""
    if Path(job.links_path).exists():  # finished by an earlier, interrupted run
        return
    found = read_partition(Path(job.candidates_dir), job.partition)
    packed = distinct(pack(found[:, 0], found[:, 1]))  # the same pair from other bands
    del found
    pairs = unpack(packed, np.uint32)
    del packed
    linked = pairs[
        pairs_reaching(job.threshold, pairs, job.parts.open(), job.parts.offsets, job.chunk_pairs, job.chunk_bytes)
    ]
    both_ways = np.concatenate([linked, linked[:, ::-1]])
    write_fanout(Path(job.by_range_dir), job.partition, both_ways, by_range(both_ways, job.range_docs), job.ranges)
    with atomic_write(job.links_path, durable=False) as f:
        f.write(linked.tobytes())
