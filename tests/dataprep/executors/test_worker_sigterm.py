"""A local pool worker on SIGTERM: it never dies holding a lock of the pool's queues (the pool's end
would wait for that lock for ever), and it ends the moment it lets go of one, whatever it does next."""

from __future__ import annotations

import multiprocessing as mp
import os
import signal
import time

from pretrainkit.dataprep.executors import local
from pretrainkit.sigterm import SIGTERM_STATUS


def _reader(queue, got) -> None:
    signal.signal(signal.SIGTERM, local._on_sigterm)
    item = queue.get()  # holds the queue's read lock while it waits
    got.put(item)
    time.sleep(60)  # the rest of a job: it must not get this far


def test_a_worker_holding_the_queue_lock_ends_when_it_lets_go_and_not_before() -> None:
    ctx = mp.get_context("fork")
    queue, got = ctx.SimpleQueue(), ctx.SimpleQueue()
    worker = ctx.Process(target=_reader, args=(queue, got))
    worker.start()
    deadline = time.monotonic() + 30
    while queue._rlock.acquire(block=False):  # until the worker holds it, waiting in get()
        queue._rlock.release()
        assert time.monotonic() < deadline
        time.sleep(0.01)
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(0.5)
    assert worker.exitcode is None  # alive: it holds the lock
    queue.put("task")
    worker.join(30)
    assert worker.exitcode == SIGTERM_STATUS  # ended once get() let go, before the rest of its job
    assert got.get() == "task"
    assert queue._rlock.acquire(timeout=5)  # and the lock is free for the pool's end


def _waiter(queue) -> None:
    signal.signal(signal.SIGTERM, local._on_sigterm)
    queue.get()


def test_a_worker_waiting_for_the_queue_lock_ends_at_once() -> None:
    ctx = mp.get_context("fork")
    queue = ctx.SimpleQueue()
    assert queue._rlock.acquire(timeout=5)  # the pool's end holds it (as Pool.terminate does)
    worker = ctx.Process(target=_waiter, args=(queue,))
    worker.start()
    time.sleep(0.5)
    os.kill(worker.pid, signal.SIGTERM)
    worker.join(30)
    assert worker.exitcode == SIGTERM_STATUS
