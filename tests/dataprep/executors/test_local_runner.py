"""The local runner's workers, forked or started by the forkserver: results in job order on any number of
workers, a job's error reaching the caller, and a worker that dies at any moment (SIGKILL, SIGTERM),
even one waiting for work, never leaving the run waiting: it stops with one line and the runner's end
returns."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from pretrainkit import processes
from pretrainkit.dataprep.executors.local import LocalRunner, WorkerTraceback
from pretrainkit.errors import UserError
from pretrainkit.sigterm import Terminated, handling_sigterm


@pytest.fixture(autouse=True, params=["fork", "forkserver"])
def start(request, monkeypatch) -> None:
    """Every test with workers forked from this process, and with workers the forkserver started (as from
    a process with threads), whichever this test process would choose."""
    monkeypatch.setattr(processes, "start_method", lambda: request.param)


def _square(x: int) -> int:
    return x * x


def _pid_after(seconds: float) -> int:
    time.sleep(seconds)
    return os.getpid()


def _fail(x: int) -> int:
    if x == 3:
        raise UserError(f"record {x}: bad")
    if x == 5:
        raise ZeroDivisionError("a bug in a job")
    return x


class _Unpicklable(Exception):
    def __init__(self, handle):
        super().__init__("cannot travel")
        self.handle = handle


def _unpicklable(_x: int) -> int:
    raise _Unpicklable(threading.Lock())


def _kill_self(signum: int) -> int:
    os.kill(os.getpid(), signum)
    time.sleep(30)
    return 0


def _signal_all(pids: list[int]) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGTERM)


def test_results_come_in_job_order_from_several_workers():
    weights = [1, 5, 2, 8, 3, 3, 0, 9]
    with LocalRunner(3) as runner:
        assert runner.run(_square, list(range(8)), "square", weights=weights) == [x * x for x in range(8)]
        assert runner.run(_square, [], "nothing") == []
        pids = set(runner.run(_pid_after, [0.2] * 6, "pids"))
    assert len(pids) == 3 and os.getpid() not in pids


def test_a_job_error_reaches_the_caller_and_a_bug_keeps_its_worker_traceback():
    with pytest.raises(UserError, match="^record 3: bad$"), LocalRunner(2) as runner:
        runner.run(_fail, [3], "fail")
    with pytest.raises(ZeroDivisionError) as raised, LocalRunner(2) as runner:
        runner.run(_fail, [5], "fail")
    assert isinstance(raised.value.__cause__, WorkerTraceback)
    assert "in _fail" in str(raised.value.__cause__)
    with pytest.raises(RuntimeError, match="_Unpicklable: cannot travel"), LocalRunner(2) as runner:
        runner.run(_unpicklable, [0], "unpicklable")


def test_a_worker_killed_in_a_job_ends_the_run_with_one_line():
    with pytest.raises(UserError, match=r"worker process \(pid \d+\) ended .*killed by signal 9 \(out of memory\?\)"):
        with LocalRunner(2) as runner:
            runner.run(_kill_self, [signal.SIGKILL, 0], "kill")


def test_a_worker_ended_by_sigterm_stops_the_run():
    with pytest.raises(Terminated), LocalRunner(2) as runner:
        runner.run(_kill_self, [signal.SIGTERM], "sigterm")


def test_sigterm_to_the_group_while_workers_wait_or_work_never_hangs():
    """The moment is varied over the run: one worker busy, the other waiting for work, or both busy;
    the signal reaches this process and the workers, as a scheduler's SIGTERM to a process group does."""
    for delay in (0.0, 0.05, 0.2, 0.4):
        with handling_sigterm(), pytest.raises(Terminated), LocalRunner(2) as runner:
            workers = [w.process.pid for w in runner._workers]
            timer = threading.Timer(delay, _signal_all, args=([*workers, os.getpid()],))
            timer.start()
            runner.run(_pid_after, [0.3, 5.0, 5.0], "sleep")
            time.sleep(10)  # if every job finished before the signal, it comes here
        timer.join()
        assert not any(os.path.exists(f"/proc/{p}") for p in workers)  # the runner's end reaped them
