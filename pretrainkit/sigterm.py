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

A signal's exception is raised wherever the main thread is, and Python ignores one raised in a
finalizer or a weakref callback (an import's module lock has one): it prints "Exception ignored in
..." with a traceback and goes on, and the SIGTERM would be lost. Within handling_sigterm() such a
Terminated is caught by `sys.unraisablehook`, said nothing of, and raised again: a thread signals the
process once more a moment later, so that the handler runs in the code the callback interrupted (a
signal that still finds the main thread in the hook is sent again the same way).

Nor is a Terminated raised inside an import: it would leave the module half made, and a native
module whose initialization runs Python code (resiliparse's Rust module, numba's, torch's) then
ended the command in a Rust panic's traceback or a segfault rather than its one line (about 1 run
in 100 of `ptk` signalled at random in its first half second). A SIGTERM that finds the main thread
importing is sent again a moment later, until the import is done, and raised there.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from types import CodeType, FrameType

SIGTERM_STATUS = 128 + signal.SIGTERM
RESIGNAL_DELAY_S = 0.01


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread (only the first one)."""


class _State:
    handling = False  # inside handling_sigterm()
    received = False  # a SIGTERM arrived since handling_sigterm() began
    deferring = 0  # inside deferred_sigterm(): a SIGTERM waits to be read with sigterm_received()
    lost = False  # the Terminated raised was ignored (raised in a finalizer or callback): raise it again
    pending = False  # a SIGTERM came during an import: it is raised once the import is done
    unraisable_before = sys.unraisablehook  # outside handling_sigterm()


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _State.lost and _within(frame, _on_unraisable.__code__):  # it would be ignored again
        _signal_again()
        return
    if not _State.deferring and _importing(frame):
        _State.received = _State.pending = True
        _signal_again()
        return
    again = not _State.received or _State.lost or _State.pending
    _State.received, _State.lost, _State.pending = True, False, False
    if again and not _State.deferring:
        raise Terminated


def _on_unraisable(unraisable: sys.UnraisableHookArgs) -> None:
    """A Terminated that Python ignored (module docstring): raised again from a fresh SIGTERM."""
    if isinstance(unraisable.exc_value, Terminated):
        _State.lost = True
        _signal_again()
    else:
        _State.unraisable_before(unraisable)


def _signal_again() -> None:
    """SIGTERM to this process from a thread, a moment later: by then the main thread has left the hook."""

    def send() -> None:
        time.sleep(RESIGNAL_DELAY_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=send, daemon=True).start()


def _importing(frame: FrameType | None) -> bool:
    """Whether `frame` runs inside an import (importlib's machinery is below it)."""
    while frame is not None:
        if frame.f_code.co_filename in _IMPORT_MACHINERY:
            return True
        frame = frame.f_back
    return False


_IMPORT_MACHINERY = frozenset({"<frozen importlib._bootstrap>", "<frozen importlib._bootstrap_external>"})


def _within(frame: FrameType | None, code: CodeType) -> bool:
    while frame is not None:
        if frame.f_code is code:
            return True
        frame = frame.f_back
    return False


@contextmanager
def handling_sigterm() -> Iterator[None]:
    """SIGTERM raises Terminated in the main thread until the block ends (then the handler before it is
    back). Outside the main thread, where Python cannot handle signals, this does nothing."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    _State.received, _State.deferring, _State.lost, _State.pending = False, 0, False, False
    before, _State.unraisable_before = signal.signal(signal.SIGTERM, _on_sigterm), sys.unraisablehook
    sys.unraisablehook = _on_unraisable
    _State.handling = True
    try:
        yield
    finally:
        # Nothing of this block's SIGTERM is left for code that runs later in this process (a test
        # process's next in-process training run stopped after its first step).
        _State.handling, _State.received, _State.lost, _State.pending = False, False, False, False
        signal.signal(signal.SIGTERM, before)
        sys.unraisablehook = _State.unraisable_before


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
    """Whether a SIGTERM came (or ended a child, `sigterm_seen_elsewhere`) within handling_sigterm();
    outside it, always False: nothing there says a SIGTERM is a stop."""
    return _State.handling and _State.received
