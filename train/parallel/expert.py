"""Expert parallelism: each sparse layer's experts split over the `ep` ranks of the mesh, every token sent
to the rank holding its expert and its output sent back (all-to-all), as torchtitan's ExpertParallel does.

    apply_expert_parallel(model, mesh.ep_mesh)   # before FSDP, which then shards each expert over mesh.expert_dp_mesh

Each `GroupedExperts` gets its stacked weights as DTensors split by expert (`Shard(0)`: rank r of ep holds
experts [r E/ep, (r+1) E/ep)), so a checkpoint holds them in their full shape and loads under any `ep`.
Its forward is wrapped: MoEFeedForward hands it this rank's (token, expert) rows sorted by expert with
the rows per expert (train/model/moe.py); the dispatch exchanges those counts, sends each rank the rows
of its experts (`AllToAll`, whose backward is the reverse exchange, so each expert's gradient sums the
tokens of every rank of its group) and orders what arrived by local expert; the experts run on their
local weights; the combine puts the outputs back in arrival order and returns each to the rank it came
from, in the order it was sent. MoEFeedForward then weights and sums them exactly as on one process.
Every rank of an ep group takes part in every sparse layer's forward (and backward), even with no rows
to send: the layers run in the same order everywhere.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import ParallelStyle, parallelize_module

from pretrainkit.train.model.moe import GroupedExperts


class AllToAll(torch.autograd.Function):
    """Rows exchanged within `group`: `sent[r]` rows (in rank order) go to rank r, `received[r]` come from
    it. The backward is the reverse exchange of the gradients, so each row's gradient returns to its sender."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, sent: list[int], received: list[int], group: dist.ProcessGroup) -> torch.Tensor:
        ctx.sent, ctx.received, ctx.group = sent, received, group
        out = x.new_empty(sum(received), *x.shape[1:])
        dist.all_to_all_single(out, x.contiguous(), received, sent, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return AllToAll.apply(grad, ctx.received, ctx.sent, ctx.group), None, None, None


class ExpertParallel(ParallelStyle):
    """One GroupedExperts split over an ep mesh; holds the split sizes of its forward between dispatch and combine."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[int] = []  # rows this rank sent to each ep rank
        self.received: list[int] = []  # rows each ep rank sent here
        self.by_expert = torch.empty(0, dtype=torch.long)  # arrived rows in local-expert order

    @staticmethod
    def _split_experts(name: str, module: nn.Module, mesh: DeviceMesh) -> None:
        for key, p in list(module.named_parameters(recurse=False)):
            module.register_parameter(key, nn.Parameter(distribute_tensor(p, mesh, [Shard(0)])))

    def _dispatch(self, module: nn.Module, inputs: tuple, mesh: DeviceMesh) -> tuple[torch.Tensor, list[int]]:
        """(rows sorted by expert, rows per expert of all n_experts) -> (the rows of this rank's experts from
        every rank, sorted by local expert; rows per local expert)."""
        x, counts = inputs
        ep, group = mesh.size(), mesh.get_group()
        # counts[r, e]: rows for local expert e of rank r; arrived[r, e]: rows from rank r for local expert e here
        # (on x's device: NCCL exchanges device tensors).
        counts = torch.tensor(counts, dtype=torch.long, device=x.device).view(ep, -1)
        arrived = torch.empty_like(counts)
        dist.all_to_all_single(arrived, counts, group=group)
        self.sent, self.received = counts.sum(1).tolist(), arrived.sum(1).tolist()
        x = AllToAll.apply(x, self.sent, self.received, group)
        # They arrive rank-major (rank 0's rows for each local expert, then rank 1's ...): sorted expert-major,
        # stably, so the rows of one expert keep the ranks' order.
        local_expert = torch.arange(arrived.shape[1], device=x.device).repeat(ep).repeat_interleave(arrived.flatten())
        self.by_expert = local_expert.argsort(stable=True)
        return x[self.by_expert], arrived.sum(0).tolist()

    def _combine(self, module: nn.Module, y: torch.Tensor, mesh: DeviceMesh) -> torch.Tensor:
        """The experts' outputs back in arrival order, then each returned to the rank that sent its row."""
        y = y[torch.argsort(self.by_expert)]
        return AllToAll.apply(y, self.received, self.sent, mesh.get_group())

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        return distribute_module(module, device_mesh, self._split_experts, self._dispatch, self._combine)


def apply_expert_parallel(model: nn.Module, ep_mesh: DeviceMesh) -> None:
    """Split the experts of every sparse layer of `model` (a Transformer, on meta or not) over `ep_mesh`."""
    for experts in [m for m in model.modules() if isinstance(m, GroupedExperts)]:
        parallelize_module(experts, ep_mesh, ExpertParallel())
