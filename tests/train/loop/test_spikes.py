"""Loss spikes: the detector's rules, and a real spike (one global batch of random bytes fed to a model
that has learned text) caught during training and recovered from by `skip` and by `rollback`."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch
import yaml

from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.train.config import SpikeConfig, load_config
from pretrainkit.train.loop.run import run_training
from pretrainkit.train.loop.spikes import Action, SpikeDetector
from pretrainkit.train.reports.trace import trace_step

SPIKE_BATCH = 24
RUN = {"max_steps": 32, "checkpoint": {"every": 5, "keep": 2}, "eval": {"every": 0}}


def garbage_from(first: int, last: int = SPIKE_BATCH):
    """Replace global batches first..last with uniformly random bytes (every process the same way)."""

    def transform(batch: int, micro: list) -> list:
        if not first <= batch <= last:
            return micro
        g = torch.Generator().manual_seed(batch)
        return [
            (torch.randint(0, 256, x.shape, generator=g), torch.randint(0, 256, y.shape, generator=g)) for x, y in micro
        ]

    return transform


def events(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]


def test_detector_rules_and_state() -> None:
    d = SpikeDetector(SpikeConfig(window=5, min_history=3, loss_sigmas=3.0, loss_rise=0.1, grad_factor=10.0))
    assert d.check(float("nan"), 1.0) is not None and d.check(1.0, float("inf")) is not None  # before any history
    assert d.check(100.0, 100.0) is None  # too little history for statistics
    for loss in (3.0, 3.1, 2.9):
        d.accept(loss, 1.0)
    assert d.check(3.2, 1.5) is None
    assert "loss" in d.check(4.0, 1.0).reason  # 4.0 > 3.0 + 3 std and > 1.1 x mean
    assert "grad norm" in d.check(3.0, 11.0).reason
    quiet = SpikeDetector(SpikeConfig(window=5, min_history=3, loss_sigmas=3.0, loss_rise=0.1))
    for _ in range(3):
        quiet.accept(3.0, 1.0)
    assert quiet.check(3.2, 1.0) is None  # zero std, but under the 10% rise: not a spike
    clone = SpikeDetector(d.cfg)
    clone.load_state_dict(json.loads(json.dumps(d.state_dict())))
    assert clone.check(4.0, 1.0) == d.check(4.0, 1.0)


@pytest.mark.parametrize("action", ["none", "skip", "rollback"])
def test_detector_decides_what_the_loop_does(action: str) -> None:
    d = SpikeDetector(SpikeConfig(window=5, min_history=3, loss_sigmas=3.0, loss_rise=0.1, action=action))
    for loss in (3.0, 3.1, 2.9):
        calm = d.decide(loss, 1.0)
        assert calm.action is Action.CONTINUE and calm.spike is None and calm.apply
    assert len(d.losses) == 3  # steps that are no spike enter the window
    spike = d.decide(4.0, 1.0)
    assert "loss" in spike.spike.reason and spike.action is Action(action) and spike.apply == (action == "none")
    broken = d.decide(float("nan"), 1.0)
    assert broken.action is (Action.SKIP if action == "none" else Action(action)) and not broken.apply
    assert spike.note is None and (broken.note is not None) == (action == "none")  # says why it is not `none`
    assert action != "none" or "not finite" in broken.note
    assert list(d.losses) == [3.0, 3.1, 2.9]  # a spike never enters the window


@pytest.fixture(scope="module")
def run_dirs(tmp_path_factory) -> dict[str, Path]:
    """The folders of the `runs` (each one's run dir is `run` in it)."""
    return {name: tmp_path_factory.mktemp(name) for name in ("clean", "skip", "none", "rollback")}


@pytest.fixture(scope="module")
def runs(byte_mixture: Path, run_dirs: dict[str, Path]) -> dict:
    """A clean run (detection on, nothing to find), and the same with batch 24 garbage: skip, none, rollback."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # see the one_thread fixture
    out = {}
    for name, action, transform in (
        ("clean", "skip", None),
        ("skip", "skip", garbage_from(SPIKE_BATCH)),
        ("none", "none", garbage_from(SPIKE_BATCH)),
        ("rollback", "rollback", garbage_from(SPIKE_BATCH)),
    ):
        out[name] = train(byte_mixture, run_dirs[name], action, transform)
    torch.set_num_threads(threads)
    return out


@pytest.mark.slow
class TestInducedSpike:
    def test_clean_run_flags_nothing(self, runs: dict) -> None:
        rows, evs = runs["clean"]
        assert evs == [] and [r["step"] for r in rows] == list(range(1, 33))

    def test_skip_drops_the_update_and_ends_close_to_the_clean_run(self, runs: dict) -> None:
        rows, evs = runs["skip"]
        assert [(e["step"], e["batch"], e["action"]) for e in evs] == [(SPIKE_BATCH + 1, SPIKE_BATCH, "skip")]
        spike = evs[0]
        assert spike["loss"] > spike["window_mean"] + 6 * spike["window_std"] and "loss" in spike["reason"]
        assert [r["step"] for r in rows if r.get("skipped")] == [SPIKE_BATCH + 1]
        assert mean_loss(rows[-6:]) == pytest.approx(mean_loss(runs["clean"][0][-6:]), abs=0.05)

    def test_none_logs_the_finite_spike_and_applies_its_update(self, runs: dict) -> None:
        rows, evs = runs["none"]
        assert [(e["step"], e["batch"], e["action"]) for e in evs] == [(SPIKE_BATCH + 1, SPIKE_BATCH, "none")]
        assert "note" not in evs[0] and not any(r.get("skipped") for r in rows)
        assert [r["loss"] for r in rows[: SPIKE_BATCH + 1]] == [r["loss"] for r in runs["skip"][0][: SPIKE_BATCH + 1]]
        assert rows[SPIKE_BATCH + 1]["loss"] != runs["skip"][0][SPIKE_BATCH + 1]["loss"]  # the garbage update applied

    def test_rollback_reloads_skips_the_batch_and_ends_close_to_the_clean_run(self, runs: dict) -> None:
        rows, evs = runs["rollback"]
        assert len(evs) == 1 and evs[0]["action"] == "rollback"
        assert evs[0]["rollback_to"] == 20 and evs[0]["skipped_batches"] == [SPIKE_BATCH]
        assert [r["step"] for r in rows] == list(range(1, 33)) and not any(r.get("skipped") for r in rows)
        clean = runs["clean"][0]
        # Before the spike both are the same run; after it, rollback's step s trains on clean's batch of step s+1.
        assert [r["loss"] for r in rows[:SPIKE_BATCH]] == [r["loss"] for r in clean[:SPIKE_BATCH]]
        assert mean_loss(rows[-7:-1]) == pytest.approx(mean_loss(clean[-6:]), abs=0.05)

    def test_trace_follows_the_rollback_past_the_skipped_batch(self, runs: dict, run_dirs: dict[str, Path]) -> None:
        rows, clean = runs["rollback"][0], runs["clean"][0]
        for step in (SPIKE_BATCH, SPIKE_BATCH + 1, 32):  # before the skipped batch 24, then one batch later
            trace = trace_step(str(run_dirs["rollback"] / "run"), step)
            assert trace["batch"] == (step - 1 if step <= SPIKE_BATCH else step)
            assert trace["batch_sha256"] == rows[step - 1]["batch_sha256"]
        assert rows[SPIKE_BATCH]["batch_sha256"] == clean[SPIKE_BATCH + 1]["batch_sha256"]  # the same data as logged


def test_too_many_rollbacks_stop_the_run(byte_mixture: Path, tmp_path: Path, one_thread) -> None:
    with pytest.raises(UserError, match=r"after 2 rollbacks \(spikes.max_rollbacks\)"):
        train(byte_mixture, tmp_path, "rollback", garbage_from(SPIKE_BATCH, 10**9), max_rollbacks=2)
    assert [e["action"] for e in events(tmp_path / "run")] == ["rollback", "rollback", "stop"]


def train(mixture: Path, directory: Path, action: str, transform, **spikes) -> tuple[list[dict], list[dict]]:
    cfg = {
        "run_dir": "run",
        "seed": 0,
        "data": {"mixture": str(mixture), "seq_len": 32},
        "model": {"d_model": 32, "n_layers": 2, "n_heads": 4},
        "batch": {"global_size": 8, "micro_size": 4},
        "optim": {"lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2, "clip": 1.0},
        **RUN,
        "spikes": {"action": action, "window": 10, "min_history": 8, **spikes},
    }
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    run_training(load_config(path), str(path), transform=transform)
    rows = [json.loads(line) for line in (directory / "run" / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r], events(directory / "run")


def mean_loss(rows: list[dict]) -> float:
    return math.fsum(r["loss"] for r in rows) / len(rows)


@pytest.mark.parametrize("action", ["skip", "none", "rollback"])
def test_a_diverged_run_stops_after_max_consecutive_skips_without_a_checkpoint_of_it(
    kit, tmp_path: Path, capsys, action: str
) -> None:
    """lr 1e6: the first update (finite, clipped) breaks the weights and every later gradient is NaN.
    Whatever spikes.action says, the run stops once 5 updates in a row are dropped, in one line, and
    checkpoints/ holds nothing of the broken model (the first is due at step 4, while updates are dropped)."""
    config = kit.config(tmp_path, optim={"lr": 1e6}, max_steps=20, spikes={"action": action})
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    (error,) = [line for line in err.splitlines() if line.startswith("ptk: error:")]
    assert error == err.splitlines()[-1]
    assert error.startswith(f"ptk: error: {tmp_path / 'run'}: steps 2-6: 5 updates in a row dropped")
    assert "(spikes.max_consecutive_skips 5)" in error and "grad norm nan" in error and "optim.lr 1e+06" in error
    assert "rollbacks" not in error  # none happened: there was no checkpoint to roll back to
    assert not list((tmp_path / "run" / "checkpoints").glob("step-*"))
    assert [r["step"] for r in kit.rows(tmp_path / "run")] == [1, 2, 3, 4, 5]  # step 6 stopped the run
    evs = events(tmp_path / "run")
    assert [e["step"] for e in evs] == [2, 3, 4, 5, 6] and [e["action"] for e in evs] == ["skip"] * 4 + ["stop"]
    notes = {"skip": None, "none": "not finite", "rollback": "no checkpoint to roll back to yet"}
    if notes[action]:
        assert all(notes[action] in e["note"] for e in evs[:-1])
        assert sum(notes[action] in line for line in err.splitlines()) == 4  # the progress lines say it too


def test_max_consecutive_skips_is_configurable(kit, tmp_path: Path) -> None:
    config = kit.config(
        tmp_path, optim={"lr": 1e6}, max_steps=20, spikes={"action": "skip", "max_consecutive_skips": 3}
    )
    with pytest.raises(UserError, match=r": steps 2-4: 3 updates in a row dropped \(spikes.max_consecutive_skips 3\)"):
        run_training(load_config(config), str(config))
    with pytest.raises(UserError, match=r"spikes.max_consecutive_skips: must be >= 1, got 0"):
        load_config(kit.config(tmp_path / "zero", spikes={"max_consecutive_skips": 0}))


@pytest.mark.distributed
def test_a_diverged_run_under_two_processes_stops_in_one_line(kit, tmp_path: Path) -> None:
    """Both processes drop the same updates (the grad norm is all-reduced) and stop at the same step:
    one error line from the launcher, no torchrun report, no checkpoint of the broken model."""
    config = kit.config(
        tmp_path, optim={"lr": 1e6}, max_steps=20, spikes={"action": "skip", "max_consecutive_skips": 3}
    )
    proc = kit.ptk(config, nproc=2)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "ChildFailedError" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ptk: error:")]
    assert len(errors) == 1 and errors[0] == proc.stderr.strip().splitlines()[-1]
    assert errors[0].startswith(f"ptk: error: {tmp_path / 'run'}: steps 2-4: 3 updates in a row dropped")
    assert not list((tmp_path / "run" / "checkpoints").glob("step-*"))
    assert [r["step"] for r in kit.rows(tmp_path / "run")] == [1, 2, 3]
