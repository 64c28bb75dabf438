"""`ptk train` stopped or refused like a command, not a crash: Ctrl-C (one line, exit 130, the steps a
resume redoes), a failing worker under --nproc 2 (one line, no torchrun report), and run_dir or
`ptk export -o` naming something that cannot be written."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from pretrainkit.cli import main

RUN = {"max_steps": 400, "checkpoint": {"every": 4, "keep": 2}, "eval": {"every": 0}}
TORCHRUN_NOISE = ("Traceback", "KeyboardInterrupt", "WARNING", "ChildFailedError", "torch.distributed.elastic")


def rows_logged(metrics: Path) -> int:
    if not metrics.exists():
        return 0
    return sum(1 for line in metrics.read_text().splitlines() if line.endswith("}"))


@pytest.mark.slow
@pytest.mark.distributed
@pytest.mark.parametrize("nproc", [2, 1])
def test_ctrl_c_is_one_line_exit_130_with_the_steps_to_redo(kit, tmp_path: Path, nproc: int) -> None:
    config = kit.config(tmp_path, **RUN)
    metrics = tmp_path / "run" / "metrics.jsonl"
    # A session of its own, so that SIGINT to its group is what a terminal's Ctrl-C sends ptk; with
    # SIGINT's default action, as a shell starts it: ptk inherits an ignored SIGINT (nohup, a script's
    # background job) and keeps ignoring it, and something earlier in the suite leaves pytest's SIGINT
    # (and SIGQUIT) ignored, which made this test run the whole 400 steps.
    victim = kit.start(
        kit.ptk_command(config, nproc=nproc),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    try:
        while rows_logged(metrics) < 6 and victim.poll() is None:  # past the step-4 checkpoint
            time.sleep(0.05)
        os.killpg(victim.pid, signal.SIGINT)
        _, err = victim.communicate(timeout=600)
    finally:
        kit.kill_processes(str(config))
    assert victim.returncode == 130, err[-3000:]
    assert not any(noise in err for noise in TORCHRUN_NOISE), err[-3000:]
    last = err.strip().splitlines()[-1]
    steps = [json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.endswith("}")]
    newest = max(int(p.name.split("-")[1]) for p in (tmp_path / "run" / "checkpoints").glob("step-*"))
    assert newest >= 4
    if steps[-1] == newest:  # stopped right after a checkpoint (on a loaded machine that happens)
        assert last == f"ptk train: interrupted at step {newest}; no step is lost: the same command resumes the run"
    else:
        redo = steps[-1] - newest
        assert last == (
            f"ptk train: interrupted at step {steps[-1]}; {redo} step{'s' if redo > 1 else ''} since the "
            f"last checkpoint (step-{newest:07d}) will be redone when the same command resumes the run"
        )
    assert kit.processes_end(str(config)), "a training process outlived the interrupted ptk"


@pytest.mark.slow
@pytest.mark.distributed
def test_a_worker_error_under_two_processes_is_one_line_without_torchrun_report(kit, tmp_path: Path) -> None:
    config = kit.config(tmp_path, max_steps=8)
    assert main(["train", str(config)]) == 0
    proc = kit.ptk(config, "--set", "max_steps=12", "--set", "model.n_layers=3", nproc=2)
    assert proc.returncode == 2
    assert not any(noise in proc.stderr for noise in TORCHRUN_NOISE), proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert errors == [
        f"ptk: error: {tmp_path}/run/checkpoints/step-0000008: model.n_layers is 2 in the checkpoint "
        f"but 3 in the config; resume with the checkpoint's value, or start a new run (another run_dir, "
        f"or --no-resume)"
    ]


def test_run_dir_naming_a_file_is_one_line(kit, tmp_path: Path, capsys) -> None:
    (tmp_path / "run").write_text("not a directory")
    config = kit.config(tmp_path)
    assert main(["train", str(config)]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"ptk: error: {config}: run_dir: {tmp_path}/run: exists and is not a directory (the output here is a directory)"
    ]
    proc = kit.ptk(config, nproc=2)
    assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == (
        f"ptk: error: {config}: run_dir: {tmp_path}/run: exists and is not a directory (the output here is a directory)"
    )
    assert "Traceback" not in proc.stderr


def test_export_to_an_existing_file_or_an_unwritable_place_is_one_line(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, max_steps=4)
    assert main(["train", str(config)]) == 0
    capsys.readouterr()
    taken = tmp_path / "model.bin"
    taken.write_text("something else")
    assert main(["export", str(tmp_path / "run"), "-o", str(taken)]) == 2
    assert capsys.readouterr().err.startswith(f"ptk: error: -o {taken}: exists and is not a directory")
    assert taken.read_text() == "something else"
    (tmp_path / "dir.safetensors").mkdir()
    assert main(["export", str(tmp_path / "run"), "-o", str(tmp_path / "dir.safetensors")]) == 2
    assert "is a directory" in capsys.readouterr().err
    assert main(["export", str(tmp_path / "run"), "-o", str(taken / "inside.safetensors")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ptk: error: -o {taken}") and len(err.splitlines()) == 1, err
