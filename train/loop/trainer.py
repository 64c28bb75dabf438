"""The Trainer: model, optimizer, schedule and step count in one object, and the math of one step.

    trainer = Trainer(cfg, model_cfg, env)
    result = trainer.train_step(micro_batches)   # this process's micro-batches of the next global batch
    grads = trainer.gradients(micro_batches)     # or in two halves, for a caller that decides on the update
    result = trainer.update(grads, apply=True)   # (the training loop: spike detection, train/loop/spikes.py)
    trainer.evaluate_rows(inputs, targets)       # mean per-token loss; each process takes a slice
    trainer.evaluate_tasks(suite)                # eval.tasks' accuracies; each process scores a share of the items
    losses, counted = trainer.token_losses(micro_batches)  # every target's loss of the global batch (a spike's)
    trainer.step, trainer.tokens                 # with model and optimizer: all a checkpoint holds of it
    trainer.states, trainer.record               # those as the Statefuls handed to Checkpoints (DCP; meta.json)

One step: the learning rate for update `step + 1`; forward/backward on each micro-batch (gradient
sync on the last one only, see `parallelize`); the loss summed over processes, and with it whether any
was asked to stop (SIGTERM, `Gradients.stop`); clipping to the global grad norm; AdamW. The loss is the
sum of token cross-entropies divided by the number of target tokens in the whole global batch (all
processes, all micro-batches), so accumulation and world size do not change it. Initial weights
depend only on `seed`, so every process (and every world size) starts from the same model.

Layouts (`cfg.parallel`, see `train/parallel/`): every process of a data-parallel group gets that
group's micro-batches; the token count and the loss are summed over one process per group
(`mesh.counts_batch`). Under pipeline parallelism the micro-batches are concatenated and the schedule
runs them as pipeline micro-batches (`parallel.pp_microbatches`, by default as many as accumulation
micro-batches), the loss being computed on the last stage; `trainer.model` is then this process's
stages as one module with the plain model's parameter names.

A mixture of experts (`model.n_experts`): each micro-batch's forward records what its routers chose
(train/model/router_loss.py) and its objective adds `router_aux_loss_coef` times transformers'
load-balancing loss of that forward, divided by the micro-batches, so that the step's gradient is
that of the cross-entropy plus the coefficient times the mean of the forwards' aux losses over every
micro-batch of every data-parallel group (DDP and FSDP average over the groups). `loss` stays the
cross-entropy alone; `aux_loss` is that mean (with one micro-batch on one process, transformers'
`aux_loss` on the global batch) and `expert_load` the tokens each sparse layer's experts got in the
global batch, both summed over the processes with the loss. A dense model's step is unchanged.

Document masking (`data.document_masking`, with the tokenizer's `eos_id`): each micro-batch's rows get
their document ids and lose the targets of their EOS tokens (train/loop/documents.py) before the token
count and the forward, in training and in `evaluate_rows` alike; the pipeline hands the ids to every stage.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F

from pretrainkit.sigterm import sigterm_received
from pretrainkit.train.checkpoint.states import ModelState, OptimizerState
from pretrainkit.train.config import TrainConfig
from pretrainkit.train.evaluation.tasks import TaskSuite
from pretrainkit.train.loop.documents import IGNORE_INDEX, document_ids, within_documents
from pretrainkit.train.loop.optim import Schedule, build_optimizer, lr_at, set_lr
from pretrainkit.train.model.llama import ModelConfig, Transformer
from pretrainkit.train.model.materialize import init_weights
from pretrainkit.train.model.router_loss import RouterRecord, load_balancing_loss
from pretrainkit.train.parallel.data_parallel import (
    autocast_context,
    clip_grad_norm,
    gradient_sync,
    parallelize,
    reshard,
)
from pretrainkit.train.parallel.distributed import DistEnv
from pretrainkit.train.parallel.mesh import ParallelMesh, check_layout
from pretrainkit.train.parallel.pipeline import Pipeline, rank_stages, split_stages

Batch = tuple[torch.Tensor, torch.Tensor]
Rows = tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]  # inputs, targets, documents (document masking)


@dataclass(frozen=True)
class Routing:
    """A mixture of experts' routing in one step, over the global batch (see the module docstring)."""

    aux_loss: float  # the mean over the step's forwards of transformers' load-balancing loss
    expert_load: dict[str, list[int]]  # sparse layer index -> tokens sent to each expert


