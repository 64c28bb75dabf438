"""Checkpoints and resume: SIGKILL mid-run then the same command gives bitwise-identical losses; resume
2 -> 1 and 1 -> 2 processes; a truncated newest checkpoint is reported and the previous one used."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch

from pretrainkit.cli import main
from pretrainkit.train.checkpoint.checkpoints import loader_state_of
from pretrainkit.train.checkpoint.export import export_model, load_exported

FSDP = {"parallel": "fsdp", "max_steps": 40, "checkpoint": {"every": 4, "keep": 3}, "eval": {"every": 0}}
DDP = {"parallel": "ddp", "max_steps": 12, "checkpoint": {"every": 4, "keep": 3}, "eval": {"every": 0}}


def losses(rows: list[dict]) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows]


def copy_run_until(src: Path, dst: Path, step: int) -> None:
    """A copy of run dir `src` as if it had been stopped right after checkpoint `step`."""
    shutil.copytree(src, dst)
    for ckpt in (dst / "checkpoints").iterdir():
        if int(ckpt.name.split("-")[1]) > step:
            shutil.rmtree(ckpt)


def wait_for_step(metrics: Path, step: int, proc: subprocess.Popen, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None:
        if metrics.exists():
            rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.endswith("}")]
            if rows and rows[-1]["step"] >= step:
                return
        time.sleep(0.02)
    raise AssertionError(f"run did not reach step {step} (exit status {proc.poll()})")


@pytest.mark.distributed
@pytest.mark.slow
def test_sigkill_two_processes_then_resume_is_bitwise_identical_and_resumes_on_one(kit, tmp_path: Path) -> None:
    ref = kit.config(tmp_path / "ref", **FSDP)
    proc = kit.ptk(ref, nproc=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    reference = kit.rows(tmp_path / "ref" / "run")
    assert [r["step"] for r in reference] == list(range(1, 41))

    killed = kit.config(tmp_path / "killed", **FSDP)
    cmd = kit.ptk_command(killed, nproc=2)
    victim = subprocess.Popen(
        cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True, cwd=kit.root
    )
    try:
        wait_for_step(tmp_path / "killed" / "run" / "metrics.jsonl", 6, victim)
        os.kill(victim.pid, signal.SIGKILL)  # ptk alone, as `timeout -s KILL` does: torchrun and workers follow
        victim.wait()
        # torchrun runs in a session of its own (Ctrl-C reaches ptk alone): found by its command line.
        assert kit.processes_end(str(killed)), "torchrun or its workers outlived the killed ptk"
    finally:
        kit.kill_processes(str(killed))
    stopped_at = kit.rows(tmp_path / "killed" / "run")[-1]["step"]
    assert stopped_at < 40, "the run finished before it could be killed"

    resumed = kit.ptk(killed, nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "ptk train: resuming from" in resumed.stderr
    assert losses(kit.rows(tmp_path / "killed" / "run")) == losses(reference)  # bitwise

    # The same FSDP2 checkpoint, resumed on one process: same data order, losses within fp tolerance.
    copy_run_until(tmp_path / "ref" / "run", tmp_path / "one" / "run", 32)
    one = kit.config(tmp_path / "one", **FSDP)
    assert main(["train", str(one)]) == 0
    tail = kit.rows(tmp_path / "one" / "run")[32:]
    assert [r["step"] for r in tail] == list(range(33, 41))
    assert [r["loss"] for r in tail] == pytest.approx([r["loss"] for r in reference[32:]], rel=1e-4)
    assert [r["grad_norm"] for r in tail] == pytest.approx([r["grad_norm"] for r in reference[32:]], rel=1e-3)

    # Exported from FSDP2 shards (2 processes) and from the one-process finish: the same weights.
    sharded, _ = load_exported(export_model(tmp_path / "ref" / "run", tmp_path / "ref.safetensors")[0])
    single, _ = load_exported(export_model(tmp_path / "one" / "run", tmp_path / "one.safetensors")[0])
    for (name, a), (_, b) in zip(sharded.state_dict().items(), single.state_dict().items()):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-5, msg=name)


@pytest.mark.distributed
@pytest.mark.slow
def test_one_process_checkpoint_resumes_on_two_as_zero1_and_truncated_checkpoint_falls_back(
    kit, tmp_path: Path, capsys
) -> None:
    single = kit.config(tmp_path / "single", **DDP)
    assert main(["train", str(single)]) == 0
    reference = kit.rows(tmp_path / "single" / "run")
    loader = loader_state_of(tmp_path / "single" / "run")
    assert loader["batch"] == 12 and loader["micro_batch"] == 0

    # Resumed on two processes as ZeRO-1: the optimizer state is split between them on load.
    copy_run_until(tmp_path / "single" / "run", tmp_path / "two" / "run", 4)
    two = kit.config(tmp_path / "two", **{**DDP, "parallel": "zero1"})
    proc = kit.ptk(two, nproc=2)
    assert proc.returncode == 0, proc.stderr[-2000:]
    rows = kit.rows(tmp_path / "two" / "run")
    assert [r["step"] for r in rows] == list(range(1, 13))
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in reference], rel=1e-4)

    # Truncate the newest checkpoint's data: it is reported, step 8 is used, steps 9-12 are redone exactly.
    shutil.copytree(tmp_path / "single" / "run", tmp_path / "trunc" / "run")
    data = next((tmp_path / "trunc" / "run" / "checkpoints" / "step-0000012").glob("*.distcp"))
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])
    trunc = kit.config(tmp_path / "trunc", **DDP)
    capsys.readouterr()
    assert main(["train", str(trunc)]) == 0
    err = capsys.readouterr().err
    assert "skipping corrupt checkpoint step-0000012" in err and "truncated" in err
    assert "resuming from" in err and "step-0000008 (step 8)" in err
    assert losses(kit.rows(tmp_path / "trunc" / "run")) == losses(reference)


def test_no_resume_starts_over(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, **{**DDP, "max_steps": 8})
    assert main(["train", str(config)]) == 0
    first = kit.rows(tmp_path / "run")
    assert main(["train", str(config), "--set", "max_steps=4", "--no-resume"]) == 0
    assert "resuming" not in capsys.readouterr().err
    assert [r["step"] for r in kit.rows(tmp_path / "run")] == [1, 2, 3, 4]
    # The earlier run's step-8 checkpoint is gone, so it cannot pass for this run's newest.
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["step-0000004"]
    assert main(["train", str(config), "--no-resume"]) == 0
    assert losses(kit.rows(tmp_path / "run")) == losses(first)


def test_a_changed_mixture_resumes_only_when_allowed_and_every_source_continues(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, **{**DDP, "max_steps": 8})
    assert main(["train", str(config)]) == 0
    before = {s["name"]: s["next_token"] for s in loader_state_of(tmp_path / "run")["sources"]}
    changed = kit.mixture.parent / "mix-reweighted.yaml"  # same shard sets, new weights
    changed.write_text(
        kit.mixture.read_text().replace("weight: 0.7", "weight: 0.5").replace("weight: 0.3", "weight: 0.5")
    )
    more = ["--set", "max_steps=12", "--set", f"data.mixture={changed}"]
    assert main(["train", str(config), *more]) == 2
    assert "data.allow_mixture_change=true" in capsys.readouterr().err
    assert main(["train", str(config), *more, "--set", "data.allow_mixture_change=true"]) == 0
    assert "resuming" in capsys.readouterr().err
    assert [r["step"] for r in kit.rows(tmp_path / "run")] == list(range(1, 13))
    after = {s["name"]: s["next_token"] for s in loader_state_of(tmp_path / "run")["sources"]}
    assert after.keys() == before.keys() and all(after[name] > before[name] for name in before)


def test_a_changed_batch_shape_names_the_keys_and_data_allow_mixture_change(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, **{**DDP, "max_steps": 8})
    assert main(["train", str(config)]) == 0
    capsys.readouterr()
    more = ["--set", "max_steps=12", "--set", "batch.global_size=16"]
    assert main(["train", str(config), *more]) == 2
    err = capsys.readouterr().err
    assert "step-0000008: saved for another data order (batch.global_size 8 -> 16)" in err
    # the YAML key to set, not the loader's Python keyword (`load_mixture(..., allow_mixture_change=True)`)
    assert "data.allow_mixture_change=true" in err and "allow_mixture_change=True" not in err
    assert main(["train", str(config), *more, "--set", "data.allow_mixture_change=true"]) == 0
    assert [r["step"] for r in kit.rows(tmp_path / "run")] == list(range(1, 13))
