"""`pretrainkit.sigterm`: a SIGTERM whose Terminated Python ignores (it came while a finalizer ran) is
raised again where the main thread was, silently, instead of being lost."""

from __future__ import annotations

import os
import signal
import time

import pytest

from pretrainkit.sigterm import Terminated, handling_sigterm, sigterm_received


class SignalledWhileDeleted:
    """Sends SIGTERM to its own process from its finalizer and waits there for the handler, so that the
    handler's Terminated is raised inside the finalizer, where Python ignores exceptions (as it did in
    an import's module-lock callback, in `ptk dedup` under load)."""

    def __del__(self) -> None:
        os.kill(os.getpid(), signal.SIGTERM)
        deadline = time.monotonic() + 5
        while not sigterm_received() and time.monotonic() < deadline:
            pass


def test_a_sigterm_raised_in_a_finalizer_is_raised_again_outside_it(capfd) -> None:
    stopped_at = None
    with pytest.raises(Terminated):
        with handling_sigterm():
            SignalledWhileDeleted()  # deleted at once: its finalizer runs here
            started = time.monotonic()
            while time.monotonic() - started < 10:
                stopped_at = time.monotonic() - started
                time.sleep(0.001)
    assert stopped_at is not None and stopped_at < 5, stopped_at
    assert "Exception ignored" not in capfd.readouterr().err
