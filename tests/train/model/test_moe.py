"""The mixture-of-experts feed-forward (train/model/moe.py): the grouped experts equal each token run
through its experts one by one, parameter counts (total and active), initialization on the meta device,
and the settings' one-line errors. Logits against transformers: test_hf_import.py."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest
import torch
import torch.nn.functional as F

from pretrainkit.errors import UserError
from pretrainkit.train.config import ParallelConfig
from pretrainkit.train.model.llama import ModelConfig, Transformer
from pretrainkit.train.model.materialize import init_weights, to_device
from pretrainkit.train.model.moe import MoEFeedForward
from pretrainkit.train.parallel.mesh import check_model_split


def moe(**kw) -> ModelConfig:
    base = dict(
        vocab_size=97,
        d_model=32,
        n_layers=3,
        n_heads=4,
        max_seq_len=32,
        family="qwen3_moe",
        n_experts=6,
        experts_per_token=2,
        moe_ffn_dim=24,
        ffn_hidden=40,
        mlp_only_layers=(0,),
    )
    return ModelConfig(**{**base, **kw})


def one_token_at_a_time(ffn: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
    """The definition: each token's top-k experts' SwiGLU outputs, weighted by its routing weights."""
    flat = x.reshape(-1, x.shape[-1])
    _, weights, experts = ffn.route(flat)
    w1, w2, w3 = ffn.experts.w1, ffn.experts.w2, ffn.experts.w3
    rows = []
    for t in range(len(flat)):
        y = sum(
            weights[t, j] * (F.silu(w1[e] @ flat[t]) * (w3[e] @ flat[t])) @ w2[e].T for j, e in enumerate(experts[t])
        )
        rows.append(y)
    return torch.stack(rows).view_as(x)


@pytest.mark.parametrize("norm_topk_prob", [True, False])
def test_grouped_experts_equal_each_token_through_its_experts(norm_topk_prob: bool) -> None:
    model = Transformer(moe(norm_topk_prob=norm_topk_prob, init_std=0.2), seed=1)
    ffn = model.layers[1].feed_forward
    assert isinstance(ffn, MoEFeedForward) and not isinstance(model.layers[0].feed_forward, MoEFeedForward)
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(0))
    _, weights, experts = ffn.route(x.reshape(-1, 32))
    assert len(experts.unique()) == 6  # every expert gets tokens here, so every group is exercised
    assert torch.allclose(weights.sum(-1), torch.ones(18)) == norm_topk_prob
    torch.testing.assert_close(ffn(x), one_token_at_a_time(ffn, x), rtol=1e-5, atol=1e-6)
    # Gradients reach the router and every expert that got tokens.
    ffn(x).square().sum().backward()
    assert ffn.router.weight.grad.abs().sum() > 0
    assert (ffn.experts.w1.grad.flatten(1).abs().sum(-1) > 0).all()


def test_num_params_counts_every_parameter_and_active_ones_per_token() -> None:
    cfg = moe()
    model = Transformer(cfg)
    assert cfg.num_params() == sum(p.numel() for p in model.parameters())
    d, experts = 32, 3 * 32 * 24  # one expert's w1, w2, w3
    assert cfg.num_params() - cfg.num_params(active=True) == 2 * (6 - 2) * experts  # two sparse layers
    assert cfg.flops_per_token(16) == 6 * cfg.num_params(embeddings=False, active=True) + 12 * 3 * 4 * 8 * 16
    assert cfg.block_params(0) == ModelConfig(vocab_size=97, d_model=d, n_heads=4, ffn_hidden=40).block_params() + (
        cfg.block_norm_params() - 2 * d
    )  # layer 0 dense: Llama's block with Qwen3's q/k norms


def test_meta_initialization_equals_eager_construction() -> None:
    """Stacked expert weights are initialized like any tensor, by (seed, name): on the meta device and
    filled (materialize.py) they equal a model built directly; w2 is an output projection (smaller std)."""
    cfg = moe(n_experts=8, d_model=64, moe_ffn_dim=300)
    eager = Transformer(cfg, seed=3)
    with torch.device("meta"):
        lazy = Transformer(cfg, seed=3)
    to_device(lazy, torch.device("cpu"))
    init_weights(lazy, cfg, seed=3)
    for (name, a), (_, b) in zip(eager.named_parameters(), lazy.named_parameters()):
        assert torch.equal(a, b), name
    w1, w2 = eager.layers[1].feed_forward.experts.w1, eager.layers[1].feed_forward.experts.w2
    assert w2.std() < w1.std() / 2 and not torch.equal(w1[0], w1[1])


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(family="llama", mlp_only_layers=()), "n_experts: 6 does not fit family llama"),
        (dict(n_experts=None), "n_experts: None does not fit family qwen3_moe"),
        (dict(experts_per_token=7), "experts_per_token must be in [1, n_experts = 6], got 7"),
        (dict(experts_per_token=None), "experts_per_token must be in [1, n_experts = 6], got None"),
        (dict(n_experts=0, experts_per_token=0), "n_experts must be >= 1, got 0"),
        (dict(moe_ffn_dim=0), "moe_ffn_dim must be >= 1, got 0"),
        (dict(router_aux_loss_coef=-0.01), "router_aux_loss_coef must be >= 0, got -0.01"),
        (dict(decoder_sparse_step=0), "decoder_sparse_step must be >= 1, got 0"),
        (dict(mlp_only_layers=(3,)), "mlp_only_layers must be layers 0..2, got [3]"),
        (dict(family="olmoe"), "mlp_only_layers and decoder_sparse_step: only with family qwen3_moe, got olmoe"),
        (dict(family="mixtral", mlp_only_layers=()), "family mixtral always renormalizes"),
        (dict(family="olmoe", mlp_only_layers=(), head_dim=16), "head_dim: family olmoe needs d_model / n_heads = 8"),
    ],
)
def test_bad_moe_settings_are_one_line(changes: dict, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)) as e:
        moe(**changes)
    assert "\n" not in str(e.value)


def test_tensor_parallel_refuses_a_mixture_of_experts_in_one_line() -> None:
    with pytest.raises(UserError, match=r"run.yaml: parallel.tp: 2 does not split a mixture of experts"):
        check_model_split(ParallelConfig(tp=2), moe(), "run.yaml")
    check_model_split(ParallelConfig(tp=2), moe(family="qwen3", n_experts=None, mlp_only_layers=()), "run.yaml")


def test_pipeline_parallel_refuses_a_mixture_of_experts_in_one_line() -> None:
    """The load-balancing loss pools the routing of every sparse layer (train/model/router_loss.py), which
    pipeline stages would each hold a part of."""
    with pytest.raises(UserError, match=r"run.yaml: parallel.pp: 3 cannot compute the routers' load-balancing") as e:
        check_model_split(ParallelConfig(pp=3), moe(), "run.yaml")
    assert "\n" not in str(e.value)
    dense = moe(family="qwen3", n_experts=None, mlp_only_layers=(), tie_embeddings=False)
    check_model_split(ParallelConfig(pp=3), dense, "run.yaml")


def test_moe_settings_survive_the_json_of_checkpoints_and_native_exports() -> None:
    """Checkpoint meta and a native export store the ModelConfig as JSON (mlp_only_layers becomes a list)."""
    cfg = moe(mlp_only_layers=(0, 2), norm_topk_prob=True, router_aux_loss_coef=0.01)
    again = ModelConfig(**json.loads(json.dumps(dataclasses.asdict(cfg))))
    assert again == cfg and [again.sparse_layer(i) for i in range(3)] == [False, True, False]
