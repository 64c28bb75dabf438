"""What `ptk train --nproc 2` writes to a log file: whole progress lines, no torchrun banner; and
TensorBoard events from rank 0 alone."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import pytest


@pytest.mark.distributed
def test_a_logged_two_process_run_reads_as_lines(kit, tmp_path: Path) -> None:
    config = kit.config(
        tmp_path, max_steps=6, checkpoint={"every": 0}, eval={"every": 3, "batches": 1}, logging={"tensorboard": True}
    )
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    env["PTK_PROGRESS_SECONDS"] = "0"
    proc = subprocess.run(
        kit.ptk_command(config, nproc=2),
        capture_output=True,
        text=True,
        timeout=kit.hang_seconds,
        cwd=kit.root,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "\r" not in proc.stderr
    assert "OMP_NUM_THREADS" not in proc.stderr  # the launcher set it, so torchrun prints no banner
    bars = [line for line in proc.stderr.splitlines() if re.match(r"\d+/6 step \(\d+%\)", line)]
    assert [line.split("/")[0] for line in bars] == [str(i) for i in range(1, 7)]
    assert "loss=" in bars[-1] and "ptk train: steps 1-6 of 6" in proc.stderr
    # Rank 0 alone logs to TensorBoard: one event file, each step once.
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert len(list((tmp_path / "run" / "tb").iterdir())) == 1
    acc = EventAccumulator(str(tmp_path / "run" / "tb"), size_guidance={"scalars": 0})
    acc.Reload()
    assert [e.step for e in acc.Scalars("train/loss")] == list(range(1, 7))
