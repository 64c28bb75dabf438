"""Checkpoints under faults: a full disk mid-save, every checkpoint corrupt, a resume with another model
shape or schedule, steps past 10^7, and the directory sync that makes a rename durable."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from pretrainkit.cli import main
from pretrainkit.train.checkpoint.checkpoints import Checkpoints

RUN = {"max_steps": 8, "checkpoint": {"every": 4, "keep": 2}, "eval": {"every": 0}}


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("ptk: error")]


def test_checkpoints_are_ordered_by_their_step_past_ten_million(tmp_path: Path) -> None:
    ckpts = Checkpoints(tmp_path, keep=1)
    for step in (9_999_999, 10_000_000, 123):
        d = tmp_path / f"step-{step:07d}"
        d.mkdir()
        (d / "meta.json").write_text(json.dumps({"step": step, "files": {}}))
    (tmp_path / "step-latest").mkdir()  # not a step number: not a checkpoint
    assert [p.name for p in ckpts.candidates()] == ["step-10000000", "step-9999999", "step-0000123"]
    assert ckpts.latest_valid().step == 10_000_000
    assert ckpts.choose().step == 10_000_000


def test_every_checkpoint_corrupt_is_refused_naming_them_and_the_logs_are_kept(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, **RUN)
    assert main(["train", str(config)]) == 0
    run = tmp_path / "run"
    for ckpt in (run / "checkpoints").iterdir():
        data = next(ckpt.glob("*.distcp"))
        data.write_bytes(data.read_bytes()[:100])
    logs = (run / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert main(["train", str(config), "--set", "max_steps=12"]) == 2
    err = capsys.readouterr().err
    (line,) = error_lines(err)
    assert "every checkpoint is corrupt" in line and "step-0000008" in line and "step-0000004" in line
    assert "--no-resume" in line and "Traceback" not in err
    assert (run / "metrics.jsonl").read_bytes() == logs
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000004", "step-0000008"]
    assert main(["train", str(config), "--no-resume"]) == 0  # asked for: starts over
    assert [r["step"] for r in kit.rows(run)] == list(range(1, 9))


def test_resume_with_another_model_shape_names_the_key_and_both_values(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, **RUN)
    assert main(["train", str(config)]) == 0
    capsys.readouterr()
    assert main(["train", str(config), "--set", "max_steps=12", "--set", "model.d_model=64"]) == 2
    err = capsys.readouterr().err
    (line,) = error_lines(err)
    assert "step-0000008: model.d_model is 32 in the checkpoint but 64 in the config" in line
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_extending_a_finished_run_says_how_the_learning_rate_changes(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, **RUN)
    assert main(["train", str(config)]) == 0
    capsys.readouterr()
    assert main(["train", str(config), "--set", "max_steps=12", "--set", "optim.lr=0.02"]) == 0
    err = capsys.readouterr().err
    rows = kit.rows(tmp_path / "run")
    assert [r["step"] for r in rows] == list(range(1, 13))
    lines = [line for line in err.splitlines() if "schedule changed" in line]
    assert lines == [
        f"ptk train: the schedule changed since step-0000008 (max_steps 8 -> 12, optim.lr 0.01 -> 0.02): "
        f"learning rate {rows[7]['lr']:.4g} at step 8 -> {rows[8]['lr']:.4g} at step 9"
    ]
    assert main(["train", str(config), "--set", "max_steps=12", "--set", "optim.lr=0.02"]) == 0
    assert "schedule changed" not in capsys.readouterr().err  # the same schedule as the checkpoint's


def test_the_checkpoint_rename_is_synced_to_its_directory(kit, tmp_path: Path, monkeypatch) -> None:
    config = kit.config(tmp_path, **{**RUN, "max_steps": 4})
    ckpt_dir = tmp_path / "run" / "checkpoints"
    synced_after_rename = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")) == ckpt_dir and (ckpt_dir / "step-0000004").is_dir():
            synced_after_rename.append(fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert main(["train", str(config)]) == 0
    assert synced_after_rename


def mount_namespace_available() -> bool:
    probe = subprocess.run(["unshare", "--mount", "--map-root-user", "true"], capture_output=True)
    return probe.returncode == 0


def dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.mark.skipif(
    shutil.which("unshare") is None or not mount_namespace_available(),
    reason="needs `unshare --mount` (Linux mount namespaces) for a size-limited tmpfs",
)
@pytest.mark.slow
@pytest.mark.parametrize("nproc", [1, 2])
def test_a_full_disk_during_a_checkpoint_is_one_line_and_the_last_checkpoint_resumes(
    kit, tmp_path: Path, nproc: int
) -> None:
    ref = kit.config(tmp_path / "ref", **RUN)
    assert main(["train", str(ref)]) == 0
    reference = kit.rows(tmp_path / "ref" / "run")
    step4 = dir_bytes(tmp_path / "ref" / "run" / "checkpoints" / "step-0000004")
    # Room for the run's logs and one checkpoint, not for a second one beside it.
    size_kib = (dir_bytes(tmp_path / "ref" / "run") - step4 // 2) // 1024
    disk, out = tmp_path / "disk", tmp_path / "out"
    disk.mkdir()
    config = kit.config(tmp_path / "full", **RUN, run_dir=str(disk / "run"))
    script = (
        f"mount -t tmpfs -o size={size_kib}k tmpfs {disk} && {' '.join(kit.ptk_command(config, nproc=nproc))}; "
        f"code=$?; cp -a {disk}/run {out}; exit $code"
    )
    proc = subprocess.run(
        ["unshare", "--mount", "--map-root-user", "sh", "-c", script],
        capture_output=True,
        text=True,
        cwd=kit.root,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (line,) = error_lines(proc.stderr)
    assert line.startswith(f"ptk: error: {disk}/run/checkpoints/.tmp-step-0000008") and line.endswith(
        ": no space left on device"
    ), line
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step-0000004"]  # no .tmp-step-*

    resumed = kit.ptk(config, "--set", f"run_dir={out}", nproc=nproc)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {out}/checkpoints/step-0000004 (step 4)" in resumed.stderr
    rows = kit.rows(out)
    assert [r["step"] for r in rows] == [r["step"] for r in reference]
    if nproc == 1:  # bit for bit; two processes sum the gradients in another order
        assert [r["loss"] for r in rows] == [r["loss"] for r in reference]
    assert [r["loss"] for r in rows] == pytest.approx([r["loss"] for r in reference], rel=1e-4)


@pytest.mark.skipif(
    shutil.which("unshare") is None or not mount_namespace_available(),
    reason="needs `unshare --mount` (Linux mount namespaces) for a read-only mount",
)
@pytest.mark.slow
def test_a_read_only_run_dir_is_one_line_naming_it(kit, tmp_path: Path) -> None:
    disk = tmp_path / "ro"
    disk.mkdir()
    config = kit.config(tmp_path, run_dir=str(disk / "run"))
    for nproc in (1, 2):
        script = f"mount -t tmpfs -o ro,size=64k tmpfs {disk} && {' '.join(kit.ptk_command(config, nproc=nproc))}"
        proc = subprocess.run(
            ["unshare", "--mount", "--map-root-user", "sh", "-c", script], capture_output=True, text=True, cwd=kit.root
        )
        assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        assert error_lines(proc.stderr) == [f"ptk: error: {config}: run_dir: {disk}/run: read-only file system"]


def test_ctrl_c_inside_a_checkpoint_save_is_an_interrupt_not_a_failure(tmp_path: Path) -> None:
    """DCP wraps a KeyboardInterrupt raised while it writes in a CheckpointException; it must reach the
    launcher as the interrupt (one line, exit 130), not as a failed save."""
    from torch.distributed.checkpoint.api import CheckpointException

    from pretrainkit.train.parallel.agree import together

    def save() -> None:
        raise CheckpointException("save failed", {0: (KeyboardInterrupt(), None)})

    with pytest.raises(KeyboardInterrupt):
        together(save, tmp_path)
