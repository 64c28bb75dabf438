"""Consolidate a checkpoint into one safetensors file that loads on one process, without torch.distributed.

    export_model("runs/base", "model.safetensors")          # newest valid checkpoint of a run dir
    model, cfg = load_exported("model.safetensors")          # a plain Transformer, eval mode

The file holds every model tensor under its plain name (`layers.0.attention.wq.weight`; with tied
embeddings the output head is stored once, as `tok_embeddings.weight`) and, in the safetensors
metadata, `model_config` (the `ModelConfig` as JSON), `step`, `tokens` and `tokenizer_sha256` (when the
checkpoint records it). Exporting to a directory writes `model.safetensors` and `config.json` (the
same config) into it. Whatever the world size and
parallel mode of the run (DDP, ZeRO, FSDP2 shards), the DCP checkpoint is read as full tensors.
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save

from pretrainkit.errors import UserError
from pretrainkit.files import write_bytes_atomic, write_text_atomic
from train.checkpoint.checkpoints import META_FILE, Checkpoint, Checkpoints, verify
from train.model.llama import ModelConfig, Transformer

WEIGHTS_FILE = "model.safetensors"
TIED_KEY = "output.weight"
TOKENIZER_KEY = "tokenizer_sha256"


def find_checkpoint(path: Path) -> Checkpoint:
    if (path / META_FILE).exists():
        return verify(path)
    found = Checkpoints(path / "checkpoints", keep=1).latest_valid()
    if found is None:
        raise UserError(f"{path}: no valid checkpoint (expected a run dir with checkpoints/step-*/ or a checkpoint dir)")
    return found


def export_model(source: str | Path, out: str | Path, dtype: torch.dtype = torch.float32) -> tuple[Path, Checkpoint, ModelConfig]:
    ckpt = find_checkpoint(Path(source))
    if "model" not in ckpt.meta:
        raise UserError(f"{ckpt.path}/{META_FILE}: no model config recorded; cannot export")
    cfg = ModelConfig(**ckpt.meta["model"])
    model = Transformer(cfg)
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():  # "torch.distributed is ... uninitialized": loading alone is the point
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=ckpt.path, no_dist=True)
    tensors = {k: v.to(dtype).contiguous() for k, v in state["model"].items() if not (cfg.tie_embeddings and k == TIED_KEY)}
    config_json = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
    metadata = {"model_config": config_json, "step": str(ckpt.step), "tokens": str(ckpt.meta.get("tokens", 0))}
    if "tokenizer" in ckpt.meta.get("extra", {}):  # init_from checks it against the new run's mixture
        metadata[TOKENIZER_KEY] = ckpt.meta["extra"]["tokenizer"]
    out = Path(out)
    if out.suffix != ".safetensors":
        write_text_atomic(out / "config.json", config_json + "\n")
        out = out / WEIGHTS_FILE
    write_bytes_atomic(out, save(tensors, metadata=metadata))
    return out, ckpt, cfg


def load_exported(path: str | Path) -> tuple[Transformer, ModelConfig]:
    path = Path(path)
    if path.is_dir():
        path = path / WEIGHTS_FILE
    try:
        with safe_open(str(path), framework="pt") as f:
            cfg = ModelConfig(**json.loads(f.metadata()["model_config"]))
        tensors = load_file(str(path))
    except (OSError, KeyError, ValueError, SafetensorError) as e:
        raise UserError(f"{path}: not an exported pretrainkit model ({e})") from None
    if cfg.tie_embeddings:
        tensors[TIED_KEY] = tensors["tok_embeddings.weight"]
    model = Transformer(cfg)
    model.load_state_dict({k: v.float() for k, v in tensors.items()})
    return model.eval(), cfg
