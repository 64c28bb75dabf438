"""Hugging Face import: tiny random Llama (llama3 rope scaling, GQA), Mistral (explicit head_dim) and
Qwen2 (q/k/v biases, tied embeddings) models built locally with transformers give the same logits
through the project's model, as do the other families (tests/train/conftest.py HF_FAMILIES, the
mixtures of experts among them, whose routing quirks are checked here); sharded and half-precision
files load; unsupported inputs fail in one line."""

from __future__ import annotations

import json
import re

import pytest
import torch

from pretrainkit.errors import UserError
from pretrainkit.train.model.materialize import load_hf_model


def test_each_family_gives_transformers_logits(hf_model, family: str) -> None:
    directory, reference = hf_model(family)
    model, cfg = load_hf_model(directory)
    assert cfg.family == family
    tokens = torch.randint(0, cfg.vocab_size, (2, 48), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ours, theirs = model(tokens), reference(tokens).logits
    assert theirs.abs().max() > 1.0  # random weights strong enough that a wrong permutation would show
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_and_sharded_weights_load(hf_model, dtype: torch.dtype) -> None:
    from transformers import AutoModelForCausalLM

    directory, _ = hf_model("llama", dtype=dtype, max_shard_size="20KB")
    # Loaded afresh in fp32 (the saved model's own RoPE buffers were rounded to half precision).
    reference = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32).eval()
    assert (directory / "model.safetensors.index.json").is_file()
    assert len(list(directory.glob("model-*.safetensors"))) > 2
    model, cfg = load_hf_model(directory)
    tokens = torch.randint(0, cfg.vocab_size, (1, 32), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        ours, theirs = model(tokens), reference(tokens).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item())


def test_unsupported_model_type_is_one_line(hf_model) -> None:
    directory, _ = hf_model("llama")
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, "model_type": "gpt2"}))
    with pytest.raises(
        UserError,
        match=r"config.json: model_type 'gpt2' is not supported "
        r"\(supported: llama, mistral, qwen2, qwen3, olmo2, gemma2, gemma3_text, qwen3_moe, olmoe, mixtral\)",
    ):
        load_hf_model(directory)


@pytest.mark.parametrize(
    "family, tensor",
    [("qwen2", "model.layers.1.self_attn.k_proj.bias"), ("olmoe", "model.layers.1.mlp.experts.7.up_proj.weight")],
)
def test_missing_tensor_names_the_directory_and_tensor(hf_model, family: str, tensor: str) -> None:
    from safetensors.torch import load_file, save_file

    directory, _ = hf_model(family)
    tensors = load_file(directory / "model.safetensors")
    del tensors[tensor]
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(UserError, match=f"missing {re.escape(tensor)}"):
        load_hf_model(directory)


def test_any_region_of_a_permuted_tensor_reads_like_the_full_one(hf_model) -> None:
    """What an FSDP or tensor-parallel shard reads: rows cut inside a head, columns cut anywhere."""
    from pretrainkit.train.model.hf_adapter import HFWeights

    directory, _ = hf_model("mistral")  # head_dim 24
    model, cfg = load_hf_model(directory)
    weights = HFWeights(directory)
    for name in ("layers.1.attention.wq.weight", "layers.0.attention.wk.weight", "layers.0.feed_forward.w2.weight"):
        full = model.get_parameter(name).detach()
        for rows, cols in ((slice(5, 37), slice(0, 64)), (slice(0, 1), slice(3, 9)), (slice(30, 48), slice(60, 64))):
            torch.testing.assert_close(weights.read_native(name, cfg, (rows, cols)), full[rows, cols], rtol=0, atol=0)


