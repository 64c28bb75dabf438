"""`pretrainkit.sigterm`: a SIGTERM whose Terminated Python ignores (it came while a finalizer ran) is
raised again where the main thread was, silently, instead of being lost; one that comes while `ptk`
imports its commands is raised once the imports are done, not inside one."""

from __future__ import annotations

import importlib
import os
import signal
import time

import pytest

from pretrainkit import cli
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


def test_a_sigterm_while_the_commands_are_imported_is_raised_after_the_imports(monkeypatch) -> None:
    """Raised inside a native module's initialization (resiliparse's Rust module), the Terminated left
    the module half made: a panic's traceback, or a segfault. It now waits for the imports to end."""
    imported = []
    real_import = importlib.import_module

    def importing(name: str, *package):  # importlib's own: the modules' imports call it too
        if name in cli.COMMAND_MODULES:
            if not imported:
                os.kill(os.getpid(), signal.SIGTERM)  # handled at the next instruction: inside this import
            imported.append(name)
        return real_import(name, *package)

    monkeypatch.setattr(cli.importlib, "import_module", importing)
    with pytest.raises(Terminated), handling_sigterm():
        cli.build_parser()
    assert imported == list(cli.COMMAND_MODULES)
