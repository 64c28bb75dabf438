"""Checkpoints finalized in the background: training goes on while a save's files are hashed, the
checkpoint is named `step-*` only once its `meta.json` is complete, and whatever comes next (the next
save, a rollback, the end of the run) waits for it; a kill -9 while it is pending leaves the previous
checkpoint as the resume point; a failure on another process is one line on every process."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch

import pretrainkit.train.checkpoint.checkpoints as checkpoints
from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.train.checkpoint.checkpoints import Checkpoints, verify
from pretrainkit.train.checkpoint.export import export_model, load_exported
from pretrainkit.train.config import load_config
from pretrainkit.train.loop.run import run_training
from pretrainkit.train.loop.trainer import Trainer
from pretrainkit.train.rundir.names import META_FILE, checkpoint_name

RUN = {"max_steps": 12, "checkpoint": {"every": 4, "keep": 3}, "eval": {"every": 0}}
WORKER = Path(__file__).with_name("held_hashing_worker.py")
# How long the held hashing waits for the loop to wait for it: a bound for a hang (a loop that never
# waits, or hashing on the training's critical path), not a speed expectation.
HOLD_SECONDS = 300


class HeldHashing:
    """The hashing of the files of checkpoints `steps` held until the training loop waits for that checkpoint
    (`Checkpoints.wait` or `wait_alone` entered while it is still a `.tmp-step-*`), or failing with an
    input/output error (`fail`); and after every training step, which checkpoints were named `step-*`
    (`seen`: (step, names) in order)."""

    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, ckpt_dir: Path, steps: tuple[int, ...], fail: bool = False
    ) -> None:
        held = {ckpt_dir / f".tmp-{checkpoint_name(step)}": threading.Event() for step in steps}
        self.seen: list[tuple[int, list[str]]] = []
        real_hash, real_update = checkpoints.sha256_file, Trainer.update

        def sha256_file(path):
            release = held.get(Path(path).parent)
            if release is not None and fail:
                raise OSError(errno.EIO, os.strerror(errno.EIO), str(path))
            if release is not None and not release.wait(HOLD_SECONDS):
                raise RuntimeError("the training loop never waited for the checkpoint being finalized")
            return real_hash(path)

        def releasing(real_wait):
            def wait(ckpts: Checkpoints):
                for tmp, release in held.items():
                    if tmp.is_dir():
                        release.set()
                return real_wait(ckpts)

            return wait

        def update(trainer: Trainer, *args, **kwargs):  # a step's end
            result = real_update(trainer, *args, **kwargs)
            self.seen.append((trainer.step, sorted(p.name for p in ckpt_dir.glob("step-*"))))
            return result

        monkeypatch.setattr(checkpoints, "sha256_file", sha256_file)
        monkeypatch.setattr(Checkpoints, "wait", releasing(Checkpoints.wait))
        monkeypatch.setattr(Checkpoints, "wait_alone", releasing(Checkpoints.wait_alone))
        monkeypatch.setattr(Trainer, "update", update)


def complete(path: Path) -> bool:
    """Whether checkpoint `path` verifies and its meta.json lists every file in it."""
    ckpt = verify(path)
    return set(ckpt.meta["files"]) == {p.name for p in path.iterdir()} - {META_FILE}


def test_training_goes_on_while_a_checkpoint_is_finalized_and_the_next_save_waits(
    kit, tmp_path: Path, monkeypatch, capsys
) -> None:
    config = kit.config(tmp_path, **RUN)
    ckpt_dir = tmp_path / "run" / "checkpoints"
    held = HeldHashing(monkeypatch, ckpt_dir, (4, 12))
    assert main(["train", str(config)]) == 0
    seen = dict(held.seen)
    # Steps 5-8 trained while step 4 was still being hashed: not yet named step-*.
    assert [seen[s] for s in range(4, 9)] == [[]] * 5
    # The save at step 8 waited for it first: step 9 starts with step 4 published.
    assert "step-0000004" in seen[9]
    # The end of the run waited for the last one (held too): all three are there, complete, and no temporary.
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step-0000004", "step-0000008", "step-0000012"]
    assert all(complete(p) for p in ckpt_dir.iterdir())
    capsys.readouterr()
    assert main(["train", str(config), "--set", "max_steps=14"]) == 0
    assert f"resuming from {ckpt_dir}/step-0000012 (step 12)" in capsys.readouterr().err
    assert [r["step"] for r in kit.rows(tmp_path / "run")] == list(range(1, 15))


def test_a_rollback_waits_for_the_checkpoint_being_finalized(kit, tmp_path: Path, monkeypatch) -> None:
    spike = 24  # global batch of random bytes, fed to a model that has learned text for 24 steps

    def garbage(batch: int, micro: list) -> list:
        if batch != spike:
            return micro
        g = torch.Generator().manual_seed(batch)
        return [
            (torch.randint(0, 256, x.shape, generator=g), torch.randint(0, 256, y.shape, generator=g)) for x, y in micro
        ]

    config = kit.config(
        tmp_path,
        max_steps=28,
        checkpoint={"every": 5, "keep": 2},
        eval={"every": 0},
        spikes={"action": "rollback", "window": 10, "min_history": 8},
    )
    held = HeldHashing(monkeypatch, tmp_path / "run" / "checkpoints", (20,))
    run_training(load_config(config), str(config), transform=garbage)
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert [(e["step"], e["action"], e.get("rollback_to")) for e in events] == [(spike + 1, "rollback", 20)]
    # Steps 21-25 ran while step 20 was pending (only step 15 was published); the rollback took step 20.
    assert [step for step, _ in held.seen] == list(range(1, spike + 2)) + list(range(21, 29))
    assert [names for _, names in held.seen[20 : spike + 1]] == [["step-0000010", "step-0000015"]] * 5


def stop_at(batch: int, error: BaseException):
    """A batch transform raising `error` when global batch `batch` is drawn (a failure, or Ctrl-C)."""

    def transform(b: int, micro: list) -> list:
        if b == batch:
            raise error
        return micro

    return transform


@pytest.mark.parametrize(
    "error", [KeyboardInterrupt(), UserError("a failure in the training loop")], ids=["ctrl-c", "error"]
)
def test_a_run_stopping_waits_for_the_checkpoint_being_finalized(kit, tmp_path: Path, monkeypatch, error) -> None:
    config = kit.config(tmp_path, **RUN)
    ckpt_dir = tmp_path / "run" / "checkpoints"
    held = HeldHashing(monkeypatch, ckpt_dir, (4,))
    with pytest.raises(type(error)):
        run_training(load_config(config), str(config), transform=stop_at(5, error))
    assert held.seen[-1] == (5, [])  # stopped drawing step 6's batch, with step 4 still being hashed
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step-0000004"] and complete(ckpt_dir / "step-0000004")


def test_a_finalization_failing_while_the_run_stops_is_reported_and_leaves_nothing_half_written(
    kit, tmp_path: Path, monkeypatch, capsys
) -> None:
    config = kit.config(tmp_path, **RUN)
    ckpt_dir = tmp_path / "run" / "checkpoints"
    HeldHashing(monkeypatch, ckpt_dir, (8,), fail=True)
    with pytest.raises(KeyboardInterrupt):
        run_training(load_config(config), str(config), transform=stop_at(9, KeyboardInterrupt()))
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "not saved" in line]
    assert line.startswith(f"ptk train: the checkpoint being finalized was not saved: {ckpt_dir}/.tmp-step-0000008/")
    assert line.endswith(": input/output error")
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step-0000004"]
    # Without the interrupt, the same failure ends the run as one line (exit 2), at the next wait.
    assert main(["train", str(config), "--no-resume"]) == 2
    (line,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("ptk: error")]
    assert line.startswith(f"ptk: error: {ckpt_dir}/.tmp-step-0000008/") and line.endswith(": input/output error")
    assert sorted(p.name for p in ckpt_dir.iterdir()) == ["step-0000004"]


def held_run(config: Path, mode: str, step: int, rank: str, nproc: int = 2) -> list[str]:
    """`ptk train`'s torchrun command, through held_hashing_worker.py (see there for the modes)."""
    return [
        sys.executable,
        "-m",
        "pretrainkit.train.torchrun",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(WORKER),
        mode,
        str(step),
        rank,
        str(config),
    ]