@pytest.mark.parametrize("window", [None, 1, 5, 16])
def test_attention_mask_is_transformers_sliding_window_mask(window: int | None) -> None:
    """Prefill (queries 0..23) and a cached step (queries 20..23 after 20 cached keys)."""
    from transformers.masking_utils import causal_mask_function, sliding_window_causal_mask_function

    from pretrainkit.train.model.llama import causal_mask

    theirs = causal_mask_function if window is None else sliding_window_causal_mask_function(window)
    for queries in (torch.arange(24), torch.arange(20, 24)):
        keys = torch.arange(24)
        expected = torch.tensor([[bool(theirs(0, 0, q, k)) for k in keys] for q in queries])
        assert torch.equal(causal_mask(queries, keys, window), expected)


def test_gemma3_window_and_local_rope_base_are_what_transformers_uses(hf_model) -> None:
    """With the window widened to the whole context the first 16 positions (the window) keep
    transformers' logits and the later ones lose them; with the global RoPE base in the sliding
    layers every position loses them."""
    from dataclasses import replace

    from pretrainkit.train.model.llama import Transformer

    directory, reference = hf_model("gemma3")
    model, cfg = load_hf_model(directory)
    tokens = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        theirs = reference(tokens).logits
        for changed, same_until in (
            (replace(cfg, sliding_window=cfg.max_seq_len), 16),
            (replace(cfg, rope_local_theta=None), 1),
        ):
            other = Transformer(changed)
            other.load_state_dict(model.state_dict())
            ours = other(tokens)
            torch.testing.assert_close(ours[:, :same_until], theirs[:, :same_until], rtol=1e-4, atol=1e-3)
            assert (ours[:, same_until:] - theirs[:, same_until:]).abs().amax(-1).min() > 1e-3


def test_gemma2_attention_soft_cap_is_what_transformers_uses(hf_model) -> None:
    """Without the cap on the attention scores (5 here) the logits are not transformers' any more."""
    from dataclasses import replace

    from pretrainkit.train.model.llama import Transformer

    directory, reference = hf_model("gemma2")
    model, cfg = load_hf_model(directory)
    assert (cfg.attn_softcap, cfg.final_softcap, cfg.layer_types) == (
        5.0,
        30.0,
        ("sliding_attention", "full_attention"),
    )
    uncapped = Transformer(replace(cfg, attn_softcap=None))
    uncapped.load_state_dict(model.state_dict())
    tokens = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (uncapped(tokens) - reference(tokens).logits)[:, 1:].abs().amax(-1).min() > 1e-3


@pytest.mark.parametrize(
    "family, name",
    [
        ("olmo2", "layers.1.attention.q_norm.weight"),
        ("olmo2", "layers.0.attention.k_norm.weight"),
        ("qwen3", "layers.1.attention.k_norm.weight"),
    ],
)
def test_any_region_of_a_permuted_qk_norm_reads_like_the_full_one(hf_model, family: str, name: str) -> None:
    """The q/k norm weights are permuted like the q/k rows: per head (Qwen3, 24 entries) or every head
    of the projection (OLMo 2): an FSDP shard cut anywhere reads its part."""
    from pretrainkit.train.model.hf_adapter import HFWeights

    directory, _ = hf_model(family)
    model, cfg = load_hf_model(directory)
    full = model.get_parameter(name).detach()
    for rows in (slice(0, len(full)), slice(3, 17), slice(len(full) - 5, len(full))):
        torch.testing.assert_close(HFWeights(directory).read_native(name, cfg, (rows,)), full[rows], rtol=0, atol=0)


