"""The model: parameter count, causality, rotary embeddings, grouped-query attention, tied weights."""

from __future__ import annotations

import pytest
import torch

from pretrainkit.train.model.llama import ModelConfig, Transformer, apply_rope, rope_frequencies, rope_tables


def tiny(**kw) -> ModelConfig:
    base = dict(vocab_size=97, d_model=64, n_layers=2, n_heads=4, max_seq_len=32)
    base.update(kw)
    return ModelConfig(**base)


@pytest.mark.parametrize("tie", [True, False])
@pytest.mark.parametrize("kv", [None, 2, 1])
def test_num_params_counts_every_parameter(tie: bool, kv: int | None) -> None:
    cfg = tiny(tie_embeddings=tie, n_kv_heads=kv)
    model = Transformer(cfg)
    assert cfg.num_params() == sum(p.numel() for p in model.parameters())
    assert cfg.num_params(embeddings=False) == cfg.num_params() - (0 if tie else cfg.vocab_size * cfg.d_model)


def test_ffn_hidden_follows_llama_rule() -> None:
    assert tiny(d_model=4096, n_heads=32, ffn_multiple_of=256).ffn_hidden_size == 11008
    assert tiny(ffn_hidden=100).ffn_hidden_size == 100


def test_flops_per_token_is_6n_plus_attention() -> None:
    cfg = tiny()
    assert cfg.flops_per_token(16) == 6 * cfg.num_params(embeddings=False) + 12 * 2 * 64 * 16


def test_future_tokens_do_not_change_past_logits() -> None:
    torch.manual_seed(0)
    model = Transformer(tiny(n_kv_heads=2)).eval()
    x = torch.randint(0, 97, (2, 20))
    y = x.clone()
    y[:, 12:] = torch.randint(0, 97, (2, 8))
    with torch.no_grad():
        a, b = model(x), model(y)
    torch.testing.assert_close(a[:, :12], b[:, :12])
    assert not torch.allclose(a[:, 12:], b[:, 12:])


def test_rope_scores_depend_only_on_relative_position() -> None:
    cos, sin = rope_tables(rope_frequencies(8, 10000.0), 0, 32, torch.device("cpu"))
    q, k = torch.randn(8), torch.randn(8)

    def score(i: int, j: int) -> torch.Tensor:
        qi = apply_rope(q.view(1, 1, 1, 8), cos[i : i + 1], sin[i : i + 1])
        kj = apply_rope(k.view(1, 1, 1, 8), cos[j : j + 1], sin[j : j + 1])
        return (qi * kj).sum()

    torch.testing.assert_close(score(5, 2), score(20, 17))
    assert not torch.allclose(score(5, 2), score(5, 4))


def test_gqa_matches_repeated_kv_heads() -> None:
    torch.manual_seed(0)
    gqa = Transformer(tiny(n_kv_heads=2)).eval()
    mha = Transformer(tiny()).eval()
    sd = gqa.state_dict()
    for i in range(2):
        for w in ("wk", "wv"):
            key = f"layers.{i}.attention.{w}.weight"
            sd[key] = sd[key].view(2, 16, 64).repeat_interleave(2, dim=0).reshape(64, 64)
    mha.load_state_dict(sd)
    x = torch.randint(0, 97, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(gqa(x), mha(x))


def test_tied_embeddings_share_storage() -> None:
    model = Transformer(tiny())
    assert model.output.weight is model.tok_embeddings.weight
    untied = Transformer(tiny(tie_embeddings=False))
    assert untied.output.weight is not untied.tok_embeddings.weight
    assert untied.output.weight.data_ptr() != untied.tok_embeddings.weight.data_ptr()
    assert set(untied.state_dict()) == {n for n, _ in untied.named_parameters()}
    assert set(model.state_dict()) == {n for n, _ in model.named_parameters()} | {"output.weight"}


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(d_model=65), r"d_model \(65\) must be divisible by n_heads \(4\)"),
        (dict(n_kv_heads=3), r"n_heads \(4\) must be a multiple of n_kv_heads \(3\)"),
        (dict(n_layers=0), r"n_layers must be >= 1, got 0"),
        (dict(d_model=12, n_heads=4), r"head_dim \(3\) must be even"),
        (
            dict(family="gpt2"),
            r"family must be one of llama, mistral, qwen2, qwen3, olmo2, gemma2, gemma3, qwen3_moe, olmoe, mixtral, "
            r"got 'gpt2'",
        ),
        (
            dict(sliding_window=8),
            r"sliding_window and sliding layer_types: only with family gemma2 or gemma3, got llama",
        ),
        (dict(family="gemma3", layer_types=["full_attention"]), r"layer_types must name one of .* for each of the 2"),
        (
            dict(family="gemma3", layer_types=["sliding_attention", "full_attention"]),
            r"sliding_attention layers need sliding_window >= 1, got None",
        ),
        (dict(family="gemma3", final_softcap=0.0), r"final_softcap must be > 0, got 0.0"),
        (dict(family="gemma3", attn_softcap=50.0), r"attn_softcap: only with family gemma2, got gemma3"),
        (dict(family="gemma2", rope_local_theta=1e4), r"rope_local_theta: only with family gemma3, got gemma2"),
    ],
)
def test_bad_shapes_are_rejected(bad: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        tiny(**bad)


def test_initial_values_do_not_depend_on_how_rows_are_split() -> None:
    from pretrainkit.train.model.llama import INIT_BLOCK_ROWS, initial_value

    cfg = tiny(vocab_size=3 * INIT_BLOCK_ROWS + 17)
    whole = Transformer(cfg, seed=7).tok_embeddings.weight.detach()
    assert torch.equal(initial_value(cfg, "tok_embeddings.weight", whole.shape, 7), whole)
    cuts = [0, 1, 200, INIT_BLOCK_ROWS, 600, whole.shape[0]]
    parts = [initial_value(cfg, "tok_embeddings.weight", whole.shape, 7, slice(a, b)) for a, b in zip(cuts, cuts[1:])]
    assert torch.equal(torch.cat(parts), whole)
    assert not torch.equal(Transformer(cfg, seed=8).tok_embeddings.weight, whole)
