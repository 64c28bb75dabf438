"""Dedup's verify stage: the band round's candidate pairs whose shingle sets are similar enough.

    links = verify(candidates, parts, threshold, work, runner, budget)   # a links file per partition

One job per candidate partition reads the partition's pairs (`pretrainkit.dataprep.dedup.pairs`),
drops the repeats (the same pair from other bands) and keeps those whose exact Jaccard of the two
shingle sets reaches the threshold (`pretrainkit.dataprep.dedup.similarity`, a chunk of sets at a
time): its links file, (low, high) uint32 key pairs, whose existence marks the job done.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.dedup.budget import DedupBudget
from pretrainkit.dataprep.dedup.index import Parts
from pretrainkit.dataprep.dedup.match import PairFiles
from pretrainkit.dataprep.dedup.pairs import distinct, pack, partition_pairs, read_partition, unpack
from pretrainkit.dataprep.dedup.similarity import pairs_reaching
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.files import atomic_write


def verify(candidates: PairFiles, parts: Parts, threshold: float, work: Path, runner: JobRunner, budget: DedupBudget) -> list[Path]:
    """The links files, one per candidate partition, in partition order."""
    links_dir = work / f"links-{candidates.directory.name}"
    jobs = [_VerifyJob(candidates_dir=str(candidates.directory), partition=q, links_path=str(links_dir / f"{q:05d}.bin"), parts=parts,
                       threshold=threshold, chunk_pairs=budget.verify_pairs, chunk_bytes=budget.shingle_bytes)
            for q in range(candidates.partitions)]
    runner.run(_verify_partition, jobs, "verify", weights=[partition_pairs(candidates.directory, q) for q in range(candidates.partitions)],
               unit="pair")
    return [Path(j.links_path) for j in jobs]


@dataclass(frozen=True)
class _VerifyJob:
    candidates_dir: str  # pair partitions of (low, high) candidate keys
    partition: int
    links_path: str
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
    linked = pairs[pairs_reaching(job.threshold, pairs, job.parts.open(), job.parts.offsets, job.chunk_pairs, job.chunk_bytes)]
    with atomic_write(job.links_path, durable=False) as f:
        f.write(linked.tobytes())
