"""Runs a stage's independent jobs on local worker processes, with a progress bar.

    results = run_jobs(scan_part, jobs, workers=4, desc="scan", weights=[job.nbytes for job in jobs])

Results come back in job order whatever the number of workers, so a stage's output never
depends on scheduling. Jobs are handed out largest first (by `weights`) to balance the load.
A `UserError` raised in a worker reaches the caller unchanged.
"""

from __future__ import annotations

import multiprocessing as mp
import sys
from typing import Callable, Sequence, TypeVar

from tqdm import tqdm

J = TypeVar("J")
R = TypeVar("R")


def _call(payload: tuple[Callable, int, object]) -> tuple[int, object]:
    fn, index, job = payload
    return index, fn(job)


def run_jobs(
    fn: Callable[[J], R],
    jobs: Sequence[J],
    workers: int,
    desc: str,
    weights: Sequence[float] | None = None,
    unit: str = "job",
) -> list[R]:
    weights = list(weights) if weights is not None else [1.0] * len(jobs)
    results: list = [None] * len(jobs)
    bar = tqdm(total=sum(weights), desc=desc, unit=unit, unit_scale=True, disable=None, file=sys.stderr, leave=False)
    with bar:
        if workers <= 1 or len(jobs) <= 1:
            for i, job in enumerate(jobs):
                results[i] = fn(job)
                bar.update(weights[i])
            return results
        order = sorted(range(len(jobs)), key=lambda i: -weights[i])
        ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
        with ctx.Pool(min(workers, len(jobs))) as pool:
            for i, result in pool.imap_unordered(_call, [(fn, i, jobs[i]) for i in order]):
                results[i] = result
                bar.update(weights[i])
    return results
