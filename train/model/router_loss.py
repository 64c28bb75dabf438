"""The routers' load-balancing loss and the experts' load, from what the sparse layers routed in a forward.

    with RouterRecord(model) as record:         # each sparse layer keeps its router logits and choices
        logits = model(tokens)
    aux = load_balancing_loss(record.logits(), cfg.n_experts, cfg.experts_per_token)  # 0-d fp32, differentiable
    load = record.expert_load(cfg.n_experts)     # [sparse layers, n_experts]: tokens sent to each expert

`load_balancing_loss` is transformers' `load_balancing_loss_func` (the same function in
modeling_qwen3_moe, modeling_olmoe and modeling_mixtral, transformers 5): Switch Transformer's
auxiliary loss over every sparse layer's router logits at once. With f_e the share of (token, layer)
pairs whose top-k holds expert e (the f_e sum to top_k) and P_e the mean router probability of e over
the same pairs, it is n_experts * sum_e f_e * P_e: top_k when routing is uniform, more when it is not.
The layers are pooled before the product (so it is not a sum of per-layer losses), and the softmax and
its top-k run in the logits' dtype (bf16 logits under bf16 training), as there. transformers' optional
attention mask is left out: training rows are packed without padding, and under document masking
every position is still a real token its router saw (transformers trains on packed rows without a
mask too), so every row counts.

The load is what routing chose (`MoEFeedForward.route`'s top-k over fp32 probabilities), counted per
layer: what the experts computed, where the loss's top-k in bf16 may break a near-tie otherwise.
A recorded forward's tensors are kept until the record is dropped; the record stops at the end of the
`with`, so a backward that recomputes a checkpointed block records nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from pretrainkit.train.model.moe import MoEFeedForward


def load_balancing_loss(router_logits: Sequence[torch.Tensor], n_experts: int, top_k: int) -> torch.Tensor:
    """transformers' `load_balancing_loss_func` with no attention mask, over each sparse layer's
    router logits [tokens, n_experts] (see the module docstring)."""
    chosen = torch.zeros(n_experts, dtype=torch.float32, device=router_logits[0].device)
    probability = torch.zeros_like(chosen)
    rows = 0
    for logits in router_logits:
        probs = torch.softmax(logits, dim=-1)
        _, experts = torch.topk(probs, top_k, dim=-1)
        chosen = chosen + expert_counts(experts, n_experts)
        probability = probability + probs.float().sum(dim=0)
        rows += logits.shape[0]
    return n_experts * torch.sum((chosen / rows) * (probability / rows))


def expert_counts(experts: torch.Tensor, n_experts: int) -> torch.Tensor:
    """How many of the (token, slot) pairs of `experts` [tokens, top_k] go to each expert: fp32 [n_experts].
    A scatter, not `bincount`, whose output size would wait for the device."""
    flat = experts.reshape(-1)
    ones = torch.ones(flat.shape, dtype=torch.float32, device=flat.device)
    return torch.zeros(n_experts, dtype=torch.float32, device=flat.device).scatter_add_(0, flat, ones)


class RouterRecord:
    """Within the `with`, every sparse layer of `model` (whatever wraps it: DDP, FSDP, compile,
    activation checkpointing) records what its forwards routed, in layer order."""

    def __init__(self, model: nn.Module) -> None:
        self.layers = [m for m in model.modules() if isinstance(m, MoEFeedForward)]
        self.routed: list[list[tuple[torch.Tensor, torch.Tensor]]] = []

    def __enter__(self) -> RouterRecord:
        for layer in self.layers:
            layer.routed = []
        return self

    def __exit__(self, *exc: object) -> None:
        self.routed = [layer.routed for layer in self.layers]
        for layer in self.layers:
            layer.routed = None

    def logits(self) -> list[torch.Tensor]:
        """Each sparse layer's router logits [tokens, n_experts], the recorded forwards' rows one after another."""
        return [torch.cat([logits for logits, _ in layer]) for layer in self.routed]

    def expert_load(self, n_experts: int) -> torch.Tensor:
        """Tokens routed to each expert (a token counts once for each of its top-k): fp32 [sparse layers, n_experts]."""
        return torch.stack([sum(expert_counts(experts, n_experts) for _, experts in layer) for layer in self.routed])