def rows_logged(metrics: Path) -> list[int]:
    if not metrics.exists():
        return []
    return [
        json.loads(line)["step"] for line in metrics.read_text().splitlines() if line.endswith("}") and "loss" in line
    ]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.parametrize("parallel,nproc", [("ddp", 2), ("fsdp", 2)], ids=["ddp2", "fsdp2"])
def test_kill_9_while_a_checkpoint_is_hashed_resumes_from_the_previous_one_as_if_uninterrupted(
    kit, tmp_path: Path, parallel, nproc: int
) -> None:
    run_cfg = {**RUN, "checkpoint": {"every": 4, "keep": 2}, "parallel": parallel}
    ref = kit.config(tmp_path / "ref", **run_cfg)
    proc = kit.ptk(ref, nproc=nproc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    reference = kit.rows(tmp_path / "ref" / "run")

    config = kit.config(tmp_path / "killed", **run_cfg)
    run, metrics = tmp_path / "killed" / "run", tmp_path / "killed" / "run" / "metrics.jsonl"
    log = tmp_path / "killed" / "stderr.txt"
    with log.open("w") as err:
        victim = kit.start(held_run(config, "hold", 8, "any", nproc), stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + kit.hang_seconds
        held = [tmp_path / "killed" / f"held-rank{r}" for r in range(nproc)]
        # Every process is hashing step 8 (held) while training goes on past it.
        while not (all(h.exists() for h in held) and max(rows_logged(metrics), default=0) >= 10):
            assert victim.poll() is None, log.read_text()[-3000:]
            assert time.monotonic() < deadline, "training did not go on while step 8 was being hashed"
            time.sleep(0.05)
        kit.kill_processes(str(config))  # kill -9 of every process of the run
        victim.wait()
        assert kit.processes_end(str(config))
    finally:
        kit.kill_processes(str(config))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == [".tmp-step-0000008", "step-0000004"]
    assert not (run / "checkpoints" / ".tmp-step-0000008" / META_FILE).exists()

    resumed = kit.ptk(config, nproc=nproc)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming from {run}/checkpoints/step-0000004 (step 4)" in resumed.stderr
    assert [(r["step"], r["loss"], r["grad_norm"]) for r in kit.rows(run)] == [
        (r["step"], r["loss"], r["grad_norm"]) for r in reference
    ]
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000008", "step-0000012"]
    assert all(complete(p) for p in (run / "checkpoints").iterdir())  # every process's files listed and hashed
    got, _ = load_exported(export_model(run, tmp_path / "killed.safetensors")[0])
    want, _ = load_exported(export_model(tmp_path / "ref" / "run", tmp_path / "ref.safetensors")[0])
    for (name, a), (_, b) in zip(got.state_dict().items(), want.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.mark.distributed
def test_a_hashing_failure_on_another_process_is_one_line_and_the_previous_checkpoint_resumes(
    kit, tmp_path: Path
) -> None:
    config = kit.config(tmp_path, **{**RUN, "max_steps": 8})
    proc = subprocess.run(
        held_run(config, "fail", 8, "1"),
        capture_output=True,
        text=True,
        cwd=kit.root,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=kit.hang_seconds,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    (line,) = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert line.startswith(f"ptk: error: {tmp_path}/run/checkpoints/.tmp-step-0000008/"), line
    assert line.endswith(": input/output error"), line
    checkpoints_left = sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir())
    assert checkpoints_left == ["step-0000004"]  # no step-8, no temporary left behind
    resumed = kit.ptk(config, nproc=2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "step-0000004 (step 4)" in resumed.stderr
