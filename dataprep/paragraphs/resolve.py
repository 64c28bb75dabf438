"""Paragraph dedup's resolve stage: per partition of hashes, which paragraphs are removed.

    removed = resolve_partition(ResolveJob(partition, partitions, tasks, work_dir, resolve_dir))
    runs = task_runs(resolve_dir, partitions, task)   # where task's removals are in each partition's file

A partition is a contiguous range of the scan's hash buckets (`pretrainkit.dataprep.paragraphs.scan`),
read from every task's entry file in task order, so the entries of each hash come in corpus order,
and the rule (`pretrainkit.dataprep.paragraphs.rule`) says which are removed. A job writes
`removed-PPPPP.bin` (uint64 `ordinal << 32 | line` per removed paragraph, grouped by read task,
each task's sorted) and then `removed-PPPPP.bounds` (int64 [tasks + 1]: where each task's run
starts), which marks it done. It holds its partition's entries a few times over (the sort's order
and copies): the partition count is chosen for that (`pretrainkit.dataprep.paragraphs.pipeline`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.paragraphs.rule import later_copies
from pretrainkit.dataprep.paragraphs.scan import BUCKETS, bucket_runs, read_entries, removal_keys
from pretrainkit.files import atomic_write


@dataclass(frozen=True)
class ResolveJob:
    partition: int
    partitions: int
    tasks: int
    work_dir: str
    resolve_dir: str


def _path(resolve_dir: str | Path, partition: int, suffix: str) -> Path:
    return Path(resolve_dir) / f"removed-{partition:05d}.{suffix}"


def resolve_partition(job: ResolveJob) -> int:
    """Resolve one partition (see the module docstring); returns how many paragraphs it removes."""
    bounds_path = _path(job.resolve_dir, job.partition, "bounds")
    if bounds_path.exists():  # finished by an earlier, interrupted run
        return int(np.fromfile(bounds_path, dtype=np.int64)[-1])
    first_bucket = job.partition * BUCKETS // job.partitions
    end_bucket = (job.partition + 1) * BUCKETS // job.partitions
    entries = np.concatenate(
        [np.empty((0, 3), np.uint64)]
        + [
            read_entries(job.work_dir, t, runs)
            for t in range(job.tasks)
            if (runs := bucket_runs(job.work_dir, t, first_bucket, end_bucket))
        ]
    )
    removed = entries[later_copies(entries)]
    del entries
    removed = removed[np.lexsort((removed[:, 2], removed[:, 1]))]  # by document, then line
    tasks = (removed[:, 1] >> np.uint64(32)).astype(np.int64)
    with atomic_write(_path(job.resolve_dir, job.partition, "bin"), durable=False) as f:
        f.write(removal_keys(removed).tobytes())
    with atomic_write(bounds_path, durable=False) as f:
        f.write(np.searchsorted(tasks, np.arange(job.tasks + 1)).astype(np.int64).tobytes())
    return len(removed)


def task_runs(resolve_dir: str | Path, partitions: int, task: int) -> list[tuple[str, int, int]]:
    """(file, first value, end) of read task `task`'s run of removals in each partition's file
    (`pretrainkit.dataprep.paragraphs.removals` reads them)."""
    runs = []
    for p in range(partitions):
        lo, hi = np.fromfile(_path(resolve_dir, p, "bounds"), dtype=np.int64, count=2, offset=task * 8).tolist()
        runs.append((str(_path(resolve_dir, p, "bin")), lo, hi))
    return runs
