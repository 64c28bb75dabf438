"""Tensor parallelism (Megatron-LM) with sequence parallelism, as DTensor plans over the plain model.

    apply_tensor_parallel(model, mesh.tp_mesh)   # a Transformer, or one pipeline stage of it

Per block: attention q/k/v and FFN gate/up (w1, w3) are split column-wise (each rank computes
n_heads/tp heads and ffn_hidden/tp hidden units), attention output and FFN down (w2) row-wise, so a
block costs one reduce-scatter after each half. Between those the residual stream and the RMSNorms
are split along the sequence (sequence parallelism): each rank normalizes seq_len/tp positions, and
the input of attention and of the FFN is all-gathered back to full sequences. The embedding is split
row-wise (over the vocabulary) and hands on sequence shards as plain tensors, its reduce-scatter
waited for (`EmbeddingParallel`: what a compiled block needs); the output head is split column-wise
and its logits are gathered, so the loss is computed from full logits on every tensor-parallel rank
(the same value on each). With tied embeddings both sides split the same table over the vocabulary,
and the tie is restored after the split. Grouped-query attention splits the kv heads the same way
(`check_model_split` insists that heads, kv heads and the FFN width divide by tp). Norms after
attention or the FFN (OLMo 2, Gemma 3) are sequence-parallel like those before; per-head q/k norms
(Qwen3, Gemma 3) normalize each rank's own heads, their weight replicated and its gradient summed
over the ranks (sequence parallelism along the head dimension). A q/k norm over the whole projection
(OLMo 2, `ProjectionNormParallel`) has its weight split by heads like the projection's rows, and its
mean square is taken over every rank's entries (DTensor all-reduces the partial sums).
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor import DTensor, Placement, Replicate, Shard, distribute_module, distribute_tensor
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)
from torch.distributed.tensor.parallel.style import ParallelStyle

from pretrainkit.train.model.llama import RMSNorm


class ProjectionNormParallel(ParallelStyle):
    """A norm over the last dimension of a column-parallel output (a whole q or k projection, split
    by heads): the weight split the same way, the input seen as the full tensor split along its last
    dimension, so the mean square spans every rank's entries; the output is this rank's part again."""

    def _apply(self, module: nn.Module, device_mesh: DeviceMesh) -> nn.Module:
        def split_weight(name: str, mod: nn.Module, mesh: DeviceMesh) -> None:
            for key, p in list(mod.named_parameters(recurse=False)):
                mod.register_parameter(key, nn.Parameter(distribute_tensor(p, mesh, [Shard(0)])))

        def as_dtensor(mod: nn.Module, inputs: tuple, mesh: DeviceMesh) -> tuple:
            x = inputs[0]
            return (DTensor.from_local(x, mesh, [Shard(x.ndim - 1)], run_check=False),)

        return distribute_module(module, device_mesh, split_weight, as_dtensor, lambda mod, out, mesh: out.to_local())


class EmbeddingParallel(RowwiseParallel):
    """The embedding split over the vocabulary (row-wise), handing the blocks a plain sequence shard.

    RowwiseParallel leaves its reduce-scatter pending: the local tensor it returns is an
    AsyncCollectiveTensor, waited for by the first operation that reads it. As the input of a compiled
    block it breaks torch 2.13's backward (measured on CPU/gloo): the gradient reaches the embedding's
    redistribution as a plain tensor, which fails ("'Tensor' object has no attribute '_local_tensor'"),
    and with the wrapper copied inside the compiled region the embedding's gradient is 70% off eager's.
    torch 2.13 already unwraps such inputs (pytorch pull 179849, for issue 184980), not enough for this
    case. Waiting here costs no overlap: the first block reads the result at once anyway.
    """

    @staticmethod
    def _prepare_output_fn(
        output_layouts: tuple[Placement, ...],
        use_local_output: bool,
        mod: nn.Module,
        outputs: DTensor,
        mesh: DeviceMesh,
    ) -> torch.Tensor:
        return outputs.redistribute(placements=output_layouts).to_local()  # not async_op: waited for here


def block_plan(block: nn.Module) -> dict:
    # A norm on an output hands a plain tensor to the residual add, which adds plain tensors.
    norms = {
        name: SequenceParallel(use_local_output=name.endswith("post_norm"))
        for name in ("attention_norm", "attention_post_norm", "ffn_norm", "ffn_post_norm")
        if isinstance(block.get_submodule(name), RMSNorm)
    }
    if isinstance(block.attention.q_norm, RMSNorm):
        for name in ("attention.q_norm", "attention.k_norm"):
            # Per head on [batch, seq, heads, head_dim], or over the [batch, seq, heads x head_dim] projection.
            per_head = block.attention.per_head_norm
            norms[name] = (
                SequenceParallel(sequence_dim=2, use_local_output=True) if per_head else ProjectionNormParallel()
            )
    return norms | {
        # attention(x, cos, sin, cache): only x is split
        "attention": PrepareModuleInput(
            input_layouts=(Shard(1), None, None, None),
            desired_input_layouts=(Replicate(), None, None, None),
            use_local_output=True,
        ),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "feed_forward": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),), use_local_output=True
        ),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w3": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
    }


def apply_tensor_parallel(model: nn.Module, tp_mesh: DeviceMesh) -> None:
    """Split `model` (a Transformer or a pipeline stage: embedding, norm and output may be None) over `tp_mesh`."""
    tp = tp_mesh.size()
    embeddings, output = getattr(model, "tok_embeddings", None), getattr(model, "output", None)
    outer = {}
    if embeddings is not None:
        outer["tok_embeddings"] = EmbeddingParallel(input_layouts=Replicate(), output_layouts=Shard(1))
    if getattr(model, "norm", None) is not None:
        outer["norm"] = SequenceParallel()
        outer["output"] = ColwiseParallel(input_layouts=Shard(1), output_layouts=Replicate())
    tied = embeddings is not None and output is not None and output.weight is embeddings.weight
    parallelize_module(model, tp_mesh, outer)
    if tied:  # each side wrapped the shared table in its own Parameter
        model.output.weight = model.tok_embeddings.weight
    if hasattr(model, "sequence_shards"):  # a pipeline stage: what it receives is sequence-sharded
        model.sequence_shards = tp
    for block in model.layers.children():
        parallelize_module(block, tp_mesh, block_plan(block))
        # The attention reshapes by its own head counts: each rank now holds 1/tp of them.
        block.attention.n_heads //= tp
        block.attention.kv_heads //= tp
