"""Compute-optimal sizing: the closed-form optimum, C = 6ND budgets, and `ptk plan` end to end."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from fixtures.corpora import DATA, need_data
from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.shards import write_shards
from pretrainkit.train.model.llama import ModelConfig
from pretrainkit.train.planning.cli import human
from pretrainkit.train.planning.plan import LAWS, LossLaw, load_law, resolve_budget


@pytest.mark.parametrize("name", sorted(LAWS))
@pytest.mark.parametrize("flops", [1e18, 5.76e23])
def test_optimal_split_minimises_loss_along_the_compute_budget(name, flops):
    law = LAWS[name]
    n_opt, d_opt = law.optimal_split(flops)
    assert 6 * n_opt * d_opt == pytest.approx(flops, rel=1e-12)
    # A dense scan over model sizes at the same compute finds no lower loss.
    ns = n_opt * np.logspace(-1.5, 1.5, 3001)
    losses = law.E + law.A / ns**law.alpha + law.B / (flops / (6 * ns)) ** law.beta
    assert losses.min() >= law.loss(n_opt, d_opt) - 1e-12
    assert ns[losses.argmin()] == pytest.approx(n_opt, rel=2e-3)


def test_optimal_tokens_and_params_invert_the_split():
    law = LAWS["besiroglu"]
    n, d = law.optimal_split(3e22)
    assert law.optimal_tokens(n) == pytest.approx(d, rel=1e-9)
    assert law.optimal_params(d) == pytest.approx(n, rel=1e-9)


def test_besiroglu_law_gives_about_twenty_tokens_per_parameter_at_chinchilla_compute():
    # Besiroglu et al. 2024: their refit is consistent with Chinchilla's ~20 tokens per parameter.
    n, d = LAWS["besiroglu"].optimal_split(5.76e23)
    assert 15 < d / n < 25
    assert 5e10 < n < 1e11


def test_budget_fills_in_the_third_quantity():
    law = LAWS["hoffmann"]
    b = resolve_budget(law, flops=None, params=7e9, tokens=1.4e12)
    assert b.flops == pytest.approx(6 * 7e9 * 1.4e12) and b.tokens_per_param == pytest.approx(200)
    assert b.loss == pytest.approx(law.loss(7e9, 1.4e12))
    b = resolve_budget(law, flops=6e21, params=1e9, tokens=None)
    assert b.tokens == pytest.approx(1e12)
    b = resolve_budget(law, flops=6e21, params=None, tokens=1e12)
    assert b.params == pytest.approx(1e9)
    only = resolve_budget(law, flops=None, params=1e9, tokens=None)
    assert only.optimal[0] == pytest.approx(1e9, rel=1e-9) and only.loss == pytest.approx(only.optimal_loss)
    with pytest.raises(UserError, match="at most two"):
        resolve_budget(law, 1.0, 1.0, 1.0)
    with pytest.raises(UserError, match="give --flops"):
        resolve_budget(law, None, None, None)


def test_law_from_json_file_and_bad_files(tmp_path):
    good = tmp_path / "law.json"
    good.write_text(LossLaw(E=2.0, A=300.0, B=900.0, alpha=0.3, beta=0.4, name="mine").to_json())
    assert load_law(str(good)).A == 300.0
    bad = tmp_path / "bad.json"
    bad.write_text('{"E": 2, "A": 1}')
    with pytest.raises(UserError, match=r"bad\.json: missing key\(s\) B, alpha, beta"):
        load_law(str(bad))
    with pytest.raises(UserError, match="neither a known law"):
        load_law(str(tmp_path / "missing.json"))


def test_ptk_plan_prints_budget_time_and_zero_table(capsys):
    assert (
        main(
            [
                "plan",
                "--params",
                "7.5B",
                "--tokens",
                "150B",
                "--devices",
                "64",
                "--device-memory",
                "80",
                "--peak-flops",
                "989T",
                "--mfu",
                "0.5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "C = 6.75e+21 FLOPs" in out and "tokens/param  20" in out
    # 6.75e21 / (64 * 989e12 * 0.5) s = 59.2 h
    assert "2.47 days on 64 device(s)" in out
    rows = {
        line.split()[0]: line.split()
        for line in out.splitlines()
        if line.startswith("  ") and line.split()[0] in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP")
    }
    assert [rows[k][4] for k in ("DDP", "ZeRO-1", "ZeRO-2", "ZeRO-3/FSDP")] == ["120", "31.4", "16.6", "1.88"]
    assert rows["DDP"][-1] == "no" and rows["ZeRO-1"][-2:] == ["(model", "states)"]


def test_ptk_plan_with_a_training_config_counts_activations(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "run_dir": "run",
                "data": {"mixture": "mix.yaml", "seq_len": 1024},
                "max_steps": 1000,
                "model": {"d_model": 512, "n_layers": 8, "n_heads": 8, "n_kv_heads": 4},
                "batch": {"global_size": 64, "micro_size": 8},
                "parallel": "fsdp",
                "precision": "bf16",
                "activation_checkpointing": True,
            }
        )
    )
    assert (
        main(
            [
                "plan",
                "--config",
                str(config),
                "--vocab-size",
                "32000",
                "--flops",
                "1e19",
                "--devices",
                "8",
                "--device-memory",
                "5",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "micro-batch 8 x 1024 tokens, bf16" in out and "4+4+8 bytes/param (fp32)" in out
    assert "ZeRO-3/FSDP" in out and "<- config (checkpointing on)" in out
    assert "with checkpointing" in out  # 5 GB holds the checkpointed run but not the plain one


def test_ptk_plan_reads_the_vocabulary_from_the_mixture(tmp_path, capsys):
    text = need_data(DATA / "tinyshakespeare" / "input.txt")
    speeches = [s for s in text.read_text(encoding="utf-8")[:20_000].split("\n\n") if s.strip()]
    write_shards(
        [np.frombuffer(s.encode("utf-8"), dtype=np.uint8).astype(np.uint16) for s in speeches],
        tmp_path / "bytes",
        vocab_size=257,
        eos_id=256,
    )
    (tmp_path / "mix.yaml").write_text("sources:\n  - {name: plays, shards: bytes, weight: 1}\n")
    (tmp_path / "run.yaml").write_text(
        "run_dir: r\ndata: {mixture: mix.yaml, seq_len: 128}\nmax_steps: 500\n"
        "model: {d_model: 64, n_layers: 2, n_heads: 4}\n"
    )
    assert main(["plan", "--config", str(tmp_path / "run.yaml"), "--tokens", "10M"]) == 0
    n = ModelConfig(vocab_size=257, d_model=64, n_layers=2, n_heads=4, max_seq_len=128).num_params()
    assert f"N = {human(n)} (given" in capsys.readouterr().out
    # Without --tokens or --flops the config's own run length is the token count.
    assert main(["plan", "--config", str(tmp_path / "run.yaml")]) == 0
    out = capsys.readouterr().out
    assert "D = 2.05M (config: max_steps x batch.global_size x data.seq_len)" in out  # 500 x 32 x 128


def test_ptk_plan_errors_are_one_line(tmp_path, capsys):
    assert main(["plan", "--flops", "1e20", "--params", "1B", "--tokens", "1B"]) == 2
    assert "at most two" in capsys.readouterr().err
    config = tmp_path / "run.yaml"
    config.write_text("run_dir: r\ndata: {mixture: nowhere.yaml}\nmax_steps: 500\nmodel: {d_modell: 3}\n")
    assert main(["plan", "--config", str(config), "--vocab-size", "100"]) == 2
    assert "model.d_modell: unknown key" in capsys.readouterr().err
    config.write_text("run_dir: r\ndata: {mixture: nowhere.yaml}\nmax_steps: 500\n")
    assert main(["plan", "--config", str(config)]) == 2
    err = capsys.readouterr().err
    assert "cannot find the vocabulary size" in err and "--vocab-size" in err


def test_ptk_plan_refuses_an_expert_split_that_cannot_be_made_in_one_line(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    model = "model: {d_model: 64, n_layers: 2, n_heads: 4, family: mixtral, n_experts: 8, experts_per_token: 2, "
    config.write_text(
        f"run_dir: r\ndata: {{mixture: m.yaml, seq_len: 64}}\nmax_steps: 500\n{model}norm_topk_prob: true}}\n"
    )
    plan = ["plan", "--config", str(config), "--vocab-size", "100", "--devices", "4"]
    assert main([*plan, "--ep", "4"]) == 0
    for options, message in (
        (["--ep", "3"], "ep 3 does not divide model.n_experts = 8"),
        (["--ep", "8"], "ep 8 does not divide the data-parallel size 4 (--devices / (tp x pp))"),
        (["--ep", "2", "--tp", "2"], "ep 2 with tp 2: a mixture of experts is not split by tensor parallelism"),
    ):
        assert main([*plan, *options]) == 2
        assert capsys.readouterr().err.strip().endswith(message)
    config.write_text("run_dir: r\ndata: {mixture: m.yaml, seq_len: 64}\nmax_steps: 500\nmodel: {d_model: 64}\n")
    assert main([*plan, "--ep", "2"]) == 2
    assert "ep 2: the model has no experts to split (model.n_experts is not set)" in capsys.readouterr().err
    assert main(["plan", "--params", "1B", "--tokens", "20B", "--ep", "2"]) == 2
    assert "--tp, --pp and --ep need --config" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args", [["--flops", "-1e21"], ["--params", "-5"], ["--tokens", "0"], ["--flops", "-1e21", "--params", "1B"]]
)
def test_ptk_plan_refuses_non_positive_budgets_naming_the_option(args, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["plan", *args])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert (
        f"argument {args[0]}: must be a positive number, got '{args[1]}'" in err and "expected one argument" not in err
    )


def _plan_lines(capsys, *args: str) -> tuple[str, str]:
    assert main(["plan", *args]) == 0
    lines = capsys.readouterr().out.splitlines()
    (loss,) = [line for line in lines if line.startswith("loss  ")]
    (optimum,) = [line for line in lines if line.startswith("optimum  ")]
    return loss, optimum


def test_ptk_plan_says_whose_data_the_loss_is_for_and_when_it_extrapolates(capsys):
    loss, optimum = _plan_lines(capsys, "--params", "1B", "--tokens", "20B")
    assert "predicted for the law's own data and tokenizer" in loss and "outside" not in loss
    assert "predicted" in optimum and "extrapolation" not in optimum
    loss, optimum = _plan_lines(capsys, "--params", "30M", "--tokens", "1B")  # within 10x of N 70M, D 5B
    assert "predicted for the law's own data and tokenizer" in loss
    assert "N = 30M and D = 1B lie outside the range the law was fitted on" in loss and "extrapolation" in loss
    assert "(an extrapolation)" in optimum


def test_ptk_plan_prints_no_loss_far_outside_the_laws_range(capsys):
    loss, optimum = _plan_lines(capsys, "--params", "1", "--tokens", "1")
    assert loss.split(None, 1)[1].startswith("not predicted: N = 1 and D = 1 lie outside the range")
    assert "2569" not in loss and "by 5e+09x" in loss
    assert optimum.endswith("loss not predicted (outside the law's range by 5.98e+08x)")
    loss, _ = _plan_lines(capsys, "--params", "1B", "--tokens", "1T")  # D 2x above 500B: still read
    assert "an extrapolation" in loss and "not predicted" not in loss


def test_ptk_plan_splits_memory_over_tp_and_pp(tmp_path, capsys):
    config = tmp_path / "run.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "run_dir": "run",
                "data": {"mixture": "mix.yaml", "seq_len": 1024},
                "max_steps": 1000,
                "model": {"d_model": 512, "n_layers": 8, "n_heads": 8, "n_kv_heads": 4, "tie_embeddings": False},
                "batch": {"global_size": 64, "micro_size": 8},
                "parallel": {"data": "fsdp", "tp": 2, "pp": 2},
            }
        )
    )
    args = ["plan", "--config", str(config), "--vocab-size", "32000", "--flops", "1e19", "--devices", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "on 8 device(s) = dp 2 x tp 2 x pp 2 (1f1b, 4 micro-batches; the largest stage)" in out

    def fsdp_total(text: str) -> float:
        return float(next(line for line in text.splitlines() if "ZeRO-3/FSDP" in line).split()[8])

    split = fsdp_total(out)
    assert main([*args, "--tp", "1", "--pp", "1"]) == 0  # the same 8 devices, all data-parallel
    plain = capsys.readouterr().out
    assert "on 8 device(s), Adam" in plain
    # Activations shrink with tp and pp (states are already sharded 8 ways by FSDP alone).
    assert split < fsdp_total(plain)
    assert main([*args, "--devices", "6"]) == 2
    assert "--devices 6 is not a multiple of tp x pp = 2 x 2" in capsys.readouterr().err
    assert main(["plan", "--params", "1B", "--tokens", "20B", "--tp", "2"]) == 2
    assert "--tp, --pp and --ep need --config" in capsys.readouterr().err


@pytest.mark.parametrize(
    "args, named",
    [
        (["--params", "1e300"], "--params 1e+300"),
        (["--tokens", "1e300"], "--tokens 1e+300"),
        (["--flops", "1e300"], "--flops 1e+300"),
        (["--params", "1e-300"], "--params 1e-300"),
        (["--flops", "1e30", "--params", "1"], "--flops 1e+30 and --params 1 give D = 1.67e+29 tokens"),
    ],
)
def test_ptk_plan_refuses_absurd_quantities_in_one_line(args, named, capsys):
    assert main(["plan", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"ptk: error: {named}") and "ptk plan sizes" in err