@pytest.mark.parametrize(
    "family, key, value, message",
    [
        ("gemma3", "attn_logit_softcapping", 50.0, "attn_logit_softcapping: 50.0 is not supported"),
        ("gemma3", "use_bidirectional_attention", True, "use_bidirectional_attention: True is not supported"),
        ("gemma3", "hidden_activation", "silu", "hidden_activation: 'silu' is not supported"),
        ("gemma3", "model_type", "gemma3", "model_type 'gemma3' is not supported"),  # the multimodal model
        ("gemma3", "sliding_window", None, "sliding_attention layers need sliding_window >= 1, got None"),
        ("gemma2", "use_bidirectional_attention", True, "use_bidirectional_attention: True is not supported"),
        ("qwen3", "use_sliding_window", True, "use_sliding_window: True is not supported"),
        ("olmo2", "hidden_act", "gelu", "hidden_act: 'gelu' is not supported"),
        ("olmoe", "clip_qkv", 8.0, "clip_qkv: 8.0 is not supported (no q/k/v clipping)"),
        ("mixtral", "router_jitter_noise", 0.1, "router_jitter_noise: 0.1 is not supported (no router jitter)"),
        ("qwen3_moe", "num_experts_per_tok", 9, "experts_per_token must be in [1, n_experts = 8], got 9"),
        ("qwen3_moe", "mlp_only_layers", [3], "mlp_only_layers must be layers 0..2, got [3]"),
    ],
)
def test_what_a_family_cannot_be_is_one_line_naming_config_json_and_the_key(hf_model, family, key, value, message):
    directory, _ = hf_model(family)
    config = json.loads((directory / "config.json").read_text())
    (directory / "config.json").write_text(json.dumps({**config, key: value}))
    with pytest.raises(UserError, match=f"config.json: {re.escape(message)}"):
        load_hf_model(directory)


@pytest.mark.parametrize("family", ["qwen3_moe", "olmoe"])
def test_moe_routing_is_what_transformers_uses(hf_model, family: str) -> None:
    """The sparse layers are transformers' (Qwen3-MoE: layer 0 dense by mlp_only_layers), and with the
    other top-k rule (renormalized or not) the logits are not transformers' any more."""
    from dataclasses import replace

    from pretrainkit.train.model.llama import Transformer
    from pretrainkit.train.model.moe import MoEFeedForward

    directory, reference = hf_model(family)
    model, cfg = load_hf_model(directory)
    sparse = [type(layer.mlp).__name__.endswith("SparseMoeBlock") for layer in reference.model.layers]
    assert [isinstance(b.feed_forward, MoEFeedForward) for b in model.layers] == sparse
    assert sparse == ([False, True, True] if family == "qwen3_moe" else [True, True])
    assert cfg.norm_topk_prob == (family == "qwen3_moe")
    other = Transformer(replace(cfg, norm_topk_prob=not cfg.norm_topk_prob))
    other.load_state_dict(model.state_dict())
    tokens = torch.randint(0, cfg.vocab_size, (1, 40), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        assert (other(tokens) - reference(tokens).logits).abs().amax(-1).min() > 1e-3


def test_qwen3_moe_decoder_sparse_step_gives_transformers_logits(hf_model) -> None:
    """Every second layer sparse (decoder_sparse_step 2) and layer 3 dense by mlp_only_layers: layers 1 only."""
    directory, reference = hf_model("qwen3_moe", num_hidden_layers=4, decoder_sparse_step=2, mlp_only_layers=[3])
    model, cfg = load_hf_model(directory)
    assert [cfg.sparse_layer(i) for i in range(4)] == [False, True, False, False]
    tokens = torch.randint(0, cfg.vocab_size, (2, 24), generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ours, theirs = model(tokens), reference(tokens).logits
    torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item())


def test_any_region_of_stacked_experts_reads_like_the_full_one(hf_model) -> None:
    """An FSDP shard of a stacked expert weight (some experts, some of their rows) reads its part from
    the per-expert tensors."""
    from pretrainkit.train.model.hf_adapter import HFWeights

    directory, _ = hf_model("mixtral")
    model, cfg = load_hf_model(directory)
    weights = HFWeights(directory)
    for name in ("layers.0.feed_forward.experts.w1", "layers.1.feed_forward.experts.w2"):
        full = model.get_parameter(name).detach()
        for region in ((slice(1, 3), slice(5, 40), slice(None)), (slice(3, 4), slice(0, 64), slice(7, 9))):
            torch.testing.assert_close(weights.read_native(name, cfg, region), full[region], rtol=0, atol=0)
