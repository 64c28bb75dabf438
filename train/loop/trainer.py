"""The Trainer: model, optimizer, schedule and step count in one object, and the math of one step.

    trainer = Trainer(cfg, model_cfg, env)
    result = trainer.train_step(micro_batches)   # this process's micro-batches of the next global batch
    trainer.evaluate_rows(inputs, targets)       # mean per-token loss; each process takes a slice
    trainer.step, trainer.tokens                 # with model and optimizer: all a checkpoint holds

One step: the learning rate for update `step + 1`; forward/backward on each micro-batch (gradient
sync on the last one only, see `parallelize`); clipping to the global grad norm; AdamW. The loss is the
sum of token cross-entropies divided by the number of target tokens in the whole global batch (all
processes, all micro-batches), so accumulation and world size do not change it. Initial weights
depend only on `seed`, so every process (and every world size) starts from the same model.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
import torch.distributed as dist
import torch.nn.functional as F

from train.config import TrainConfig
from train.parallel.distributed import DistEnv
from train.model.llama import ModelConfig, Transformer
from train.model.materialize import init_weights
from train.model.resolve import model_config  # noqa: F401 - where callers have always found it
from train.loop.optim import Schedule, lr_at, set_lr
from train.parallel.data_parallel import autocast_context, build_optimizer, clip_grad_norm, gradient_sync, parallelize

IGNORE_INDEX = -100  # target value that counts neither in the loss nor in the token count

Batch = tuple[torch.Tensor, torch.Tensor]


@dataclass(frozen=True)
class StepResult:
    loss: float  # mean per-token loss of the global batch, before the update
    grad_norm: float  # global L2 norm before clipping
    lr: float
    tokens: int  # target tokens in the global batch
    applied: bool = True  # False when `accept` vetoed the update


class Trainer:
    def __init__(self, cfg: TrainConfig, model_cfg: ModelConfig, env: DistEnv) -> None:
        self.cfg, self.model_cfg, self.env = cfg, model_cfg, env
        self.bf16 = cfg.precision == "bf16"
        torch.manual_seed(cfg.seed)
        with torch.device("meta"):  # materialized already sharded, then initialized shard by shard
            model = Transformer(model_cfg)
        self.model = parallelize(
            model, cfg.parallel, env.world_size, env.device, bf16=self.bf16,
            activation_checkpointing=cfg.activation_checkpointing, compile=cfg.compile,
        )
        init_weights(self.model, model_cfg, cfg.seed)
        o = cfg.optim
        self.optimizer = build_optimizer(self.model, cfg.parallel, o.lr, o.weight_decay, o.betas, o.eps)
        self.schedule = Schedule(o.lr, o.min_lr, o.warmup_steps, cfg.max_steps, o.schedule, o.decay_fraction)
        self.step = 0  # steps taken (an update a spike check vetoed still counts)
        self.tokens = 0  # target tokens trained on so far

    def _all_reduce(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.env.device)
        if self.env.world_size > 1:
            dist.all_reduce(t)
        return t.tolist()

    def _loss_sum(self, inputs: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        with autocast_context(self.model, self.env.device, self.bf16):
            logits = self.model(inputs.to(self.env.device, non_blocking=True))
        targets = targets.to(self.env.device, non_blocking=True)
        return F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="sum", ignore_index=IGNORE_INDEX)

    def train_step(self, micro_batches: Sequence[Batch], accept: Callable[[float, float], bool] | None = None) -> StepResult:
        """One update from this process's micro-batches of the next global batch.

        `accept(loss, grad_norm)`, called with the global values before the optimizer runs, may veto
        the update (spike handling): the step still counts and its batch is consumed.
        """
        lr = lr_at(self.step + 1, self.schedule)
        set_lr(self.optimizer, lr)
        self.model.train()
        local_tokens = sum(int((t != IGNORE_INDEX).sum()) for _, t in micro_batches)
        (total_tokens,) = self._all_reduce([local_tokens])
        # DDP and FSDP2 average gradients over processes; multiplying by world size turns that average
        # back into the sum over the global batch, divided once by its token count.
        scale = self.env.world_size / max(total_tokens, 1.0)
        loss_sum = torch.zeros((), dtype=torch.float64, device=self.env.device)
        for i, (inputs, targets) in enumerate(micro_batches):
            with gradient_sync(self.model, enabled=i == len(micro_batches) - 1):
                ce = self._loss_sum(inputs, targets)
                (ce * scale).backward()
            loss_sum += ce.detach()
        (global_loss,) = self._all_reduce([loss_sum.item()])
        loss = global_loss / max(total_tokens, 1.0)
        grad_norm = clip_grad_norm(self.model, self.cfg.optim.clip).item()
        applied = accept is None or accept(loss, grad_norm)
        if applied:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += int(total_tokens)
        return StepResult(loss, grad_norm, lr, int(total_tokens), applied)

    @torch.no_grad()
    def evaluate_rows(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """Mean per-token loss over all rows (every process passes the same rows; each computes a slice).

        Every process runs the same number of forwards (FSDP2 needs that): a short slice is padded
        with rows whose targets are all IGNORE_INDEX, which count for nothing.
        """
        self.model.eval()
        per_rank = -(-len(inputs) // self.env.world_size)
        lo = min(self.env.rank * per_rank, len(inputs))
        x, y = inputs[lo : lo + per_rank], targets[lo : lo + per_rank]
        if len(x) < per_rank:
            pad = per_rank - len(x)
            x = torch.cat([x, inputs[:1].expand(pad, -1)])
            y = torch.cat([y, torch.full((pad, y.shape[1]), IGNORE_INDEX, dtype=y.dtype)])
        loss_sum, tokens = 0.0, 0
        for xs, ys in zip(x.split(self.cfg.batch.micro_size), y.split(self.cfg.batch.micro_size)):
            loss_sum += self._loss_sum(xs, ys).item()
            tokens += int((ys != IGNORE_INDEX).sum())
        total_loss, total_tokens = self._all_reduce([loss_sum, tokens])
        return total_loss / max(total_tokens, 1.0)
