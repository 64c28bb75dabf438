"""The optimizer: AdamW with decoupled weight decay on matrices only (ZeRO-1 sharded under `zero1`), and the
learning-rate schedules.

    opt = build_optimizer(model, "ddp", lr=3e-4, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    lr = lr_at(step, schedule)        # step = 1 for the first update ... max_steps for the last
    set_lr(opt, lr)

Schedules (t is the 1-based number of the update being made, W = warmup_steps, T = max_steps):
- warmup (both): lr * t / W for t <= W, so the first update uses lr / W and update W uses lr.
- `cosine`: min_lr + (lr - min_lr) * (1 + cos(pi * (t - W) / (T - W))) / 2: lr right after warmup,
  the midpoint (lr + min_lr) / 2 halfway, min_lr at t = T.
- `wsd` (warmup-stable-decay): lr until D = T - round(decay_fraction * T), then linear to min_lr at t = T.
Weight decay applies to 2-D weights of linear layers; norms, biases and embeddings (which, when tied,
include the output head) get none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from pretrainkit.train.parallel.data_parallel import unwrap


@dataclass(frozen=True)
class Schedule:
    lr: float
    min_lr: float
    warmup_steps: int
    max_steps: int
    kind: str = "cosine"
    decay_fraction: float = 0.2


def lr_at(t: int, s: Schedule) -> float:
    """Learning rate for the t-th update (1-based)."""
    if t <= s.warmup_steps:
        return s.lr * t / s.warmup_steps
    if s.kind == "cosine":
        progress = min(1.0, (t - s.warmup_steps) / max(1, s.max_steps - s.warmup_steps))
        return s.min_lr + (s.lr - s.min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))
    decay_start = s.max_steps - round(s.decay_fraction * s.max_steps)
    if t <= decay_start:
        return s.lr
    progress = min(1.0, (t - decay_start) / max(1, s.max_steps - decay_start))
    return s.lr + (s.min_lr - s.lr) * progress


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Two AdamW groups: decayed linear weights, and everything else (norms, biases, embeddings)."""
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}
    decay, no_decay = [], []
    for p in model.parameters():
        if not p.requires_grad:
            continue
        (decay if p.ndim >= 2 and id(p) not in embeddings else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def build_optimizer(
    model: nn.Module, mode: str, lr: float, weight_decay: float, betas: tuple[float, float], eps: float
) -> torch.optim.Optimizer:
    groups = param_groups(unwrap(model), weight_decay)
    if mode == "zero1" and isinstance(model, DistributedDataParallel):
        # Imported here: torch.distributed.optim scripts TorchScript functions and warns on import.
        from torch.distributed.optim import ZeroRedundancyOptimizer

        return ZeroRedundancyOptimizer(groups, optimizer_class=torch.optim.AdamW, lr=lr, betas=betas, eps=eps)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, eps=eps)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr
