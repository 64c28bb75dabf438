"""The fault suite's workspace, built once per session and never modified (each test damages copies),
and each resumable command's undisturbed run over it, run once and compared against by every test
that disturbs that command."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fixtures.corpora import DATA, need_data
from fixtures.fault_commands import Command, Workspace, output_of, run_ptk


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every test of this folder is of the fault tier (`-m "not faults"` leaves it out: make test-fast)."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.faults)


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Workspace:
    need_data(DATA / "reuters21578")
    return Workspace.build(tmp_path_factory.mktemp("fault-workspace"))


@pytest.fixture(scope="session")
def reference_run(workspace, tmp_path_factory) -> Callable[[Command], tuple[Path, float]]:
    """`reference_run(command)`: (its output, the seconds it took) of `command` run undisturbed."""
    runs: dict[str, tuple[Path, float]] = {}

    def reference(command: Command) -> tuple[Path, float]:
        if command.name not in runs:
            out = output_of(command, tmp_path_factory.mktemp(f"reference-{command.name}"))
            began = time.monotonic()
            done = run_ptk(command.argv(workspace, out))
            assert done.returncode == 0, done.stderr[-3000:]
            runs[command.name] = out, time.monotonic() - began
        return runs[command.name]

    return reference
