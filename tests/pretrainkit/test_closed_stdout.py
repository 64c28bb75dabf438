"""A reader that closes ptk's stdout early (`ptk plan ... | head -1`) ends the command quietly."""

from __future__ import annotations

import subprocess
import sys


def test_a_closed_stdout_ends_the_command_quietly_with_status_141() -> None:
    proc = subprocess.Popen(
        [sys.executable, "-m", "pretrainkit.cli", "plan", "--params", "1B", "--tokens", "20B"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    proc.stdout.close()  # before ptk has imported anything, so its first write finds no reader
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141
    assert err == ""  # no BrokenPipeError traceback
