"""Runs a pipeline's stages as independent jobs on local worker processes, with progress bars.

    with JobRunner(workers=4) as runner:
        scans = runner.run(scan_part, jobs, "scan", weights=[job.nbytes for job in jobs], unit="B")
        ...  # later stages reuse the same processes

Results come back in job order whatever the number of workers, so a stage's output never
depends on scheduling. Jobs are handed out largest first (by `weights`) to balance the load. The
worker processes are started once, at the first stage that has more than one job, and serve
every later stage (starting a pool costs ~20 ms per stage, a lot for a fast stage). Jobs and
results are pickled; a `UserError` raised in a worker reaches the caller unchanged.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.pool
import sys
from typing import Callable, Sequence, TypeVar

from pretrainkit.progress import progress_bar

J = TypeVar("J")
R = TypeVar("R")


def _call(payload: tuple[Callable, int, object]) -> tuple[int, object]:
    fn, index, job = payload
    return index, fn(job)


class JobRunner:
    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._pool: multiprocessing.pool.Pool | None = None

    def __enter__(self) -> "JobRunner":
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate() if exc[0] else self._pool.close()
            self._pool.join()
            self._pool = None

    def run(self, fn: Callable[[J], R], jobs: Sequence[J], desc: str,
            weights: Sequence[float] | None = None, unit: str = "job") -> list[R]:
        weights = list(weights) if weights is not None else [1.0] * len(jobs)
        results: list = [None] * len(jobs)
        with progress_bar(total=sum(weights), desc=desc, unit=unit, unit_scale=True, leave=False) as bar:
            if self.workers == 1 or len(jobs) <= 1:
                for i, job in enumerate(jobs):
                    results[i] = fn(job)
                    bar.update(weights[i])
                return results
            order = sorted(range(len(jobs)), key=lambda i: -weights[i])
            for i, result in self._processes().imap_unordered(_call, [(fn, i, jobs[i]) for i in order]):
                results[i] = result
                bar.update(weights[i])
        return results

    def _processes(self) -> multiprocessing.pool.Pool:
        if self._pool is None:
            ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
            self._pool = ctx.Pool(self.workers)
        return self._pool
