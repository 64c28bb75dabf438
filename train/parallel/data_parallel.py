"""How a plain model is spread over processes: the order of the splits, and DDP, ZeRO-1/2, FSDP2/HSDP.

    model = parallelize(Transformer(cfg), cfg.parallel, mesh, device=dev, bf16=True, activation_checkpointing=True)
    with gradient_sync(model, enabled=is_last_micro_batch):
        loss.backward()

Modes (the glossary's ZeRO stages as a setting):
- `ddp`: `DistributedDataParallel`; bf16 through autocast (see `autocast_context`).
- `zero1`: DDP plus `ZeroRedundancyOptimizer` (`train/loop/optim.py`), which shards the AdamW state over the processes.
- `zero2`: FSDP2 `fully_shard` per block then the root with `reshard_after_forward=False`: gradients
  and optimizer state sharded, parameters kept gathered between forward and backward.
- `fsdp`: the same with `reshard_after_forward=True` (ZeRO-3: parameters sharded too).
- `hsdp`: FSDP over a 2-D mesh: replicated over `dp_replicate`, sharded within `dp_shard`.
FSDP2 bf16 is `MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32)`. FSDP shards over the
mesh's data-parallel dimensions only; under tensor parallelism its shards are 2-D DTensors. Under
expert parallelism (`parallel.ep`, FSDP modes only) each sparse layer's experts, already split by
expert over the ep ranks, are a FSDP module of their own over the data-parallel ranks outside the ep
group (`mesh.expert_dp_mesh`), as torchtitan shards them; their gradients are divided by the same
data-parallel size as every other's, since each ep rank's expert gradient already sums its group's tokens.

`parallelize` applies the splits in torchtitan's order, except that each block is compiled before it
is wrapped for activation checkpointing: tensor or expert parallel (`train/parallel/tensor.py`,
`train/parallel/expert.py`), compile,
activation checkpointing, then the data-parallel mode, to a Transformer or to one pipeline stage
module (`train/parallel/pipeline.py` cuts the model into stages first). Checkpointing traced into a
compiled tensor-parallel block fails in torch 2.13 (its graph saves the DTensors' DeviceMesh for
backward as if it were a tensor: "expected all tensors_saved_with_vc_check to be Tensors"); a
checkpoint around the compiled block recomputes the compiled forward, and trains as eager does.

Gradient accumulation: DDP modes skip the all-reduce on non-final micro-batches (`no_sync`). FSDP2
modes reduce-scatter after every micro-batch, so gradients stay sharded during accumulation: that is
the memory ZeRO-2/3 promise, paid for with one reduce-scatter per micro-batch.
On one process DDP and ZeRO-1 wrappers are skipped (they would only copy gradients).
"""

from __future__ import annotations

import contextlib
import logging
import sys

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.distributed.tensor import DTensor, Shard
from torch.nn.parallel import DistributedDataParallel

from pretrainkit.train.config import ParallelConfig
from pretrainkit.train.model.materialize import to_device
from pretrainkit.train.model.moe import GroupedExperts
from pretrainkit.train.parallel.expert import apply_expert_parallel
from pretrainkit.train.parallel.mesh import FSDP_MODES, ParallelMesh
from pretrainkit.train.parallel.tensor import apply_tensor_parallel


def apply_activation_checkpointing(model: nn.Module) -> None:
    """Recompute each block's activations in backward (non-reentrant); state-dict keys are unchanged."""
    for name, block in list(model.layers.named_children()):
        model.layers.register_module(name, checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT))


def apply_compile(model: nn.Module) -> None:
    """Compile block by block (in place, so parameter names stay), as FSDP2 wants it.

    Under tensor parallelism a whole block is the compiled region: the DTensor layouts its plan sets up
    inside the block are traced with it, and only plain tensors cross the boundary (the residual stream's
    sequence shards, RoPE tables, the mask). Measured with torch 2.13 on gloo: compiling the norms, the
    attention and the feed-forward apart, so that DTensors cross the boundaries, gives wrong gradients
    for their inputs (the embedding's 5% to 15% off eager's after one backward).
    """
    for block in model.layers.children():
        block.compile()


