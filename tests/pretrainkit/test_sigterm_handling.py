"""`pretrainkit.sigterm`: a SIGTERM whose Terminated Python ignores (it came while a finalizer ran) is
raised again where the main thread was, silently, instead of being lost; one that comes while `ptk`
imports a module (its commands', or a library it imports lazily) is raised once that import is done,
not inside it."""

from __future__ import annotations

import importlib
import os
import signal
import sys
import time

import pytest

from pretrainkit import cli
from pretrainkit.sigterm import Terminated, handling_sigterm, sigterm_received, sigterm_seen_elsewhere


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


SIGNALLING_MODULE = """
import os, signal, time
from pretrainkit.sigterm import sigterm_received

os.kill(os.getpid(), signal.SIGTERM)
deadline = time.monotonic() + 5
while not sigterm_received() and time.monotonic() < deadline:  # the handler runs here, inside the import
    pass
time.sleep(0.05)  # the signal sent again meanwhile finds the import still running
DONE = True
"""


def signalling_module(tmp_path, monkeypatch) -> str:
    """A module whose body sends SIGTERM to its process and goes on: the signal is handled inside the import."""
    name = "signalled_while_imported_" + "".join(c if c.isalnum() else "_" for c in tmp_path.name)  # once per test
    (tmp_path / f"{name}.py").write_text(SIGNALLING_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    return name


def raised_after(block, timeout_s: float = 5) -> None:
    """Runs `block` inside handling_sigterm() and then waits: the Terminated must come after the block."""
    with pytest.raises(Terminated), handling_sigterm():
        block()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            time.sleep(0.001)


def test_a_sigterm_during_an_import_is_raised_once_the_import_is_done(tmp_path, monkeypatch) -> None:
    """Raised inside a native module's initialization (resiliparse's Rust module), the Terminated left
    the module half made: a panic's traceback, or a segfault. It now waits for the import to end."""
    name = signalling_module(tmp_path, monkeypatch)
    raised_after(lambda: importlib.import_module(name))
    assert sys.modules[name].DONE


def test_a_sigterm_while_the_commands_are_imported_is_raised_after_that_import(tmp_path, monkeypatch) -> None:
    name = signalling_module(tmp_path, monkeypatch)
    real_import = importlib.import_module

    def importing(module: str, *package):  # the first command module's import signals the process
        if module == cli.COMMAND_MODULES[0]:
            real_import(name)
        return real_import(module, *package)

    monkeypatch.setattr(cli.importlib, "import_module", importing)
    raised_after(cli.build_parser)
    assert sys.modules[name].DONE


def test_a_sigterm_is_forgotten_when_handling_ends() -> None:
    """A test process runs training in-process after a test that stopped a runner with SIGTERM: the
    training loop, which polls sigterm_received(), stopped after its first step."""
    sigterm_seen_elsewhere()  # outside handling_sigterm(): a child died of SIGTERM, nothing here is a stop
    assert not sigterm_received()
    with pytest.raises(Terminated), handling_sigterm():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)
    assert not sigterm_received()
