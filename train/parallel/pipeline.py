"""Pipeline parallelism: the plain model cut into stage modules, run by a `torch.distributed.pipelining` schedule.

    stages = split_stages(model, num_stages=4, stage_ids=[0, 2])    # this rank's stage modules
    ... apply TP / checkpointing / FSDP to each stage module ...
    pipe = Pipeline(stages, [0, 2], 4, mesh, device, "interleaved_1f1b", n_microbatches=8, loss_fn=loss)
    pipe.step(inputs, targets)   # forward and backward of one data-parallel group's rows, in n_microbatches
    pipe.eval(inputs, targets)   # forward only; the loss function still sees every micro-batch
    pipe.local                   # one module over this rank's stages, with the plain model's parameter names

Stages: S = pp x stages_per_rank pieces of n_layers/S consecutive blocks; stage s runs on pp rank
s % pp (the looped placement interleaved 1F1B expects: with pp = 2 and 4 stages, rank 0 holds
stages 0 and 2, rank 1 stages 1 and 3). The first stage also holds the embedding (and applies the
family's embedding scale), the last the final norm, the output head and the logit soft cap. A stage
module keeps the plain model's own submodules under their own names (block 5 stays `layers.5`), so a
state dict, a checkpoint and `ptk export` see the same keys whatever the layout. Schedules: `gpipe`
(all forwards, then all backwards), `1f1b` (one forward, one backward in the steady state: at most
pp micro-batches in flight on the first stage) and `interleaved_1f1b` (1F1B over several stages per
rank, a smaller bubble). The loss function
returns a sum over tokens already divided by the global batch's token count, so the schedule does
not rescale gradients (`scale_grads=False`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from pretrainkit.train.model.llama import Transformer, embed, head
from pretrainkit.train.parallel.mesh import ParallelMesh

# The classes of `torch.distributed.pipelining` that run each `parallel.pp_schedule`, by name: imported
# by a pipelined run alone, since that package imports torch._dynamo (half a second of every process's start).
SCHEDULES = {"gpipe": "ScheduleGPipe", "1f1b": "Schedule1F1B", "interleaved_1f1b": "ScheduleInterleaved1F1B"}


class StageModule(nn.Module):
    """Some consecutive blocks of a Transformer, with its embedding if first and its norm and head if last."""

    def __init__(self, model: Transformer, layer_ids: list[int], first: bool, last: bool) -> None:
        super().__init__()
        self.tok_embeddings = model.tok_embeddings if first else None
        self.layers = nn.ModuleDict({str(i): model.layers[i] for i in layer_ids})
        self.norm = model.norm if last else None
        self.output = model.output if last else None
        self.cfg, self.rope = model.cfg, model.rope
        # Under sequence parallelism a later stage receives seq_len / tp positions of each row.
        self.sequence_shards = 1

    def forward(self, h: torch.Tensor, documents: torch.Tensor | None = None) -> torch.Tensor:
        if self.tok_embeddings is not None:
            t = h.shape[1]
            h = embed(self.cfg, self.tok_embeddings, h)
        else:
            t = h.shape[1] * self.sequence_shards
        inputs = self.rope.per_layer(0, t, h.device, documents)
        for i, layer in self.layers.items():
            cos, sin, mask = inputs[int(i)]
            h = layer(h, cos, sin, mask=mask)
        if self.output is not None:
            h = head(self.cfg, self.norm, self.output, h)
        return h


def stage_layers(n_layers: int, num_stages: int, stage: int) -> list[int]:
    per = n_layers // num_stages
    return list(range(stage * per, (stage + 1) * per))


def rank_stages(pp_rank: int, pp: int, stages_per_rank: int) -> list[int]:
    return [pp_rank + k * pp for k in range(stages_per_rank)]


def split_stages(model: Transformer, num_stages: int, stage_ids: list[int]) -> list[StageModule]:
    n = model.cfg.n_layers
    return [
        StageModule(model, stage_layers(n, num_stages, s), first=s == 0, last=s == num_stages - 1) for s in stage_ids
    ]


def merged(stages: list[nn.Module]) -> nn.Module:
    """One module holding every submodule of this rank's stages under its plain name (for state dicts)."""
    local = nn.Module()
    local.tok_embeddings = next((s.tok_embeddings for s in stages if s.tok_embeddings is not None), None)
    local.layers = nn.ModuleDict({k: v for s in stages for k, v in s.layers.items()})
    local.norm = next((s.norm for s in stages if s.norm is not None), None)
    local.output = next((s.output for s in stages if s.output is not None), None)
    return local


class Pipeline:
    def __init__(
        self,
        stages: list[nn.Module],
        stage_ids: list[int],
        num_stages: int,
        mesh: ParallelMesh,
        device: torch.device,
        schedule: str,
        n_microbatches: int,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    ) -> None:
        self.stages = stages
        self.local = merged(stages)
        self.first = 0 in stage_ids
        self.last = num_stages - 1 in stage_ids
        from torch.distributed import pipelining

        pipe_stages = [
            pipelining.PipelineStage(m, s, num_stages, device, group=mesh.pp_group) for m, s in zip(stages, stage_ids)
        ]
        cls = getattr(pipelining, SCHEDULES[schedule])
        target = pipe_stages if schedule == "interleaved_1f1b" else pipe_stages[0]
        self.schedule = cls(target, n_microbatches=n_microbatches, loss_fn=loss_fn, scale_grads=False)

    def step(
        self, inputs: torch.Tensor, targets: torch.Tensor, documents: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        """The loss function's value for each micro-batch (on the last stage; [] elsewhere). `documents`
        (document masking) goes to every stage, split into the same micro-batches as the inputs."""
        losses: list[torch.Tensor] = []
        # Not returning the outputs: the last stage would keep every micro-batch's logits until the end.
        self.schedule.step(
            *self._args(inputs), **self._target(targets, losses), **self._documents(documents), return_outputs=False
        )
        return losses

    def eval(
        self, inputs: torch.Tensor, targets: torch.Tensor, documents: torch.Tensor | None = None
    ) -> list[torch.Tensor]:
        losses: list[torch.Tensor] = []
        self.schedule.eval(
            *self._args(inputs), **self._target(targets, losses), **self._documents(documents), return_outputs=False
        )
        return losses

    @staticmethod
    def _documents(documents: torch.Tensor | None) -> dict:
        # A keyword argument reaches every stage (activations only flow from stage to stage).
        return {} if documents is None else {"documents": documents}

    def _args(self, inputs: torch.Tensor) -> tuple:
        return (inputs,) if self.first else ()

    def _target(self, targets: torch.Tensor, losses: list) -> dict:
        return {"target": targets, "losses": losses} if self.last else {}
