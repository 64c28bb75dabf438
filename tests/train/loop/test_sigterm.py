"""SIGTERM to `ptk train`, as Slurm, Kubernetes and spot instances send it before they kill: every process
stops after the same step, that step is checkpointed, one line says so, exit status 143; the same
command then resumes bitwise where the run stopped, redoing no step, and ends with the checkpoints of the
uninterrupted run, byte for byte (the step's checkpoint, off the schedule, pruned once a newer one exists;
the RNG states those of a run that never stopped).

Under `--nproc 2` the signal goes where each scheduler sends it: to ptk alone (Kubernetes' PID 1), to
every process of the job (Slurm), or to torchrun; and to every process of a plain `torchrun -m
pretrainkit.train` (a cluster's own launch)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pretrainkit.train.checkpoint.export import export_model, load_exported

RUN = {"max_steps": 160, "checkpoint": {"every": 40, "keep": 5}, "eval": {"every": 40, "batches": 1}}
NOISE = ("Traceback", "KeyboardInterrupt", "Terminated", "WARNING", "ChildFailedError", "torch.distributed.elastic")


def losses(rows: list[dict]) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows]


def checkpoint_files(run_dir: Path) -> dict[str, bytes]:
    """Every checkpoint's files but `meta.json` (which names the run's own paths): DCP's tensors and
    `.metadata`, the RNG states."""
    found = sorted((run_dir / "checkpoints").glob("step-*/*"))
    return {f"{p.parent.name}/{p.name}": p.read_bytes() for p in found if p.name != "meta.json"}


def final_weights(run_dir: Path, out: Path) -> dict[str, torch.Tensor]:
    model, _ = load_exported(export_model(run_dir, out)[0])
    return model.state_dict()


@pytest.fixture(scope="module")
def references(session_kit, tmp_path_factory):
    """nproc -> (losses, final weights, checkpoint files) of an uninterrupted run (made once per nproc)."""
    made: dict[int, tuple[list, dict, dict]] = {}

    def reference(nproc: int) -> tuple[list, dict, dict]:
        if nproc not in made:
            root = tmp_path_factory.mktemp(f"reference-{nproc}")
            proc = session_kit.ptk(session_kit.config(root, **RUN), nproc=nproc)
            assert proc.returncode == 0, proc.stderr[-3000:]
            run = root / "run"
            made[nproc] = (
                losses(session_kit.rows(run)),
                final_weights(run, root / "w.safetensors"),
                checkpoint_files(run),
            )
        return made[nproc]

    return reference


def signal_targets(kit, config: Path, ptk: int, where: str) -> list[int]:
    """The processes a scheduler signals: ptk (Kubernetes' PID 1), all of them (Slurm), or torchrun."""
    if where == "ptk":
        return [ptk]
    every = kit.processes(str(config))  # ptk, torchrun and its workers, whatever session each runs in
    if where == "every process":
        return every
    return [pid for pid in every if b"pretrainkit.train.torchrun" in Path(f"/proc/{pid}/cmdline").read_bytes()]


def plain_torchrun(config: Path) -> list[str]:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    return [*launcher, "-m", "pretrainkit.train", str(config)]


def stop_with_sigterm(kit, config: Path, command: list[str], where: str) -> subprocess.CompletedProcess:
    """Run `command`, and SIGTERM `where` once it has logged a few steps."""
    metrics = config.parent / "run" / "metrics.jsonl"
    victim = kit.start(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        while (not metrics.exists() or len(metrics.read_text().splitlines()) < 3) and victim.poll() is None:
            time.sleep(0.01)
        for pid in signal_targets(kit, config, victim.pid, where):
            os.kill(pid, signal.SIGTERM)
        out, err = victim.communicate(timeout=kit.hang_seconds)
        assert kit.processes_end(str(config)), "a training process outlived the stopped ptk"
    finally:
        kit.kill_processes(str(config))
    return subprocess.CompletedProcess(victim.args, victim.returncode, out, err)


@pytest.mark.parametrize(
    ("nproc", "where"),
    [
        (1, "ptk"),
        pytest.param(2, "ptk", marks=[pytest.mark.slow, pytest.mark.distributed]),
        pytest.param(2, "every process", marks=[pytest.mark.slow, pytest.mark.distributed]),
        pytest.param(2, "torchrun", marks=[pytest.mark.slow, pytest.mark.distributed]),
    ],
)
def test_sigterm_checkpoints_the_step_in_flight_and_the_same_command_resumes_bitwise(
    kit, tmp_path: Path, references, nproc: int, where: str
) -> None:
    config = kit.config(tmp_path, **RUN)
    run_dir = tmp_path / "run"
    stopped = stop_with_sigterm(kit, config, kit.ptk_command(config, nproc=nproc), where)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    assert not any(noise in stopped.stderr for noise in NOISE), stopped.stderr[-3000:]
    steps = [r["step"] for r in kit.rows(run_dir)]
    last = steps[-1]
    assert 3 <= last < RUN["max_steps"], "the run finished before the SIGTERM reached it"
    assert max(p.name for p in (run_dir / "checkpoints").iterdir()) == f"step-{last:07d}"
    assert stopped.stderr.strip().splitlines()[-1] == stop_line(last)
    check_resume(kit, tmp_path, config, references, nproc, last, kit.ptk(config, nproc=nproc))


@pytest.mark.slow
@pytest.mark.distributed
def test_sigterm_under_a_plain_torchrun_stops_every_process_after_the_same_checkpointed_step(
    kit, tmp_path: Path, references
) -> None:
    """torchrun's own SIGTERM handling (its warnings and traceback are its own) sends the workers SIGTERM too."""
    config = kit.config(tmp_path, **RUN)
    stopped = stop_with_sigterm(kit, config, plain_torchrun(config), "every process")
    last = kit.rows(tmp_path / "run")[-1]["step"]
    assert 3 <= last < RUN["max_steps"], "the run finished before the SIGTERM reached it"
    assert max(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == f"step-{last:07d}"
    assert [line for line in stopped.stderr.splitlines() if line.startswith("ptk")] == [stop_line(last)]  # rank 0's
    resumed = subprocess.run(plain_torchrun(config), capture_output=True, text=True, cwd=kit.root)
    check_resume(kit, tmp_path, config, references, 2, last, resumed)


def stop_line(step: int) -> str:
    return f"ptk train: stopped by SIGTERM at step {step}; no step is lost: the same command resumes the run"


def check_resume(kit, tmp_path: Path, config: Path, references, nproc: int, last: int, resumed) -> None:
    """The run resumed after step `last` and ended bitwise the uninterrupted one: no step redone."""
    run_dir = config.parent / "run"
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"ptk train: resuming from {run_dir}/checkpoints/step-{last:07d} (step {last})" in resumed.stderr
    assert f"steps {last + 1}-{RUN['max_steps']} of" in resumed.stderr  # its first step is the one after the stop
    reference_losses, reference_weights, reference_checkpoints = references(nproc)
    assert losses(kit.rows(run_dir)) == reference_losses  # every step once, bitwise the uninterrupted run's
    assert checkpoint_files(run_dir) == reference_checkpoints
    weights = final_weights(run_dir, tmp_path / "w.safetensors")
    assert weights.keys() == reference_weights.keys()
    for name, tensor in weights.items():
        assert torch.equal(tensor, reference_weights[name]), name