@dataclass(frozen=True)
class Gradients:
    """A step's first half: the gradients are computed and clipped, the update not yet made."""

    loss: float  # mean per-token loss of the global batch
    grad_norm: float  # global L2 norm before clipping
    lr: float
    tokens: int  # target tokens in the global batch
    routing: Routing | None = None  # a mixture of experts' aux loss and expert load
    # Some process had a SIGTERM before this step's loss was summed (the flag rides on that sum): every
    # process reads the same, so all of them stop after the same step.
    stop: bool = False


@dataclass(frozen=True)
class StepResult:
    loss: float  # mean per-token loss of the global batch, before the update
    grad_norm: float  # global L2 norm before clipping
    lr: float
    tokens: int  # target tokens in the global batch
    applied: bool = True  # False when the caller dropped the update (`update(apply=False)`)
    routing: Routing | None = None  # a mixture of experts' aux loss and expert load


class TrainerRecord:
    """The trainer's part of a checkpoint's `meta.json` (a `Stateful`): steps taken, tokens trained on, the
    model's shape."""

    def __init__(self, trainer: Trainer) -> None:
        self.trainer = trainer

    def state_dict(self) -> dict:
        t = self.trainer
        return {"step": t.step, "tokens": t.tokens, "model": dataclasses.asdict(t.model_cfg)}

    def load_state_dict(self, meta: dict) -> None:
        self.trainer.step, self.trainer.tokens = int(meta["step"]), int(meta["tokens"])


