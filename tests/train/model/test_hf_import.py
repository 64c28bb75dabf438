"""Hugging Face import: tiny random Llama (llama3 rope scaling, GQA), Mistral (explicit head_dim) and
Qwen2 (q/k/v biases, tied embeddings) models built locally with transformers give the same logits
through the project's model; sharded and half-precision files load; unsupported inputs fail in one line."""

from __future__ import annotations

import json
from pathlib import Path

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
        r"\(supported: llama, mistral, qwen2, qwen3, olmo2, gemma3_text\)",
    ):
        load_hf_model(directory)


def test_missing_tensor_names_the_directory_and_tensor(hf_model, tmp_path: Path) -> None:
    from safetensors.torch import load_file, save_file

    directory, _ = hf_model("qwen2")
    tensors = load_file(directory / "model.safetensors")
    del tensors["model.layers.1.self_attn.k_proj.bias"]
    save_file(tensors, directory / "model.safetensors")
    with pytest.raises(UserError, match="missing model.layers.1.self_attn.k_proj.bias"):
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