def apply_fsdp(model: nn.Module, mesh: ParallelMesh, reshard_after_forward: bool, bf16: bool) -> None:
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16 if bf16 else None, reduce_dtype=torch.float32)
    for block in model.layers.children():
        if mesh.layout.ep > 1:
            shard_experts(block, mesh, mp, reshard_after_forward)
        fully_shard(block, mesh=mesh.dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    fully_shard(model, mesh=mesh.dp_mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    # Averaging over every data-parallel group is requested explicitly, on every FSDP module (the
    # setting is not inherited): on gloo some torch versions summed (pytorch issue 162338). Sum
    # reductions then a division, because under HSDP the factor differs from the reduce-scatter
    # group's size and torch would pick PREMUL_SUM, which gloo lacks.
    # A group of one shard is the exception (experts when ep is the whole dp_shard; hsdp with dp_shard 1):
    # torch 2.13 skips its reduce-scatter but, under forced sum reduction, divides by the factor twice
    # (copying the gradient, and after); not forced, once, and no PREMUL_SUM reaches gloo (one rank sends nothing).
    layout = mesh.layout
    for module in model.modules():
        if isinstance(module, FSDPModule):
            shards = layout.dp_shard // layout.ep if isinstance(module, GroupedExperts) else layout.dp_shard
            module.set_gradient_divide_factor(float(mesh.dp_size))
            module.set_force_sum_reduction_for_comms(shards > 1)


def shard_experts(block: nn.Module, mesh: ParallelMesh, mp: MixedPrecisionPolicy, reshard_after_forward: bool) -> None:
    """FSDP over the ranks outside each ep group for a block's experts, already split by expert over ep
    (train/parallel/expert.py); the block's own FSDP then leaves them alone. Along the hidden dimension
    when there are fewer local experts than such ranks (as torchtitan shards them)."""
    for experts in [m for m in block.modules() if isinstance(m, GroupedExperts)]:
        local_experts = experts.w1.shape[0] // mesh.layout.ep
        dim = 1 if mesh.expert_dp_mesh.size() > local_experts else 0
        fully_shard(
            experts,
            mesh=mesh.expert_dp_mesh,
            mp_policy=mp,
            reshard_after_forward=reshard_after_forward,
            shard_placement_fn=lambda p, dim=dim: Shard(dim),
        )


def parallelize(
    model: nn.Module,
    parallel: ParallelConfig,
    mesh: ParallelMesh,
    device: torch.device,
    bf16: bool = False,
    activation_checkpointing: bool = False,
    compile: bool = False,
) -> nn.Module:
    """Move `model` to `device` and apply, in order: tensor or expert parallel, compile, checkpointing, the
    data-parallel mode.

    A model built on the meta device is split there and only then given (uninitialized) storage, so
    each process allocates its own shards alone; the caller initializes or loads it (materialize.py).
    """
    if not any(p.is_meta for p in model.parameters()):
        to_device(model, device)
    if mesh.layout.tp > 1:
        apply_tensor_parallel(model, mesh.tp_mesh)
    if mesh.layout.ep > 1:
        apply_expert_parallel(model, mesh.ep_mesh)
    if compile:
        apply_compile(model)
    if activation_checkpointing:
        apply_activation_checkpointing(model)
    if parallel.data in FSDP_MODES:
        apply_fsdp(model, mesh, reshard_after_forward=parallel.data != "zero2", bf16=bf16)
    to_device(model, device)  # a meta model gets its storage only now: for this process's shards
    if parallel.data not in FSDP_MODES and mesh.dp_size > 1:
        return DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    return model


def unwrap(model: nn.Module) -> nn.Module:
    """The plain `Transformer` under a DDP wrapper (FSDP2 modifies the module in place)."""
    return model.module if isinstance(model, DistributedDataParallel) else model


def sharded_optimizer(optimizer: torch.optim.Optimizer) -> torch.optim.Optimizer | None:
    """For ZeRO-1, the local AdamW holding this process's share of the state; else None."""
    if "torch.distributed.optim" not in sys.modules:  # never imported: cannot be a ZeRO optimizer
        return None
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return optimizer.optim if isinstance(optimizer, ZeroRedundancyOptimizer) else None


def reshard(model: nn.Module) -> None:
    """Free every FSDP2 module's gathered parameters, after a forward between a step's backward and its
    optimizer step: `zero2` keeps them gathered after a forward, the optimizer updates only the shards,
    and the next forward would run on the gathered, stale copies."""
    from torch.distributed.fsdp import FSDPModule

    for m in model.modules():
        if isinstance(m, FSDPModule):
            m.reshard()


def gradient_sync(model: nn.Module, enabled: bool) -> contextlib.AbstractContextManager:
    """Around one micro-batch's backward: DDP skips its all-reduce unless `enabled`."""
    if not enabled and isinstance(model, DistributedDataParallel):
        return model.no_sync()
    return contextlib.nullcontext()


def autocast_context(model: nn.Module, device: torch.device, bf16: bool) -> contextlib.AbstractContextManager:
    """bf16 autocast, except under FSDP2, whose mixed-precision policy already casts parameters."""
    if bf16 and not any(isinstance(m, FSDPModule) for m in model.modules()):
        return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class _NoSequentialReductionNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "sequential" not in str(record.msg)


@contextlib.contextmanager
def _quiet_sequential_reductions():
    """Without DTensor's notice that a norm partial over two mesh dimensions (FSDP x TP, the experts'
    dp_shard_mod_ep x ep) is reduced one dimension after the other: for one scalar per step that costs
    nothing worth a flattened mesh's extra process groups, and the notice printed once per process of
    every such run, on every rank, read as a problem to users."""
    logger, quiet = logging.getLogger("torch.distributed.tensor._redistribute"), _NoSequentialReductionNotice()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)


def clip_grad_norm(model: nn.Module, max_norm: float, pp_group: dist.ProcessGroup | None = None) -> torch.Tensor:
    """Global L2 norm of all gradients; scale them to `max_norm` if > 0.

    DTensor gradients (FSDP shards, tensor-parallel splits) give their full norm; with `pp_group` the
    squares of every pipeline stage's norm are summed, so every process clips by the same norm. DTensors
    of different meshes (under expert parallelism the experts' and the rest's) meet in no operation: each
    mesh's gradients give their norm, and those are combined.
    """
    by_mesh: dict[object, list[nn.Parameter]] = {}
    for p in model.parameters():
        if p.grad is not None:
            by_mesh.setdefault(p.grad.device_mesh if isinstance(p.grad, DTensor) else None, []).append(p)
    norms = []
    for params in by_mesh.values():
        with _quiet_sequential_reductions():
            norm = torch.nn.utils.get_total_norm([p.grad for p in params], 2.0, error_if_nonfinite=False)
            norms.append(norm.full_tensor() if isinstance(norm, DTensor) else norm)
    total = norms[0] if len(norms) == 1 else torch.linalg.vector_norm(torch.stack(norms), 2.0)
    if pp_group is not None:
        total = total**2
        dist.all_reduce(total, group=pp_group)
        total = total.sqrt()
    if max_norm > 0:
        for params in by_mesh.values():
            torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total
