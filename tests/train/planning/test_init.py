"""`ptk init`: a first mixture.yaml and train.yaml from real shards, sized for the machine, that train as written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from pretrainkit.mixtures import load_mixture
from pretrainkit.cli import main
from pretrainkit.train.config import load_config
from pretrainkit.train.planning.first_run import MAX_EPOCHS, Corpus, Machine, plan_first_run
from pretrainkit.train.planning.plan import LAWS

LAW = LAWS["besiroglu"]
CPU = Machine("cpu", 2, "2 CPU cores", 8e10)
GPUS = Machine("cuda", 8, "8 x NVIDIA H100", 8 * 0.4 * 989e12)


def test_init_writes_commented_files_that_train_as_written(kit, tmp_path: Path, capsys) -> None:
    shards = kit.mixture.parent
    run = tmp_path / "first"
    assert main(["init", str(run), "--shards", str(shards / "shakespeare"), str(shards / "wiki"), "--minutes", "5"]) == 0
    out = capsys.readouterr().out
    assert f"next: ptk train {run / 'train.yaml'}" in out  # with --nproc N for this machine's cores
    mixture_text, train_text = (run / "mixture.yaml").read_text(), (run / "train.yaml").read_text()
    assert mixture_text.startswith("# Mixture written by `ptk init`") and "# Plan: " in train_text
    mix = load_mixture(run / "mixture.yaml")
    tokens = {s.name: s.shard_set.num_tokens for s in mix.sources}
    weights = {s.name: s.weight for s in mix.sources}
    assert weights == pytest.approx({k: v / sum(tokens.values()) for k, v in tokens.items()}, rel=1e-3)
    cfg = load_config(run / "train.yaml")
    assert Path(cfg.run_dir) == run.resolve() and cfg.data.seq_len in (128, 256, 512)
    assert cfg.batch.global_size % cfg.batch.micro_size == 0 and cfg.max_steps >= 1
    assert f"# Plan: {cfg.max_steps} steps" not in train_text and f"max_steps: {cfg.max_steps}\n" in train_text
    # It trains as written (two steps of it here), its outputs in RUN_NAME itself.
    assert main(["train", str(run / "train.yaml"), "--set", "max_steps=2", "--set", "optim.warmup_steps=1"]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if "loss" in r] == [1, 2]
    assert rows[0]["tokens"] == cfg.batch.global_size * cfg.data.seq_len
    # Never overwrites; the same inputs give the same files.
    assert main(["init", str(run), "--shards", str(shards / "wiki")]) == 2
    assert "exists; ptk init never overwrites" in capsys.readouterr().err
    again = tmp_path / "again" / "first"
    assert main(["init", str(again), "--shards", str(shards / "shakespeare"), str(shards / "wiki"), "--minutes", "5"]) == 0
    assert (again / "train.yaml").read_text() == train_text


def test_init_from_a_mixture_rewrites_its_paths(kit, tmp_path: Path) -> None:
    run = tmp_path / "deep" / "er" / "run"
    assert main(["init", str(run), "--mixture", str(kit.mixture)]) == 0
    copied, original = load_mixture(run / "mixture.yaml"), load_mixture(kit.mixture)
    assert [(s.name, s.weight, s.shard_set.fingerprint) for s in copied.sources] == \
        [(s.name, s.weight, s.shard_set.fingerprint) for s in original.sources]  # fmt: skip
    assert copied.config.holdout == original.config.holdout
    assert not Path(yaml.safe_load((run / "mixture.yaml").read_text())["sources"][0]["shards"]).is_absolute()


def test_sizes_follow_the_data_and_the_budget() -> None:
    small, big = Corpus(1_000_000, 300, 4096), Corpus(10_000_000_000, 3000, 4096)
    limited = plan_first_run(small, CPU, minutes=30, law=LAW)
    assert limited.data_limited and limited.tokens <= MAX_EPOCHS * small.train_tokens * 1.01
    assert limited.seq_len == 512 and limited.precision == "fp32"  # 300 -> 512, the CPU's most
    assert limited.minutes < 30
    short, long = plan_first_run(big, CPU, minutes=10, law=LAW), plan_first_run(big, CPU, minutes=120, law=LAW)
    assert not short.data_limited and long.params > short.params and long.tokens > short.tokens
    for plan, minutes in ((short, 10), (long, 120)):
        assert plan.minutes == pytest.approx(minutes, rel=0.05)  # the budget is spent
        assert plan.max_steps >= 300 or plan.global_size == 8
        assert plan.tokens == plan.max_steps * plan.global_size * plan.seq_len
        assert plan.nproc == 2 and plan.global_size % (plan.micro_size * plan.nproc) == 0
    gpu = plan_first_run(big, GPUS, minutes=60, law=LAW)
    assert gpu.precision == "bf16" and gpu.seq_len == 4096 and gpu.params > 100 * long.params
    assert gpu.nproc == 8 and gpu.global_size % (gpu.micro_size * 8) == 0
    # On the law's own terms the choice is near the optimum for its compute.
    n_opt, _ = LAW.optimal_split(GPUS.flops_per_s * 3600)
    assert abs(math.log(gpu.params / n_opt)) < math.log(2)
