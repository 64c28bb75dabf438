"""Parameter counts of the Qwen3, OLMo 2, Gemma 2 and Gemma 3 families: `ModelConfig.num_params` (what `ptk plan`
and the memory model use) equals transformers' `num_parameters()`, for the tests' tiny random models and
for published configs (their config.json values written here; the models built on the meta device)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml

from pretrainkit.cli import main
from pretrainkit.train.model.hf_adapter import model_config_from_hf
from pretrainkit.train.planning.cli import human

# config.json of Qwen/Qwen3-0.6B, google/gemma-3-1b-pt, google/gemma-2-2b and allenai/OLMo-2-0425-1B
# (the keys that shape them).
PUBLISHED = {
    "Qwen3-0.6B": dict(
        model_type="qwen3",
        vocab_size=151936,
        hidden_size=1024,
        intermediate_size=3072,
        num_hidden_layers=28,
        num_attention_heads=16,
        num_key_value_heads=8,
        head_dim=128,
        max_position_embeddings=40960,
        rms_norm_eps=1e-6,
        rope_theta=1000000,
        tie_word_embeddings=True,
        attention_bias=False,
        use_sliding_window=False,
        sliding_window=None,
        max_window_layers=28,
        hidden_act="silu",
    ),
    "gemma-3-1b-pt": dict(
        model_type="gemma3_text",
        vocab_size=262144,
        hidden_size=1152,
        intermediate_size=6912,
        num_hidden_layers=26,
        num_attention_heads=4,
        num_key_value_heads=1,
        head_dim=256,
        max_position_embeddings=32768,
        query_pre_attn_scalar=256,
        sliding_window=512,
        sliding_window_pattern=6,
        rope_theta=1000000,
        rope_local_base_freq=10000,
        rope_scaling=None,
        rms_norm_eps=1e-6,
        final_logit_softcapping=None,
        attn_logit_softcapping=None,
        hidden_activation="gelu_pytorch_tanh",
    ),
    "gemma-2-2b": dict(
        model_type="gemma2",
        vocab_size=256000,
        hidden_size=2304,
        intermediate_size=9216,
        num_hidden_layers=26,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=256,
        max_position_embeddings=8192,
        query_pre_attn_scalar=256,
        sliding_window=4096,
        final_logit_softcapping=30.0,
        attn_logit_softcapping=50.0,
        rope_theta=10000.0,
        rms_norm_eps=1e-6,
        hidden_activation="gelu_pytorch_tanh",
    ),
    "OLMo-2-0425-1B": dict(
        model_type="olmo2",
        vocab_size=100352,
        hidden_size=2048,
        intermediate_size=8192,
        num_hidden_layers=16,
        num_attention_heads=16,
        num_key_value_heads=16,
        max_position_embeddings=4096,
        rope_theta=500000,
        rms_norm_eps=1e-6,
        tie_word_embeddings=False,
        attention_bias=False,
        hidden_act="silu",
    ),
}


def transformers_count(config: dict) -> int:
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.for_model(**config)).num_parameters()


@pytest.mark.parametrize("name", ["gemma-3-1b-pt", "gemma-2-2b"])
def test_published_gemma_configs_read_as_transformers_reads_them(name: str) -> None:
    """Their 4.x keys (sliding_window_pattern, rope_local_base_freq, no layer_types) give transformers'
    layer types, window, RoPE bases, query scale and soft caps."""
    from transformers import AutoConfig

    cfg, theirs = model_config_from_hf(PUBLISHED[name], name), AutoConfig.for_model(**PUBLISHED[name])
    assert list(cfg.layer_types) == theirs.layer_types and "full_attention" in cfg.layer_types
    assert (cfg.sliding_window, cfg.query_scale) == (theirs.sliding_window, theirs.query_pre_attn_scalar)
    assert (cfg.final_softcap, cfg.attn_softcap) == (theirs.final_logit_softcapping, theirs.attn_logit_softcapping)
    rope = theirs.rope_parameters
    if name.startswith("gemma-3"):
        assert cfg.rope_theta == rope["full_attention"]["rope_theta"]
        assert cfg.rope_local_theta == rope["sliding_attention"]["rope_theta"]
    else:
        assert cfg.rope_theta == rope["rope_theta"] and cfg.rope_local_theta is None
    assert cfg.tie_embeddings and theirs.tie_word_embeddings


@pytest.mark.parametrize("family", ["qwen3", "olmo2", "gemma2", "gemma3", "qwen3_moe", "olmoe", "mixtral"])
def test_tiny_models_count_as_transformers(hf_model, family: str) -> None:
    directory, model = hf_model(family)
    cfg = model_config_from_hf(json.loads((directory / "config.json").read_text()), "config.json")
    assert cfg.num_params() == model.num_parameters()


def plan_published(config: dict, name: str, tmp_path: Path, capsys, *options: str) -> str:
    """`ptk plan` of tmp_path/run.yaml, a run that continues pretraining the published model (its config.json
    in tmp_path/name), 4096 tokens a sequence under FSDP and bf16."""
    model_dir = tmp_path / name
    model_dir.mkdir()
    (model_dir / "config.json").write_text(json.dumps(config))
    run = tmp_path / "run.yaml"
    run.write_text(
        yaml.safe_dump(
            {
                "run_dir": "run",
                "data": {"mixture": "mix.yaml", "seq_len": 4096},
                "init_from": str(model_dir),
                "max_steps": 100,
                "batch": {"global_size": 64, "micro_size": 1},
                "parallel": "fsdp",
                "precision": "bf16",
            }
        )
    )
    assert main(["plan", "--config", str(run), "--vocab-size", str(config["vocab_size"]), *options]) == 0
    return capsys.readouterr().out


@pytest.mark.parametrize("name", PUBLISHED)
def test_published_configs_count_as_transformers_and_ptk_plan_says_so(name: str, tmp_path: Path, capsys) -> None:
    config = PUBLISHED[name]
    cfg = model_config_from_hf(config, f"{name}/config.json")
    expected = transformers_count(config)
    assert cfg.num_params() == expected
    out = plan_published(config, name, tmp_path, capsys, "--devices", "8", "--device-memory", "80")
    assert f"parameters    N = {human(expected)} (given, {tmp_path / 'run.yaml'})" in out
    # DDP holds every parameter in fp32: 4 bytes each.
    (ddp,) = [line.split() for line in out.splitlines() if line.startswith("  DDP ")]
    assert ddp[1] == f"{expected * 4 / 1e9:.3g}"


# config.json of Qwen/Qwen3-30B-A3B and mistralai/Mixtral-8x7B-v0.1 (the keys that shape them).
QWEN3_30B_A3B = dict(
    model_type="qwen3_moe",
    vocab_size=151936,
    hidden_size=2048,
    intermediate_size=6144,
    moe_intermediate_size=768,
    num_hidden_layers=48,
    num_attention_heads=32,
    num_key_value_heads=4,
    head_dim=128,
    num_experts=128,
    num_experts_per_tok=8,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=False,
    hidden_act="silu",
)
MIXTRAL_8X7B = dict(
    model_type="mixtral",
    vocab_size=32000,
    hidden_size=4096,
    intermediate_size=14336,
    num_hidden_layers=32,
    num_attention_heads=32,
    num_key_value_heads=8,
    num_local_experts=8,
    num_experts_per_tok=2,
    max_position_embeddings=32768,
    rope_theta=1000000.0,
    rms_norm_eps=1e-5,
    tie_word_embeddings=False,
    hidden_act="silu",
    sliding_window=None,
)


def test_published_qwen3_moe_counts_total_and_active_parameters_and_ptk_plan_says_so(tmp_path: Path, capsys) -> None:
    """Qwen's figures for Qwen3-30B-A3B: 30.5B in total, 29.9B without the embedding tables, 3.3B activated: each
    the count truncated to its digits (30.53B, 29.91B, 3.353B: per token the router and 8 of the 128
    experts in each of the 48 layers)."""
    cfg = model_config_from_hf(QWEN3_30B_A3B, "Qwen3-30B-A3B/config.json")
    total, active = cfg.num_params(), cfg.num_params(active=True)
    assert total == transformers_count(QWEN3_30B_A3B)
    assert active == total - 48 * (128 - 8) * 3 * 2048 * 768
    assert total == pytest.approx(30.5e9, rel=0.01) and active == pytest.approx(3.35e9, rel=0.001)
    non_embedding = total - 2 * 151936 * 2048  # the input table and the (untied) output head
    assert [int(n / 1e8) / 10 for n in (total, non_embedding, active)] == [30.5, 29.9, 3.3]
    out = plan_published(QWEN3_30B_A3B, "Qwen3-30B-A3B", tmp_path, capsys, "--devices", "16", "--ep", "8")
    assert "N = 3.35B (given, " in out and "the active parameters, of 30.5B in total (11.0%)" in out
    assert f"FLOPs/token   {cfg.flops_per_token(4096):.3g} = 6 x 3.04B active" in out
    assert "loss          not predicted" in out
    # C = 6ND counts the active parameters: 100 steps x 64 x 4096 tokens.
    assert f"C = {6 * active * 100 * 64 * 4096:.3g} FLOPs" in out
    # Memory holds every expert; under DDP each of the 16 devices keeps 1/8 of the experts in fp32.
    experts = 48 * 128 * 3 * 2048 * 768
    (ddp,) = [line.split() for line in out.splitlines() if line.startswith("  DDP ")]
    assert ddp[1] == f"{(total - experts + experts / 8) * 4 / 1e9:.3g}"


def test_published_mixtral_counts_46_7b_total_and_12_9b_active(tmp_path: Path, capsys) -> None:
    """Mistral's figures for Mixtral 8x7B: 46.7B parameters, 12.9B used per token."""
    cfg = model_config_from_hf(MIXTRAL_8X7B, "Mixtral-8x7B/config.json")
    assert cfg.num_params() == transformers_count(MIXTRAL_8X7B)
    assert cfg.num_params() == pytest.approx(46.7e9, rel=0.01)
    assert cfg.num_params(active=True) == pytest.approx(12.9e9, rel=0.01)
    out = plan_published(MIXTRAL_8X7B, "Mixtral-8x7B", tmp_path, capsys)
    assert "N = 12.9B (given, " in out and "of 46.7B in total (27.6%): 2 of 8 experts per token in 32 of 32" in out
