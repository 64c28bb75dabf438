"""The local executor: a stage's jobs on worker processes of this machine.

    with LocalRunner(workers=4) as runner:
        scans = runner.run(scan_part, jobs, "scan", weights=[job.nbytes for job in jobs], unit="B")
        ...  # later stages reuse the same processes

With more than one worker, the processes are forked once, when the runner is entered (before
any job has started thread pools or grown the parent), and serve every stage. They die with the
runner's process, even when it is killed with SIGKILL; SIGTERM ends a worker quietly (the runner's
process stops the command, `pretrainkit/sigterm.py`), never while it holds a lock of the pool's queues.
With one worker, jobs run in this process; with more, every job runs on a worker, a stage of one
job too, so that this process never holds (nor, through its allocator, keeps) a job's working memory.
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.pool
import multiprocessing.queues
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import FrameType

from pretrainkit.dataprep.executors import J, R, largest_first, limit_threads, stage_progress
from pretrainkit.processes import die_with_parent
from pretrainkit.sigterm import SIGTERM_STATUS, Terminated, deferred_sigterm, sigterm_received


def _held_pool_locks(frame: FrameType | None) -> list:
    """The locks of the pool's queues this worker holds at `frame` (reading a task, writing a result)."""
    held = []
    while frame is not None:
        queue = frame.f_locals.get("self") if frame.f_code.co_filename == mp.queues.__file__ else None
        if isinstance(queue, mp.queues.SimpleQueue):
            lock = {"get": queue._rlock, "put": queue._wlock}.get(frame.f_code.co_name)
            # `_is_mine()`: held by this thread (a lock's count alone is copied by fork from the parent)
            if lock is not None and lock._semlock._is_mine():
                held.append(lock)
        frame = frame.f_back
    return held


def _exit_once_released(locks: list) -> None:
    while any(lock._semlock._count() for lock in locks):
        time.sleep(0.01)
    os._exit(SIGTERM_STATUS)


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    """End the worker quietly (the pool's end sends SIGTERM, so may a scheduler to the whole process
    group), at once unless it holds a lock of the pool's queues: a worker gone with one leaves the pool's
    end waiting for ever on it. Then it ends the moment it lets go (a watcher thread sees that; the
    worker itself may be blocked reading the next task)."""
    held = _held_pool_locks(frame)
    if not held:
        os._exit(SIGTERM_STATUS)
    threading.Thread(target=_exit_once_released, args=(held,), daemon=True).start()


def _call(payload: tuple[Callable, int, object]) -> tuple[int, object]:
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
            with deferred_sigterm():  # a SIGTERM inside Pool() would leave a pool no one ends
                self._pool = ctx.Pool(self.workers, initializer=_start_worker, initargs=(os.getpid(),))
            if sigterm_received():
                self.__exit__(Terminated, None, None)
                raise Terminated
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
