"""Memory per device: the ZeRO paper's own example, and the planner's activation memory against what the
real model saves for backward plus the loss backward's gradients."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from pretrainkit.train.model.llama import ModelConfig, Transformer
from pretrainkit.train.planning.memory import (
    STRATEGIES,
    ActivationShape,
    ModelStates,
    Split,
    activation_bytes,
    memory_table,
    model_states,
)


def test_zero_paper_example_7_5b_parameters_on_64_devices():
    # Rajbhandari et al. 2020, figure 1: Psi = 7.5B, K = 12, N_d = 64.
    expected_gb = {"ddp": 120, "zero1": 31.4, "zero2": 16.6, "zero3": 1.88}
    for strategy, gb in expected_gb.items():
        assert model_states(7.5e9, 64, strategy).total / 1e9 == pytest.approx(gb, abs=0.05), strategy
    s = model_states(7.5e9, 64, "zero2")
    assert (s.params, s.grads, s.optimizer) == (15e9, pytest.approx(15e9 / 64), pytest.approx(90e9 / 64))


def test_one_device_has_nothing_to_shard_and_fp32_adam_is_16_bytes():
    totals = {s: model_states(1e6, 1, s, "fp32").total for s in ("ddp", "zero1", "zero2", "zero3")}
    assert set(totals.values()) == {16e6}


def _activation_peak_bytes(model: torch.nn.Module, tokens: torch.Tensor, bf16: bool) -> int:
    """Activation bytes at a step's peak, the start of the loss backward: the distinct storages autograd
    saved during forward (parameters and buffers excluded), and the two fp32 gradients the loss backward
    then holds at once (of the log-softmax output and of the logits)."""
    owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    saved: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage.data_ptr() not in owned:
            saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(tokens[:, :-1])
        scores = logits.float().flatten(0, 1)
        log_probs = F.log_softmax(scores, dim=-1)  # what F.cross_entropy runs, split to reach both gradients
        loss = F.nll_loss(log_probs, tokens[:, 1:].flatten(), reduction="sum")
    gradients: list[int] = []
    for t in (scores, log_probs):
        t.register_hook(lambda g: gradients.append(g.untyped_storage().nbytes()))
    loss.backward()
    assert len(gradients) == 2
    return sum(saved.values()) + sum(gradients)


TINY = dict(vocab_size=300, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2)
MOE_QWEN = dict(vocab_size=300, d_model=48, n_heads=4, n_kv_heads=2, n_experts=8, moe_ffn_dim=32, norm_topk_prob=True)
GEMMA_WINDOW = dict(sliding_window=8, layer_types=("sliding_attention", "full_attention"), final_softcap=30.0)


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
@pytest.mark.parametrize(
    "dims",
    [
        dict(vocab_size=300, d_model=48, n_layers=2, n_heads=4, n_kv_heads=2, ffn_hidden=160),
        dict(vocab_size=1000, d_model=96, n_layers=3, n_heads=6, n_kv_heads=6),
        # The other families' norms, GeGLU, a sliding window, the soft caps.
        dict(**TINY, family="qwen3"),
        dict(**TINY, family="olmo2"),
        dict(**TINY, **GEMMA_WINDOW, family="gemma3"),
        dict(**TINY, **GEMMA_WINDOW, family="gemma2", attn_softcap=50.0),
        # Mixtures of experts: the routing's tensors and k experts' SwiGLU per token; Qwen3-MoE with a dense layer.
        dict(**TINY, family="mixtral", n_experts=8, experts_per_token=2, moe_ffn_dim=64, norm_topk_prob=True),
        dict(**MOE_QWEN, n_layers=3, family="qwen3_moe", experts_per_token=4, mlp_only_layers=[0], ffn_hidden=96),
        dict(**TINY, family="olmoe", n_experts=16, experts_per_token=2, moe_ffn_dim=40),
    ],
)
def test_the_planners_activation_memory_matches_the_real_models_peak(dtype, dims):
    cfg = ModelConfig(max_seq_len=64, **dims)
    torch.manual_seed(0)
    model = Transformer(cfg)
    micro_batch, seq_len = 3, 50
    tokens = torch.randint(0, cfg.vocab_size, (micro_batch, seq_len + 1))
    measured = _activation_peak_bytes(model, tokens, bf16=dtype == "bf16")
    shape = ActivationShape.from_model_config(cfg)
    predicted = activation_bytes(shape, micro_batch, seq_len, dtype, checkpointing=False)
    assert predicted == pytest.approx(measured, rel=0.01)
    (row,) = [
        r for r in memory_table(cfg.num_params(), 1, "mixed", shape, micro_batch, seq_len, dtype) if r.strategy == "ddp"
    ]
    assert row.activations == predicted


def test_checkpointing_and_sharding_shrink_the_table():
    cfg = ModelConfig(vocab_size=32000, d_model=2048, n_layers=24, n_heads=16, n_kv_heads=8)
    shape = ActivationShape.from_model_config(cfg)
    full = activation_bytes(shape, 4, 2048, "bf16", checkpointing=False)
    ckpt = activation_bytes(shape, 4, 2048, "bf16", checkpointing=True)
    assert ckpt < full / 3
    rows = memory_table(cfg.num_params(), 8, "mixed", shape, 4, 2048, "bf16")
    totals = [r.total for r in rows]
    assert totals == sorted(totals, reverse=True) and len(set(totals)) == 4
    assert all(r.activations == full and r.total_checkpointed < r.total for r in rows)
    assert memory_table(1e9, 8, "mixed", None, 4, 2048, "bf16")[0].total is None


def test_expert_parallelism_splits_the_experts_only_where_a_state_is_not_sharded():
    # 10 parameters of which 8 are experts, on 4 devices with ep 2, fp32 Adam (4 + 4 + 8 bytes): a device holds
    # the 2 dense parameters and 4 of the experts' whole, or a quarter of everything once ZeRO shards a state.
    states = {s: model_states(10, 4, s, "fp32", expert_params=8, ep=2) for s in STRATEGIES}
    assert states == {
        "ddp": ModelStates(params=6 * 4, grads=6 * 4, optimizer=6 * 8),
        "zero1": ModelStates(params=6 * 4, grads=6 * 4, optimizer=2.5 * 8),
        "zero2": ModelStates(params=6 * 4, grads=2.5 * 4, optimizer=2.5 * 8),
        "zero3": ModelStates(params=2.5 * 4, grads=2.5 * 4, optimizer=2.5 * 8),
    }
    assert model_states(10, 4, "zero3", "fp32") == states["zero3"]  # FSDP already shards the experts 4 ways
    with pytest.raises(ValueError, match="a multiple of ep = 3"):
        model_states(10, 4, "ddp", expert_params=8, ep=3)


def test_the_planners_experts_are_the_models_expert_weights_and_ep_divides_them():
    cfg = ModelConfig(
        max_seq_len=64, **MOE_QWEN, n_layers=4, family="qwen3_moe", experts_per_token=2, mlp_only_layers=[1]
    )
    model = Transformer(cfg)
    experts = sum(p.numel() for name, p in model.named_parameters() if ".experts." in name)
    shape = ActivationShape.from_model_config(cfg)
    assert (shape.experts.params, shape.experts.sparse_layers) == (experts, 3)
    ddp = {ep: memory_table(cfg.num_params(), 4, "fp32", shape, 2, 32, "bf16", Split(ep=ep))[0] for ep in (1, 2, 4)}
    for ep, row in ddp.items():
        assert row.states.params == (cfg.num_params() - experts + experts / ep) * 4
    # A device casts only its own experts to bf16 under autocast.
    assert ddp[1].activations - ddp[4].activations == 2 * experts * 3 / 4
