"""SIGTERM, what schedulers send before they kill (Slurm, Kubernetes, spot instances): a stop to honour
like Ctrl-C, not a crash.

    with handling_sigterm():        # `ptk` and each training process: SIGTERM raises Terminated
        with deferred_sigterm():    # the training loop: SIGTERM only asks to stop, read between steps
            ... if sigterm_received(): save a checkpoint and stop
    reclaim_sigterm()               # after ray.init, which installs a handler of its own

`Terminated` is a KeyboardInterrupt, so every clean-up a Ctrl-C runs (pools terminated, the checkpoint
being finalized completed) runs for it too; the command then says so in one line and exits with
`SIGTERM_STATUS` (143 = 128 + SIGTERM, the status a shell reports for a process SIGTERM ended). Only
the first SIGTERM raises: another one while the first is handled (Slurm signals every process of a
job, and ptk passes the signal on to its workers) only asks to stop again.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

SIGTERM_STATUS = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (only the first one)."""


class _State:
    handling = False  # inside handling_sigterm()
    received = False  # a SIGTERM arrived since handling_sigterm() began
    deferring = 0  # inside deferred_sigterm(): a SIGTERM waits to be read with sigterm_received()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    first = not _State.received
    _State.received = True
    if first and not _State.deferring:
        raise Terminated


@contextmanager
def handling_sigterm() -> Iterator[None]:
    """SIGTERM raises Terminated in the main thread until the block ends (then the handler before it is
    back). Outside the main thread, where Python cannot handle signals, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _State.received, _State.deferring = False, 0
    before = signal.signal(signal.SIGTERM, _on_sigterm)
    _State.handling = True
    try:
        yield
    finally:
        _State.handling = False
        signal.signal(signal.SIGTERM, before)


def reclaim_sigterm() -> None:
    """SIGTERM back to this module's handler, inside handling_sigterm(), after a library replaced it:
    ray.init installs one that exits with status 15, silently, saying nothing of a resume."""
    if _State.handling and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _on_sigterm)


@contextmanager
def deferred_sigterm() -> Iterator[None]:
    """Within the block a SIGTERM raises nothing: the code polls `sigterm_received()` where it can stop."""
    _State.deferring += 1
    try:
        yield
    finally:
        _State.deferring -= 1


def sigterm_seen_elsewhere() -> Terminated:
    """The stop for a SIGTERM that ended a child (one sent to the process group may reach a child first):
    this process stops as if it had come here, so that its own copy, arriving later, only asks again."""
    _State.received = True
    return Terminated()


def sigterm_received() -> bool:
    return _State.received
