"""Experiment tracking on real runs: TensorBoard events read back with tensorboard's own reader match
metrics.jsonl; a W&B offline run dir holds the rows; a failing tracker is reported once and training goes on."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from fixtures.wandb_records import history_rows, wandb_records
from pretrainkit.cli import main
from pretrainkit.train.config import load_config
from pretrainkit.train.loop.run import run_training

TRAIN_KEYS = ("loss", "lr", "grad_norm", "tokens", "tokens_per_s")


def _metrics(run: Path) -> tuple[list[dict], list[dict]]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "loss" in r], [r for r in rows if "val_loss" in r]


def _tensorboard(run: Path) -> EventAccumulator:
    acc = EventAccumulator(str(run / "tb"), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def test_tensorboard_events_hold_the_metrics_rows_and_follow_a_resume(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(
        tmp_path, max_steps=8, checkpoint={"every": 4}, eval={"every": 4, "batches": 1}, logging={"tensorboard": True}
    )

    def crash_at_step_6(batch: int, micro: list) -> list:
        if batch == 5:
            raise RuntimeError("the machine went down")
        return micro

    with pytest.raises(RuntimeError):  # steps 1-5 logged, the checkpoint at step 4
        run_training(load_config(config), where=str(config), transform=crash_at_step_6)
    tb_files = list((tmp_path / "run" / "tb").iterdir())
    assert [e.step for e in _tensorboard(tmp_path / "run").Scalars("train/loss")] == [1, 2, 3, 4, 5]
    assert main(["train", str(config)]) == 0  # resumes from step 4: step 5 is trained again, then 6-8
    assert "failed" not in capsys.readouterr().err
    assert len(list((tmp_path / "run" / "tb").iterdir())) == len(tb_files) + 1
    run = tmp_path / "run"
    train, val = _metrics(run)
    acc = _tensorboard(run)
    for key in TRAIN_KEYS:
        logged = [(e.step, e.value) for e in acc.Scalars(f"train/{key}")]
        assert [s for s, _ in logged] == [r["step"] for r in train] == list(range(1, 9))
        assert [v for _, v in logged] == pytest.approx([r[key] for r in train], rel=1e-6)
    for source in ("shakespeare", "wiki"):
        logged = [(e.step, e.value) for e in acc.Scalars(f"val_loss/{source}")]
        assert logged == [(r["step"], pytest.approx(r["val_loss"][source], rel=1e-6)) for r in val]
        assert [s for s, _ in logged] == [4, 8]


def test_a_spike_is_text_in_tensorboard(kit, tmp_path: Path) -> None:
    # A loss above ln(257) by 10% after the loss fell is a spike under these thresholds; lr 3 makes one,
    # then diverges (every later update dropped): max_consecutive_skips lets the run log them to the end.
    config = kit.config(
        tmp_path,
        max_steps=12,
        optim={"lr": 3.0, "min_lr": 0.3, "warmup_steps": 1},
        spikes={"action": "skip", "min_history": 2, "loss_sigmas": 1, "loss_rise": 0.01, "max_consecutive_skips": 12},
        eval={"every": 0},
        logging={"tensorboard": True},
    )
    assert main(["train", str(config)]) == 0
    events = [json.loads(line) for line in (tmp_path / "run" / "events.jsonl").read_text().splitlines()]
    assert events, "the settings above must produce a spike"
    texts = _tensorboard(tmp_path / "run").Tensors("spikes/text_summary")
    assert [t.step for t in texts] == [e["step"] for e in events]
    assert all(e["reason"] in t.tensor_proto.string_val[0].decode() for t, e in zip(texts, events))


def test_wandb_offline_run_dir_holds_the_rows_and_a_resume_continues_the_run(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(
        tmp_path,
        max_steps=6,
        checkpoint={"every": 3},
        eval={"every": 3, "batches": 1},
        logging={"wandb": {"project": "ptk-test", "mode": "offline"}},
    )
    assert main(["train", str(config), "--set", "max_steps=3"]) == 0
    assert main(["train", str(config)]) == 0
    assert "failed" not in capsys.readouterr().err
    run = tmp_path / "run"
    run_id = (run / "wandb-run-id").read_text().strip()
    # W&B names the directory by the start second, adding "-1" when a resumption starts in the same second
    offline = sorted((run / "wandb").glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb"))
    assert len(offline) == 2  # the first run and its resumption, under one W&B run id
    history = [row for f in offline for row in history_rows(wandb_records(f))]
    train, val = _metrics(run)
    logged_train = [h for h in history if "train/loss" in h]
    assert [h["step"] for h in logged_train] == [r["step"] for r in train] == list(range(1, 7))
    for key in TRAIN_KEYS:
        assert [h[f"train/{key}"] for h in logged_train] == pytest.approx([r[key] for r in train], rel=1e-12)
    logged_val = [h for h in history if "val_loss/wiki" in h]
    assert [(h["step"], h["val_loss/wiki"]) for h in logged_val] == [(r["step"], r["val_loss"]["wiki"]) for r in val]
    config_records = [r for f in offline[:1] for r in wandb_records(f) if r.WhichOneof("record_type") == "run"]
    resolved = {item.key: json.loads(item.value_json) for item in config_records[0].run.config.update}
    assert resolved["max_steps"] == 3 and resolved["logging"]["wandb"]["project"] == "ptk-test"


def test_a_failing_tracker_is_reported_once_and_training_goes_on(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, max_steps=6, eval={"every": 3, "batches": 1}, logging={"tensorboard": True})
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "tb").write_text("a file where the event directory should be\n")
    assert main(["train", str(config)]) == 0
    err = capsys.readouterr().err
    assert err.count("logging.tensorboard failed") == 1 and "switched off" in err
    assert [r["step"] for r in _metrics(tmp_path / "run")[0]] == list(range(1, 7))


def test_an_unknown_wandb_mode_is_a_one_line_config_error(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, logging={"wandb": {"project": "p", "mode": "cloud"}})
    assert main(["train", str(config)]) == 2
    assert "logging.wandb.mode: must be one of offline, online, got 'cloud'" in capsys.readouterr().err


def test_wandb_online_without_credentials_is_reported_once_and_never_prompts(
    kit, tmp_path: Path, capsys, monkeypatch
) -> None:
    for var in ("WANDB_API_KEY", "WANDB_IDENTITY_TOKEN_FILE", "NETRC"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.netrc, no W&B settings
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    config = kit.config(
        tmp_path,
        max_steps=4,
        eval={"every": 0},
        logging={"tensorboard": True, "wandb": {"project": "p", "mode": "online"}},
    )
    assert main(["train", str(config)]) == 0
    err = capsys.readouterr().err
    assert err.count("logging.wandb failed") == 1 and "needs W&B credentials" in err
    assert "logging.tensorboard failed" not in err  # the other tracker goes on
    assert [e.step for e in _tensorboard(tmp_path / "run").Scalars("train/loss")] == [1, 2, 3, 4]