class Trainer:
    def __init__(
        self, cfg: TrainConfig, model_cfg: ModelConfig, env: DistEnv, where: str = "config", eos_id: int | None = None
    ) -> None:
        self.cfg, self.model_cfg, self.env = cfg, model_cfg, env
        if cfg.data.document_masking and eos_id is None:
            raise ValueError("data.document_masking needs the tokenizer's eos_id")
        self.eos_id = eos_id if cfg.data.document_masking else None
        self.bf16 = cfg.precision == "bf16"
        p = cfg.parallel
        layout, self.microbatches = check_layout(cfg, model_cfg, env.world_size, where)
        self.mesh = ParallelMesh(layout, p.data, env.device.type)
        torch.manual_seed(cfg.seed)
        with torch.device("meta"):  # materialized already sharded, then initialized shard by shard
            model = Transformer(model_cfg)
        split = dict(bf16=self.bf16, activation_checkpointing=cfg.activation_checkpointing, compile=cfg.compile)
        self.pipeline: Pipeline | None = None
        if p.pp > 1:
            num_stages, ids = p.pp * p.stages, rank_stages(self.mesh.pp_rank, p.pp, p.stages)
            stages = [parallelize(s, p, self.mesh, env.device, **split) for s in split_stages(model, num_stages, ids)]
            self.pipeline = Pipeline(
                stages, ids, num_stages, self.mesh, env.device, p.pp_schedule, self.microbatches, self._pipeline_loss
            )
            self.model = self.pipeline.local
        else:
            self.model = parallelize(model, p, self.mesh, env.device, **split)
        init_weights(self.model, model_cfg, cfg.seed)
        o = cfg.optim
        self.optimizer = build_optimizer(self.model, p.data, o.lr, o.weight_decay, o.betas, o.eps)
        self.schedule = Schedule(o.lr, o.min_lr, o.warmup_steps, cfg.max_steps, o.schedule, o.decay_fraction)
        self.step = 0  # steps taken (an update a spike check vetoed still counts)
        self.tokens = 0  # target tokens trained on so far
        self._loss_scale = 1.0  # what the pipeline's loss function multiplies each micro-batch's sum by
        self._token_losses: list[torch.Tensor] | None = None  # where it puts each target's loss (`token_losses`)
        # What a checkpoint holds of the trainer: DCP's tensors by name, and its part of meta.json.
        self.states = {"model": ModelState(self.model), "optim": OptimizerState(self.model, self.optimizer)}
        self.record = TrainerRecord(self)

    def _all_reduce(self, values: list[float]) -> list[float]:
        t = torch.tensor(values, dtype=torch.float64, device=self.env.device)
        if self.env.world_size > 1:
            dist.all_reduce(t)
        return t.tolist()

    def _rows(self, inputs: torch.Tensor, targets: torch.Tensor) -> Rows:
        """Under document masking, the documents of the rows and the targets within them
        (train/loop/documents.py); as they are otherwise."""
        if self.eos_id is None:
            return inputs, targets, None
        return inputs, within_documents(inputs, targets, self.eos_id), document_ids(inputs, self.eos_id)

    def _loss_sum(self, inputs: torch.Tensor, targets: torch.Tensor, documents: torch.Tensor | None) -> torch.Tensor:
        return self._cross_entropy(self._logits(inputs, documents), targets.to(self.env.device, non_blocking=True))

    def _logits(self, inputs: torch.Tensor, documents: torch.Tensor | None) -> torch.Tensor:
        dev = self.env.device
        extra = {} if documents is None else {"documents": documents.to(dev, non_blocking=True)}
        with autocast_context(self.model, dev, self.bf16):
            return self.model(inputs.to(dev, non_blocking=True), **extra)

    @staticmethod
    def _cross_entropy(logits: torch.Tensor, targets: torch.Tensor, reduction: str = "sum") -> torch.Tensor:
        """The summed token cross-entropy; with reduction="none", each target's (0 for IGNORE_INDEX), flat."""
        return F.cross_entropy(
            logits.float().flatten(0, 1), targets.flatten(), reduction=reduction, ignore_index=IGNORE_INDEX
        )

    def _pipeline_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if self._token_losses is not None:  # `token_losses`: the last stage keeps each target's loss, in order
            self._token_losses.append(self._cross_entropy(logits, targets, "none").detach())
        return self._cross_entropy(logits, targets) * self._loss_scale

    def _run_pipeline(
        self, inputs: torch.Tensor, targets: torch.Tensor, documents: torch.Tensor | None, scale: float | None
    ) -> float:
        """Sum of the token losses of these rows (on the last stage; 0 elsewhere); with `scale`, the
        backward of the sum times `scale` too."""
        self._loss_scale = 1.0 if scale is None else scale
        dev = self.env.device
        x, y, docs = inputs.to(dev), targets.to(dev), None if documents is None else documents.to(dev)
        with autocast_context(self.model, dev, self.bf16):
            losses = (self.pipeline.eval if scale is None else self.pipeline.step)(x, y, docs)
        return math.fsum(v.detach().item() for v in losses) / self._loss_scale

    def train_step(self, micro_batches: Sequence[Batch]) -> StepResult:
        """One update from this process's micro-batches of the next global batch."""
        return self.update(self.gradients(micro_batches))

    def gradients(self, micro_batches: Sequence[Batch]) -> Gradients:
        """Forward and backward on this process's micro-batches of the next global batch, then clipping:
        the global loss and grad norm, for the caller to decide on the update (`update`)."""
        lr = lr_at(self.step + 1, self.schedule)
        set_lr(self.optimizer, lr)
        self.model.train()
        micro_rows = [self._rows(x, y) for x, y in micro_batches]
        counts = self.mesh.counts_batch
        local_tokens = sum(int((t != IGNORE_INDEX).sum()) for _, t, _ in micro_rows) if counts else 0
        (total_tokens,) = self._all_reduce([local_tokens])
        # DDP and FSDP2 average gradients over data-parallel groups; multiplying by their number turns
        # that average back into the sum over the global batch, divided once by its token count.
        scale = self.mesh.dp_size / max(total_tokens, 1.0)
        routed = None  # a mixture of experts': this process's [aux losses, expert load]
        if self.pipeline is not None:
            inputs, targets, documents = (None if t[0] is None else torch.cat(t) for t in zip(*micro_rows))
            loss_sum = torch.tensor(self._run_pipeline(inputs, targets, documents, scale), dtype=torch.float64)
        else:
            loss_sum = torch.zeros((), dtype=torch.float64, device=self.env.device)
            for i, rows in enumerate(micro_rows):
                with gradient_sync(self.model, enabled=i == len(micro_rows) - 1):
                    with RouterRecord(self.model) as record:  # records nothing in a dense model
                        ce = self._loss_sum(*rows)
                    objective = ce * scale
                    if record.layers:
                        aux, this = self._router_loss(record)
                        routed = this if routed is None else routed + this
                        if self.model_cfg.router_aux_loss_coef:  # the mean over micro-batches, times the coef
                            objective = objective + aux * (self.model_cfg.router_aux_loss_coef / len(micro_rows))
                    objective.backward()
                loss_sum += ce.detach()
        sums = [loss_sum.item() if counts else 0.0, float(sigterm_received())]
        if routed is not None:  # summed with the loss: the forwards, their aux losses and the experts' load
            sums += [float(len(micro_rows)), *routed.tolist()] if counts else [0.0] * (1 + routed.numel())
        global_loss, stops, *routing = self._all_reduce(sums)
        loss = global_loss / max(total_tokens, 1.0)
        pp_group = self.mesh.pp_group if self.pipeline is not None else None
        grad_norm = clip_grad_norm(self.model, self.cfg.optim.clip, pp_group).item()
        return Gradients(loss, grad_norm, lr, int(total_tokens), self._routing(routing), stops > 0)

    def _router_loss(self, record: RouterRecord) -> tuple[torch.Tensor, torch.Tensor]:
        """A mixture of experts' forward: its load-balancing loss, and [that loss, the expert load] (float64, flat)."""
        cfg = self.model_cfg
        aux = load_balancing_loss(record.logits(), cfg.n_experts, cfg.experts_per_token)
        return aux, torch.cat([aux.detach().view(1), record.expert_load(cfg.n_experts).flatten()]).double()

    def _routing(self, routing: list[float]) -> Routing | None:
        """The step's `Routing` from its sums [forwards, aux losses, expert load]; None for a dense model."""
        if not routing:
            return None
        forwards, aux, *load = routing
        cfg = self.model_cfg
        layers = [i for i in range(cfg.n_layers) if cfg.sparse_layer(i)]
        e = cfg.n_experts
        expert_load = {str(layer): [round(c) for c in load[j * e : (j + 1) * e]] for j, layer in enumerate(layers)}
        return Routing(aux / max(forwards, 1.0), expert_load)

    def update(self, grads: Gradients, apply: bool = True) -> StepResult:
        """The step's second half: AdamW's update, unless `apply` is False (a spike's update dropped); the
        step counts and its tokens are trained on either way."""
        if apply:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        self.tokens += grads.tokens
        return StepResult(grads.loss, grads.grad_norm, grads.lr, grads.tokens, apply, grads.routing)

    @torch.no_grad()
    def token_losses(self, micro_batches: Sequence[Batch]) -> tuple[torch.Tensor, torch.Tensor]:
        """Each target's loss in the global batch whose micro-batches on this process these are, on every
        process and in global row order: float64 [global_size, seq_len] cross-entropies, and whether each
        target counts (bool, False where document masking ignores it; its loss is 0). Call it between
        `gradients` and `update`: its forward runs under the weights the step's forward ran under, on the
        same rows, so its figures are the step's (up to the order of float sums); they add up to the step's
        loss times its token count. One forward and one all-reduce of 16 bytes per token: the training loop
        calls it only when a spike fires (train/loop/spike_documents.py)."""
        self.model.eval()
        micro_rows = [self._rows(x, y) for x, y in micro_batches]
        targets = torch.cat([t for _, t, _ in micro_rows])
        # The step's gradients, which a pipeline schedule's eval sets to None under FSDP: put back after it.
        grads = [(p, p.grad) for p in self.model.parameters()]
        try:
            if self.pipeline is not None:
                inputs, _, documents = (None if t[0] is None else torch.cat(t) for t in zip(*micro_rows))
                self._token_losses = []
                self._run_pipeline(inputs, targets, documents, None)
                losses = torch.cat(self._token_losses) if self._token_losses else None  # the last stage only
            else:
                dev = self.env.device
                losses = torch.cat(
                    [self._cross_entropy(self._logits(x, d), t.to(dev), "none") for x, t, d in micro_rows]
                )
        finally:
            self._token_losses = None
            for p, grad in grads:
                p.grad = grad
            # The update comes next: no forward may keep parameters gathered over it (a pipeline's stages
            # are FSDP roots of their own, which `model`, their submodules under plain names, leaves out).
            for module in self.pipeline.stages if self.pipeline is not None else [self.model]:
                reshard(module)
        out = torch.zeros(
            (2, self.cfg.batch.global_size, targets.shape[1]), dtype=torch.float64, device=self.env.device
        )
        if self.mesh.counts_batch:  # one process per data-parallel group fills in its group's rows
            lo = self.mesh.dp_rank * len(targets)
            out[0, lo : lo + len(targets)] = losses.view(targets.shape)
            out[1, lo : lo + len(targets)] = (targets != IGNORE_INDEX).to(out.device)
        if self.env.world_size > 1:
            dist.all_reduce(out)
        out = out.cpu()
        return out[0], out[1].bool()

    @torch.no_grad()
    def evaluate_rows(self, inputs: torch.Tensor, targets: torch.Tensor) -> float:
        """Mean per-token loss over all rows (every process passes the same rows; each group computes a slice).

        Every process runs the same number of forwards (FSDP2 needs that; a pipeline runs whole steps
        of the training shape): a short slice is padded with rows whose targets are all IGNORE_INDEX,
        which count for nothing.
        """
        self.model.eval()
        dp, chunk = self.mesh.dp_size, self.cfg.batch.micro_size
        if self.pipeline is not None:
            chunk = self.cfg.batch.global_size // dp
        per_group = -(-len(inputs) // (dp * chunk)) * chunk
        lo = min(self.mesh.dp_rank * per_group, len(inputs))
        x, y = inputs[lo : lo + per_group], targets[lo : lo + per_group]
        if len(x) < per_group:
            pad = per_group - len(x)
            x = torch.cat([x, inputs[:1].expand(pad, -1)])
            y = torch.cat([y, torch.full((pad, y.shape[1]), IGNORE_INDEX, dtype=y.dtype)])
        loss_sum, tokens = 0.0, 0
        for xs, ys in zip(x.split(chunk), y.split(chunk)):
            xs, ys, docs = self._rows(xs, ys)
            if self.pipeline is not None:
                loss_sum += self._run_pipeline(xs, ys, docs, None)
            else:
                loss_sum += self._loss_sum(xs, ys, docs).item()
            tokens += int((ys != IGNORE_INDEX).sum())
        counts = self.mesh.counts_batch
        total_loss, total_tokens = self._all_reduce([loss_sum if counts else 0.0, tokens if counts else 0])
        return total_loss / max(total_tokens, 1.0)

    @torch.no_grad()
    def evaluate_tasks(self, suite: TaskSuite) -> dict[str, float]:
        """`NAME/acc` and `NAME/acc_norm` of every task: each data-parallel group scores its share of the items
        (train/evaluation/tasks.py), in forwards of at most micro_size x seq_len positions; the counts are summed."""
        self.model.eval()
        budget = self.cfg.batch.micro_size * self.cfg.data.seq_len
        correct = suite.correct(self._task_logits, self.mesh.dp_rank, self.mesh.dp_size, budget)
        counts = self.mesh.counts_batch
        return suite.metrics(self._all_reduce([c if counts else 0.0 for c in correct]))

    def _task_logits(self, inputs: torch.Tensor) -> torch.Tensor:
        """The logits of plain causal rows (no document ids: a task sequence is one document). Tensor parallelism
        splits the sequence over its peers in the norms, so rows are right-padded to a multiple of their number
        (under causal attention, padding on the right changes nothing before it) and the logits cut back."""
        t = inputs.shape[1]
        inputs = F.pad(inputs, (0, -t % self.mesh.layout.tp))
        with autocast_context(self.model, self.env.device, self.bf16):
            return self.model(inputs.to(self.env.device, non_blocking=True))[:, :t]
