"""The local executor: a stage's jobs on worker processes of this machine.

    with LocalRunner(workers=4) as runner:
        scans = runner.run(scan_part, jobs, "scan", weights=[job.nbytes for job in jobs], unit="B")
        ...  # later stages reuse the same processes

With more than one worker, the processes start once, when the runner is entered (before any job
has started thread pools or grown the parent), and serve every stage. They are forked from this
process where it is single-threaded (the cheapest start); where it has threads (a notebook, an
application, a test process that started Ray or ran a `tokenizers` batch, `ptk` itself once numpy
has started its BLAS pool), which a fork would copy holding their locks, multiprocessing's
forkserver forks them and they take this process's environment (`pretrainkit/processes.py`).
Either way a job function and its jobs travel to the workers pickled by reference (module-level
functions, imported there). With one worker, jobs run in this process; with more, every job runs on
a worker, a stage of one job too, so that this process never holds (nor, through its allocator,
keeps) a job's working memory.

Each worker talks to this process over a pipe of its own: no lock is shared between processes, so a
worker may die at any moment (SIGTERM to the process group, as Slurm sends it; SIGKILL; the OOM killer)
without leaving anyone waiting (multiprocessing.Pool's shared queues hung when a worker died holding
their lock). Workers die with this process, even when it is killed with SIGKILL; on SIGTERM and
Ctrl-C they end quietly and this process stops the command (`pretrainkit/sigterm.py`).
"""

from __future__ import annotations

import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import traceback
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.dataprep.executors import J, R, largest_first, limit_threads, stage_progress
from pretrainkit.errors import UserError
from pretrainkit.processes import die_when_hung_up, die_with_parent, start_context, take_environment
from pretrainkit.sigterm import sigterm_received, sigterm_seen_elsewhere

STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


class WorkerTraceback(Exception):
    """Where a job's unexpected exception was raised, in the worker (set as that exception's cause)."""


@dataclass
class _Worker:
    process: mp.process.BaseProcess
    conn: mp.connection.Connection


def _failure(exc: BaseException) -> tuple[bool, object]:
    """A job's exception as the worker sends it: itself, with the worker's traceback if it is a bug."""
    text = "".join(traceback.format_exception(exc))
    try:
        mp.reduction.ForkingPickler.dumps(exc)
    except Exception:
        exc = RuntimeError(f"{type(exc).__name__}: {exc}")  # a job's exception that cannot travel
    return False, (exc, text)


def _serve(
    conn: mp.connection.Connection,
    parent: int | None,
    inherited: list[mp.connection.Connection],
    environment: dict[str, str] | None,
) -> None:
    """A worker: (fn, index, job) in, (index, ok, result or failure) out, until the pipe closes.
    Forked from the parent (`parent`, its pid) or by the forkserver (`environment`, the parent's)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # in place of the parent's, which a fork inherits
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the group: the parent stops the run
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    if environment is None:
        die_with_parent(parent)
    else:
        take_environment(environment)
        die_when_hung_up(conn.fileno())  # the parent's end of the pipe closes when it dies
    for other in inherited:  # the other workers' pipes, copied by fork
        other.close()
    limit_threads(1)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        if task is None:
            return
        fn, index, job = task
        try:
            reply = (index, True, fn(job))
        except BaseException as exc:
            reply = (index, *_failure(exc))
        conn.send(reply)


@contextmanager
def _stop_signals_blocked() -> Iterator[None]:
    """No SIGTERM or Ctrl-C between a fork and the moment the worker has its own handlers: one that
    came there would run the parent's handler in the worker. The signal waits and comes after."""
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _ended(worker: _Worker) -> Exception:
    """The error for a worker whose pipe closed while it had a job: a stop if SIGTERM ended it (sent to
    the process group, it may reach a worker before this process), else a one-line error."""
    worker.process.join(5)
    code = worker.process.exitcode
    if sigterm_received() or code == -signal.SIGTERM:
        return sigterm_seen_elsewhere()
    how = f"killed by signal {-code}" if code is not None and code < 0 else f"exit status {code}"
    hint = " (out of memory?)" if code == -signal.SIGKILL else ""
    return UserError(f"a worker process (pid {worker.process.pid}) ended in the middle of a job, {how}{hint}")


class LocalRunner:
    def __init__(self, workers: int):
        self.workers = max(1, workers)
        self._workers: list[_Worker] = []

    def __enter__(self) -> LocalRunner:
        if self.workers > 1:
            # Here, not inside a start's blocked signals: a forkserver started there would keep them
            # blocked, and so would every process it forks (a TrainLoader's workers too).
            ctx = start_context(preload=[__name__])
            try:
                for _ in range(self.workers):
                    self._workers.append(self._start(ctx))
            except BaseException:
                self._kill()
                raise
        return self

    def _start(self, ctx: mp.context.BaseContext) -> _Worker:
        ours, theirs = ctx.Pipe()
        if ctx.get_start_method() == "fork":
            args = (theirs, os.getpid(), [w.conn for w in self._workers], None)
        else:
            args = (theirs, None, [], dict(os.environ))
        process = ctx.Process(target=_serve, args=args, daemon=True)
        with _stop_signals_blocked():
            process.start()
        theirs.close()  # so that the worker's end closing, when it dies, reads as EOF here
        return _Worker(process, ours)

    def __exit__(self, *exc) -> None:
        if exc[0] is not None:
            self._kill()
            return
        for worker in self._workers:
            try:
                worker.conn.send(None)
            except OSError:  # it has ended already
                pass
        for worker in self._workers:
            worker.process.join()
            worker.conn.close()
        self._workers = []

    def _kill(self) -> None:
        """Workers stopped at once, whatever they do: a job's files are resumed from their markers."""
        for worker in self._workers:
            if worker.process.is_alive():
                worker.process.kill()
        for worker in self._workers:
            worker.process.join()
            worker.conn.close()
        self._workers = []

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
            if not self._workers:
                for i, job in enumerate(jobs):
                    results[i] = fn(job)
                    bar.update(weights[i])
                return results
            waiting = iter(largest_first(weights))
            busy: dict[mp.connection.Connection, _Worker] = {}

            def hand_out(worker: _Worker) -> None:
                index = next(waiting, None)
                if index is not None:
                    worker.conn.send((fn, index, jobs[index]))
                    busy[worker.conn] = worker

            for worker in self._workers:
                hand_out(worker)
            while busy:
                for conn in mp.connection.wait(list(busy)):
                    worker = busy.pop(conn)
                    try:
                        index, ok, value = conn.recv()
                    except (EOFError, OSError):
                        raise _ended(worker) from None
                    if not ok:
                        exc, text = value
                        if not isinstance(exc, UserError):
                            raise exc from WorkerTraceback(text)
                        raise exc
                    results[index] = value
                    bar.update(weights[index])
                    hand_out(worker)
        return results

    def check_paths(self, inputs: Sequence[str], out_dir: Path) -> None:
        """Nothing to check: the workers share this machine's filesystem."""
