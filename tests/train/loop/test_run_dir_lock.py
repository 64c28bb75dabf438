"""One `ptk train` at a time on a run directory: a second one, on one process or launching torchrun,
is refused at once in one line naming the first's pid and host, touching nothing, and the first
run's metrics.jsonl has every step."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from pretrainkit.stage_layout import LOCK_NAME, MARKER_NAME

# `ptk train ARGS` that stops before its first step, its run directory held, until stdin gets a line.
PAUSED_TRAIN = """
import sys
from pretrainkit.train.loop import training_loop
real_run = training_loop.TrainingLoop.run
def run(self, *args, **kwargs):
    print("holding", flush=True)
    sys.stdin.readline()
    return real_run(self, *args, **kwargs)
training_loop.TrainingLoop.run = run
from pretrainkit.cli import main
sys.exit(main(sys.argv[1:]))
"""


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_second_train_on_a_run_dir_in_use_is_refused_and_the_first_logs_every_step(kit, tmp_path):
    config = kit.config(tmp_path)
    run_dir = (tmp_path / "run").resolve()
    first = subprocess.Popen(
        [sys.executable, "-c", PAUSED_TRAIN, "train", str(config), "--nproc", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=kit.root,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        assert first.stdout.readline() == "holding\n"
        during = files(run_dir)
        for nproc in (1, 2):  # 2: refused by the launcher, before torchrun starts
            second = kit.ptk(config, nproc=nproc)
            assert second.returncode == 2, second.stderr[-3000:]
            assert second.stderr.strip().splitlines() == [
                f"ptk: error: {run_dir} is in use by pid {first.pid} (host {socket.gethostname()})"
            ]
            assert files(run_dir) == during
        _, err = first.communicate("\n", timeout=kit.hang_seconds)
    finally:
        first.kill()
    assert first.returncode == 0, err[-3000:]
    assert [r["step"] for r in kit.rows(run_dir)] == list(range(1, 17))
    names = {p.name for p in run_dir.iterdir()}
    assert MARKER_NAME in names and LOCK_NAME not in names


def test_train_refuses_a_run_dir_holding_another_commands_output(kit, tmp_path):
    config = kit.config(tmp_path)
    shards = tmp_path / "run"
    shards.mkdir()
    (shards / "manifest.json").write_text("{}")  # a shard set (of an earlier version: no marker)
    r = kit.ptk(config)
    assert r.returncode == 2
    assert r.stderr.strip().splitlines() == [
        f"ptk: error: {config}: run_dir: {shards.resolve()}: holds a ptk tokenize output; ptk train writes only "
        "into a folder holding no other command's output (a new one, one of your files, or a ptk train run)"
    ]
    assert sorted(p.name for p in shards.iterdir()) == ["manifest.json"]


HOLDER = """
import sys
from pretrainkit.output_folders import TRAIN, output_folder
with output_folder(sys.argv[1], TRAIN):
    print("held", flush=True)
    sys.stdin.read()
"""


@pytest.mark.distributed
def test_under_torchrun_rank_0_takes_the_run_dir_and_every_process_stops_on_one_line(kit, tmp_path):
    """What a cluster's own `torchrun -m pretrainkit.train` meets (no `ptk train` launcher checked first)."""
    config = kit.config(tmp_path)
    run_dir = (tmp_path / "run").resolve()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(run_dir)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline() == "held\n"
        cmd = [sys.executable, "-m", "pretrainkit.train.torchrun", "--standalone", "--nproc_per_node=2"]
        r = subprocess.run(
            [*cmd, "-m", "pretrainkit.train", str(config)],
            capture_output=True,
            text=True,
            timeout=kit.hang_seconds,
            cwd=kit.root,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )
    finally:
        holder.communicate("")
    assert r.returncode == 2, r.stderr[-3000:]
    assert r.stderr.strip().splitlines() == [
        f"ptk: error: {run_dir} is in use by pid {holder.pid} (host {socket.gethostname()})"
    ]
    assert not (run_dir / "metrics.jsonl").exists()
