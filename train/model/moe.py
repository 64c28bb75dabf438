"""The sparse mixture-of-experts feed-forward: a router picks `experts_per_token` of `n_experts` SwiGLU
experts for each token, whose outputs are summed weighted by the router's probabilities.

    ffn = MoEFeedForward(cfg)                 # cfg.n_experts, cfg.experts_per_token, cfg.moe_ffn_size
    y = ffn(x)                                # x [batch, seq, d_model] -> [batch, seq, d_model]
    logits, weights, experts = ffn.route(x2d) # router logits [tokens, n_experts], top-k weights and indices

Routing is Hugging Face's (Qwen3-MoE, OLMoE, Mixtral): softmax over the router logits in fp32, the
top-k probabilities, renormalized to sum to 1 when `norm_topk_prob`. The experts' weights are stacked,
`experts.w1` / `experts.w3` [n_experts, moe_ffn, d_model] and `experts.w2` [n_experts, d_model, moe_ffn],
so that a sharded or initialized tensor is one parameter whatever the number of experts (the per-expert
Hugging Face tensors are rows of them: train/model/hf_adapter.py). The experts run grouped: the
(token, expert) pairs are sorted by expert and each expert multiplies the tokens sent to it at once.

While `routed` is a list (train/model/router_loss.py: `RouterRecord` sets it around a training forward)
each forward appends its router logits and chosen experts, which the load-balancing loss and the
experts' load are computed from; it is None otherwise (evaluation, generation), so nothing is kept.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor

if TYPE_CHECKING:
    from pretrainkit.train.model.llama import ModelConfig


class GroupedExperts(nn.Module):
    """n_experts SwiGLU MLPs, w2(silu(w1 x) * w3 x), their weights stacked on a leading expert dimension."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        e, d, f = cfg.n_experts, cfg.d_model, cfg.moe_ffn_size
        self.w1 = nn.Parameter(torch.empty(e, f, d))
        self.w3 = nn.Parameter(torch.empty(e, f, d))
        self.w2 = nn.Parameter(torch.empty(e, d, f))

    def forward(self, x: torch.Tensor, counts: list[int]) -> torch.Tensor:
        """x [rows, d_model] sorted by expert, `counts[e]` rows for expert e -> [rows, d_model]."""
        # Split by expert over an ep mesh (train/parallel/expert.py), the weights are DTensors whose local
        # rows are this rank's experts, and `x` and `counts` what was sent to them.
        w1, w2, w3 = (w.to_local() if isinstance(w, DTensor) else w for w in (self.w1, self.w2, self.w3))
        out = []
        for e, rows in enumerate(x.split(counts)):
            out.append((F.silu(rows @ w1[e].T) * (rows @ w3[e].T)) @ w2[e].T)
        return torch.cat(out)


class MoEFeedForward(nn.Module):
    """The router (a linear to n_experts logits) and the experts; see the module docstring."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_experts, self.top_k, self.norm_topk = cfg.n_experts, cfg.experts_per_token, cfg.norm_topk_prob
        self.router = nn.Linear(cfg.d_model, cfg.n_experts, bias=False)
        self.experts = GroupedExperts(cfg)
        self.routed: list[tuple[torch.Tensor, torch.Tensor]] | None = None  # see the module docstring

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x [tokens, d_model] -> (router logits [tokens, n_experts], the top-k weights (fp32) and
        expert indices [tokens, top_k]); the logits are what a load-balancing loss reads."""
        logits = self.router(x)
        probs = torch.softmax(logits.float(), dim=-1)
        weights, experts = torch.topk(probs, self.top_k, dim=-1)
        if self.norm_topk:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return logits, weights, experts

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        logits, weights, experts = self.route(flat)
        if self.routed is not None:
            self.routed.append((logits, experts))
        # Each (token, expert) pair once, grouped by expert; stable, so tokens stay in order within a group.
        order = experts.flatten().argsort(stable=True)
        tokens = order // self.top_k
        counts = torch.bincount(experts.flatten(), minlength=self.n_experts).tolist()
        y = self.experts(flat[tokens], counts) * weights.flatten()[order, None]
        return torch.zeros_like(flat).index_add_(0, tokens, y.to(flat.dtype)).view_as(x)
