"""What the tests of the local runner's processes share: a parent killed, and the processes it leaves."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Callable

import pytest


@pytest.fixture(scope="session")
def kill_parent(process_table) -> Callable[[subprocess.Popen, set[int]], set[int]]:
    """kill_parent(proc, started): SIGKILL `proc`, then those of `started` (its workers) still alive after
    30 s: none, when they die with it."""

    def kill(proc: subprocess.Popen, started: set[int]) -> set[int]:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 30
        while (alive := started & set(process_table())) and time.monotonic() < deadline:
            time.sleep(0.05)
        return alive

    return kill
