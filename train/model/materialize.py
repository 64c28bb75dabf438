"""Models built on the meta device and materialized where they run, already sharded.

    with torch.device("meta"):
        model = Transformer(cfg)                     # shapes only, no memory
    model = parallelize(model, cfg.parallel, mesh, device)  # split on meta; to_empty allocates local shards
    init_weights(model, cfg, seed)                   # each local shard gets its part of initial_value
    load_hf_weights(model, cfg, HFWeights("llama/")) # or: each process reads only its shards' bytes

Both fill every parameter region by region: a plain tensor is one region, a DTensor (FSDP2, tensor
parallel) is the part of the full tensor this process holds. Initial values are a function of
(seed, parameter name) only, so any world size and layout gives the same model as one process.
No process ever holds the full model: initialization draws only the rows a process holds, and a
load reads only the bytes of its regions (whole heads of q/k rows, for the RoPE permutation).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn
from torch.distributed.tensor import DTensor
from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

from pretrainkit.errors import UserError
from pretrainkit.train.model.hf_adapter import (
    CONFIG_FILE,
    HFWeights,
    hf_names,
    is_stacked_experts,
    model_config_from_hf,
    read_hf_config,
)
from pretrainkit.train.model.llama import ModelConfig, Transformer, fill_initial, initial_value

# Wrappers that insert a level into parameter names: DDP, activation checkpointing, torch.compile.
_WRAPPER_LEVELS = {"module", "_checkpoint_wrapped_module", "_orig_mod"}

# (plain parameter name, region of the full tensor, full shape) -> the values of that region
RegionValues = Callable[[str, tuple[slice, ...], torch.Size], torch.Tensor]


def plain_name(name: str) -> str:
    """The Transformer's own name of a parameter of a wrapped model (`module.layers.0...` -> `layers.0...`)."""
    return ".".join(part for part in name.split(".") if part not in _WRAPPER_LEVELS)


def local_region(p: torch.Tensor) -> tuple[slice, ...]:
    """The part of the full tensor this process holds."""
    if not isinstance(p, DTensor):
        return tuple(slice(0, n) for n in p.shape)
    shape, offset = compute_local_shape_and_global_offset(p.shape, p.device_mesh, p.placements)
    return tuple(slice(o, o + n) for o, n in zip(offset, shape))


def to_device(model: nn.Module, device: torch.device) -> None:
    """`model.to(device)`; a model on the meta device gets uninitialized storage there instead (to be
    filled by init_weights or a load), with tied parameters still tied (`to_empty` alone unties them)."""
    if not any(p.is_meta for p in model.parameters()):
        model.to(device)
        return
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    model.to_empty(device=device)
    for first, *others in (group for group in names.values() if len(group) > 1):
        for name in others:
            owner, _, attr = name.rpartition(".")
            setattr(model.get_submodule(owner), attr, model.get_parameter(first))


@torch.no_grad()
def fill_parameters(model: nn.Module, values: RegionValues) -> None:
    for name, p in model.named_parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        if local.numel():
            local.copy_(values(plain_name(name), local_region(p), p.shape))


@torch.no_grad()
def init_weights(model: nn.Module, cfg: ModelConfig, seed: int) -> None:
    """Every parameter (plain or sharded) to its part of the initial value (llama.fill_initial),
    drawing only the rows it holds, into place when it holds whole rows."""
    for name, p in model.named_parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        if not local.numel():
            continue
        rows, *cols = local_region(p)
        if local.is_contiguous() and all(c.stop - c.start == n for c, n in zip(cols, p.shape[1:])):
            fill_initial(cfg, plain_name(name), p.shape, seed, rows, local)
        else:  # a column shard (tensor parallel): the rows whole, then its columns
            local.copy_(initial_value(cfg, plain_name(name), p.shape, seed, rows)[(slice(None), *cols)])


def load_hf_weights(model: nn.Module, cfg: ModelConfig, weights: HFWeights) -> None:
    """Each process reads the regions it holds from a Hugging Face directory; missing, unexpected or
    misshapen tensors are a UserError naming the directory and the tensor, before anything is read.
    `model` may be one pipeline stage: the directory is checked against the whole model."""
    with torch.device("meta"):
        everything = {hf for n, _ in Transformer(cfg).named_parameters() for hf in hf_names(n, cfg)}
    found = weights.names()
    missing = sorted(everything - found)
    # A tied head may be saved too (some exporters do); it is the embedding table then.
    unexpected = sorted(found - everything - ({"lm_head.weight"} if cfg.tie_embeddings else set()))
    if missing or unexpected:
        what = (
            (f"missing {', '.join(missing[:3])}" if missing else "")
            + ("; " if missing and unexpected else "")
            + (f"unexpected {', '.join(unexpected[:3])}" if unexpected else "")
        )
        raise UserError(f"{weights.dir}: weights do not match its config.json: {what}")
    for name, p in model.named_parameters():
        plain = plain_name(name)
        # Stacked experts: each expert's tensor is one row of the parameter.
        shape = list(p.shape[1:]) if is_stacked_experts(plain) else list(p.shape)
        for hf in hf_names(plain, cfg):
            if weights.shape_of(hf) != shape:
                raise UserError(
                    f"{weights.dir}: tensor {hf} has shape {weights.shape_of(hf)}, config.json implies {shape}"
                )
    fill_parameters(model, lambda name, region, shape: weights.read_native(name, cfg, region))


def load_hf_model(directory: str | Path, device: torch.device | str = "cpu") -> tuple[Transformer, ModelConfig]:
    """A Hugging Face model directory as a plain Transformer on one process, in eval mode."""
    cfg = model_config_from_hf(read_hf_config(directory), f"{Path(directory) / CONFIG_FILE}")
    weights = HFWeights(directory)
    with torch.device("meta"):
        model = Transformer(cfg)
    to_device(model, torch.device(device))
    load_hf_weights(model, cfg, weights)
    return model.eval(), cfg
