"""`ptk init`: a first mixture.yaml and train.yaml from real shards, sized for the machine, that train as written."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import yaml

from pretrainkit.cli import main
from pretrainkit.mixtures import load_mixture
from pretrainkit.train.config import load_config
from pretrainkit.train.planning.first_run import MAX_EPOCHS, Corpus, Machine, plan_first_run
from pretrainkit.train.planning.plan import LAWS
from pretrainkit.train.planning.probe import Probe, fit_to_minutes

LAW = LAWS["besiroglu"]
CPU = Machine("cpu", 2, "2 CPU cores", 8e10)
GPUS = Machine("cuda", 8, "8 x NVIDIA H100", 8 * 0.4 * 989e12)


def test_init_writes_commented_files_that_train_as_written(kit, tmp_path: Path, capsys) -> None:
    shards = kit.mixture.parent
    run = tmp_path / "first"
    assert (
        main(
            [
                "init",
                str(run),
                "--shards",
                str(shards / "shakespeare"),
                str(shards / "wiki"),
                "--minutes",
                "5",
                "--no-measure",
            ]
        )
        == 0
    )
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
    # Document masking, on for new runs, trains on every target but those of the EOS tokens (next documents' starts).
    assert cfg.data.document_masking
    assert 0.9 * cfg.batch.global_size * cfg.data.seq_len < rows[0]["tokens"] < cfg.batch.global_size * cfg.data.seq_len
    # Never overwrites; the same inputs give the same files.
    assert main(["init", str(run), "--shards", str(shards / "wiki")]) == 2
    assert "exists; ptk init never overwrites" in capsys.readouterr().err
    again = tmp_path / "again" / "first"
    assert (
        main(
            [
                "init",
                str(again),
                "--shards",
                str(shards / "shakespeare"),
                str(shards / "wiki"),
                "--minutes",
                "5",
                "--no-measure",
            ]
        )
        == 0
    )
    assert (again / "train.yaml").read_text() == train_text


def test_init_from_a_mixture_rewrites_its_paths(kit, tmp_path: Path) -> None:
    run = tmp_path / "deep" / "er" / "run"
    assert main(["init", str(run), "--mixture", str(kit.mixture), "--no-measure"]) == 0
    copied, original = load_mixture(run / "mixture.yaml"), load_mixture(kit.mixture)
    assert [(s.name, s.weight, s.shard_set.fingerprint) for s in copied.sources] == [
        (s.name, s.weight, s.shard_set.fingerprint) for s in original.sources
    ]
    assert copied.config.holdout == original.config.holdout
    assert not Path(yaml.safe_load((run / "mixture.yaml").read_text())["sources"][0]["shards"]).is_absolute()


def test_init_refuses_a_folder_holding_another_commands_output(kit, tmp_path: Path, capsys) -> None:
    shard_set = kit.mixture.parent / "wiki"  # a shard set: no run directory
    before = sorted(p.name for p in shard_set.iterdir())
    assert main(["init", str(shard_set), "--mixture", str(kit.mixture), "--no-measure"]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"ptk: error: {shard_set}: holds a ptk tokenize output; ptk init writes only into a folder holding no "
        "other command's output (a new one, one of your files, or a ptk train run)"
    ]
    assert sorted(p.name for p in shard_set.iterdir()) == before
    mine = tmp_path / "mine"  # a folder of the user's own files is fine: the run directory beside its configs
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert main(["init", str(mine), "--mixture", str(kit.mixture), "--no-measure"]) == 0
    assert (mine / "train.yaml").is_file() and (mine / "notes.txt").read_text() == "keep me"


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


def _run_seconds(n: int, probe: Probe) -> float:
    """A run's wall time as the probe predicts it, counted here: evaluations every n // 10 steps and at the last."""
    every = max(1, n // 10)
    evaluations = n // every + (n % every != 0)  # the multiples of `every` up to n, and n
    return probe.fixed_s + n * probe.step_s + evaluations * probe.eval_s


def test_the_steps_fill_the_minutes_at_the_measured_speed() -> None:
    big, small = Corpus(10_000_000_000, 3000, 4096), Corpus(1_000_000, 300, 4096)
    plan = plan_first_run(big, CPU, minutes=10, law=LAW)
    for probe in (
        Probe(steps=8, step_s=0.5, eval_s=2.0, fixed_s=12.0),
        Probe(8, 1.0, 4.0, 12.0),
        Probe(8, 0.05, 0.3, 40.0),
    ):
        fitted = fit_to_minutes(plan, probe, 10, big)
        most = max(n for n in range(1, 20_000) if _run_seconds(n, probe) <= 600)  # the most steps that fit 600 s
        assert fitted.max_steps == most and fitted.minutes * 60 == pytest.approx(_run_seconds(most, probe))
        assert fitted.minutes == pytest.approx(10, abs=0.01)
        assert fitted.tokens == most * plan.global_size * plan.seq_len and fitted.model == plan.model
        assert fitted.warmup_steps == max(1, most // 20) and not fitted.data_limited
    # A small corpus caps the steps at four passes, and the estimate says the run ends early.
    capped = fit_to_minutes(plan, Probe(8, 0.5, 2.0, 12.0), 10, small)
    assert capped.data_limited and capped.tokens <= MAX_EPOCHS * small.train_tokens and capped.minutes < 10


MEASURED = re.compile(
    r"measured: ([0-9.e+-]+) s per step,\n# ([0-9.e+-]+) s per evaluation and ([0-9.]+) s start-up "
    r"and shut-down in a (\d+)-step run"
)


def _init_measured(kit, run: Path, minutes: float, capsys) -> tuple[Probe, dict, str]:
    shards = kit.mixture.parent
    assert (
        main(
            ["init", str(run), "--shards", str(shards / "shakespeare"), str(shards / "wiki"), "--minutes", str(minutes)]
        )
        == 0
    )
    out = capsys.readouterr().out
    text = (run / "train.yaml").read_text()
    step_s, eval_s, fixed_s, steps = MEASURED.search(text).groups()
    return Probe(int(steps), float(step_s), float(eval_s), float(fixed_s)), yaml.safe_load(text), out


def test_init_times_a_few_real_steps_and_sizes_the_run_from_them(kit, tmp_path: Path, capsys) -> None:
    run = tmp_path / "timed"
    probe, cfg, out = _init_measured(kit, run, 0.5, capsys)
    assert sorted(p.name for p in run.iterdir()) == ["mixture.yaml", "train.yaml"]  # the probe's config is gone
    assert 4 <= probe.steps <= 20 and probe.step_s > 0 and probe.fixed_s > 1  # a real launch: interpreters, imports
    assert f"(measured: {probe.step_s:.3g} s per step, {probe.fixed_s:.1f} s start-up)" in out
    # The estimate printed is the measured start-up, steps and evaluations of max_steps.
    estimate = float(re.search(r"about ([0-9.]+) min on", out).group(1))
    assert probe.seconds(cfg["max_steps"]) / 60 == pytest.approx(estimate, abs=0.05)
    text = (run / "train.yaml").read_text()
    if "capped at 4 passes" in text:  # a machine fast enough to make more passes over this corpus in the time
        train_tokens = int(re.search(r"\) and ([0-9,]+) training tokens", text).group(1).replace(",", ""))
        tokens = cfg["max_steps"] * cfg["batch"]["global_size"] * cfg["data"]["seq_len"]
        assert 0.9 * MAX_EPOCHS * train_tokens <= tokens <= 1.01 * MAX_EPOCHS * train_tokens
        assert probe.seconds(cfg["max_steps"]) < 30
    else:  # the steps fill the half minute
        assert probe.seconds(cfg["max_steps"]) == pytest.approx(30, rel=0.03)


def test_a_failed_probe_is_one_line_and_leaves_nothing_behind(kit, tmp_path: Path, capsys, monkeypatch) -> None:
    # The probe's `ptk train` fails (here: the interpreter it starts is one that fails as a killed or
    # out-of-memory training process would, after its own error line).
    failing = tmp_path / "failing-python"
    failing.write_text("#!/bin/sh\necho 'ptk: error: the probe process ran out of memory' >&2\nexit 2\n")
    failing.chmod(0o755)
    monkeypatch.setattr("sys.executable", str(failing))
    run = tmp_path / "run"
    assert main(["init", str(run), "--shards", str(kit.mixture.parent / "wiki"), "--minutes", "0.5"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "the probe run (a few steps of it, to time this machine) failed:" in err[0]
    assert "ptk: error: the probe process ran out of memory" in err[0] and "--no-measure" in err[0]
    assert list(run.iterdir()) == []  # the same command can run again


def test_init_refuses_an_altered_shard_before_writing_anything(kit, tmp_path: Path, capsys) -> None:
    import shutil

    shards = tmp_path / "wiki"
    shutil.copytree(kit.mixture.parent / "wiki", shards)
    shard = sorted(shards.glob("shard-*"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only its sha256 tells
    shard.write_bytes(bytes(data))
    run = tmp_path / "run"
    assert main(["init", str(run), "--shards", str(shards), "--no-measure"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{shard.name}: altered: sha256 differs from the manifest" in err[0], err
    assert not run.exists() or list(run.iterdir()) == []


def test_a_source_of_one_document_gets_a_run_without_validation_that_trains(kit, tmp_path: Path, capsys) -> None:
    """One document cannot be split into training and held-out documents: `ptk init` (its probe run too)
    writes a config with validation off, says so, and `ptk train` runs it."""
    import numpy as np

    from fixtures.corpora import DATA, need_data
    from pretrainkit.shards import write_shards

    book = need_data(DATA / "tinyshakespeare" / "input.txt").read_bytes()[:200_000]  # the whole as one document
    write_shards([np.frombuffer(book, dtype=np.uint8).astype(np.uint16)], tmp_path / "book", vocab_size=257, eos_id=256)
    run = tmp_path / "run"
    assert main(["init", str(run), "--shards", str(tmp_path / "book"), "--minutes", "0.2"]) == 0
    out = capsys.readouterr().out
    cfg = yaml.safe_load((run / "train.yaml").read_text())
    assert cfg["eval"]["every"] == 0 and "held-out split (0 tokens)" in (run / "train.yaml").read_text()
    assert f"ptk init: note: validation is off in {run / 'train.yaml'}" in out
    overrides = ["--set", "max_steps=3", "--set", "optim.warmup_steps=1", "--set", "batch.micro_size=1"]
    assert main(["train", str(run / "train.yaml"), *overrides, "--set", "batch.global_size=2"]) == 0
    assert [r["step"] for r in kit.rows(run) if "loss" in r] == [1, 2, 3]
