"""The local executor: a stage's jobs on worker processes of this machine.

    with LocalRunner(workers=4) as runner:
        scans = runner.run(scan_part, jobs, "scan", weights=[job.nbytes for job in jobs], unit="B")
        ...  # later stages reuse the same processes

With more than one worker, the processes are forked once, when the runner is entered (before
any job has started thread pools or grown the parent), and serve every stage. They die with the
runner's process, even when it is killed with SIGKILL; SIGTERM ends a worker quietly (the runner's
process stops the command, `pretrainkit/sigterm.py`) and never while it holds a lock of the pool's.
With one worker, jobs run in this process; with more, every job runs on a worker, a stage of one
job too, so that this process never holds (nor, through its allocator, keeps) a job's working memory.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import multiprocessing.pool
import os
import signal
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from pretrainkit.dataprep.executors import J, R, largest_first, limit_threads, stage_progress
from pretrainkit.processes import die_with_parent
from pretrainkit.sigterm import SIGTERM_STATUS


class _Worker:
    stopping = False  # a SIGTERM came while this worker was reading or writing the pool's pipes


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """End the worker at once and quietly (the pool's end sends SIGTERM, so may a scheduler to the whole
    process group), except while it reads or writes the pool's pipes: it holds the pool's lock on them
    then, and a worker gone with it leaves the pool's end waiting for ever. It ends at its next job
    instead, or on the end-of-work sentinel the pool's end sends it."""
    while frame is not None:
        if frame.f_code.co_filename == mp.connection.__file__:
            _Worker.stopping = True
            return
        frame = frame.f_back
    os._exit(SIGTERM_STATUS)


def _call(payload: tuple[Callable, int, object]) -> tuple[int, object]:
    if _Worker.stopping:
        os._exit(SIGTERM_STATUS)
    fn, index, job = payload
    return index, fn(job)


def _start_worker(parent: int) -> None:
    die_with_parent(parent)
    signal.signal(signal.SIGTERM, _on_sigterm)  # in place of the parent's, which a fork inherits
    limit_threads(1)


class LocalRunner:
    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._pool: multiprocessing.pool.Pool | None = None

    def __enter__(self) -> LocalRunner:
        if self.workers > 1:
            ctx = mp.get_context("fork" if sys.platform.startswith("linux") else "spawn")
            self._pool = ctx.Pool(self.workers, initializer=_start_worker, initargs=(os.getpid(),))
        return self

    def __exit__(self, *exc) -> None:
        if self._pool is not None:
            self._pool.terminate() if exc[0] else self._pool.close()
            self._pool.join()
            self._pool = None

    def run(
        self,
        fn: Callable[[J], R],
        jobs: Sequence[J],
        desc: str,
        weights: Sequence[float] | None = None,
        unit: str = "job",
    ) -> list[R]:
        weights = list(weights) if weights is not None else [1.0] * len(jobs)
        results: list = [None] * len(jobs)
        with stage_progress(desc, weights, unit) as bar:
            if self._pool is None:
                for i, job in enumerate(jobs):
                    results[i] = fn(job)
                    bar.update(weights[i])
                return results
            for i, result in self._pool.imap_unordered(_call, [(fn, i, jobs[i]) for i in largest_first(weights)]):
                results[i] = result
                bar.update(weights[i])
        return results

    def check_paths(self, inputs: Sequence[str], out_dir: Path) -> None:
        """Nothing to check: the workers share this machine's filesystem."""
