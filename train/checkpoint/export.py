"""`ptk export`: a checkpoint as one model that loads on one process, natively or for Hugging Face.

    export_model("runs/base", "model.safetensors")          # native: newest valid checkpoint of a run dir
    model, cfg = load_exported("model.safetensors")          # a plain Transformer, eval mode
    export_hf(load_model("runs/base", tokenizer="tok.json"), "hf-out/")   # transformers loads hf-out/

Native: every model tensor under its plain name (`layers.0.attention.wq.weight`; with tied
embeddings the output head is stored once, as `tok_embeddings.weight`) and, in the safetensors
metadata, `model_config` (the `ModelConfig` as JSON), `step`, `tokens` and `tokenizer_sha256` (when
the checkpoint records it). Exporting to a directory writes `model.safetensors` and NATIVE_CONFIG (the
same config; deliberately not `config.json`, which transformers would misread) into it. Whatever the
world size and parallel mode of the run (DDP, ZeRO, FSDP2 shards), the DCP checkpoint is read as full tensors.

Hugging Face: `config.json` of the model's family (the one it was imported from; `llama` from
scratch), the weights in HF names and row order as `model.safetensors`, or as
`model-0000k-of-0000n.safetensors` with `model.safetensors.index.json` above `max_shard_bytes`,
`generation_config.json`, and the tokenizer files (`hf_tokenizer.py`: `tokenizer.json` as it is, and a
`tokenizer_config.json` that makes AutoTokenizer use it unchanged for every family). The directory is
written under a temporary name and renamed (keeping `ptk export`'s marker and lock: `output_folders.publish`).
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

import torch
import torch.distributed.checkpoint as dcp
from safetensors import SafetensorError
from safetensors.torch import load_file, safe_open, save

from pretrainkit.errors import UserError
from pretrainkit.files import write_bytes_atomic, write_text_atomic
from pretrainkit.output_folders import publish
from pretrainkit.train.checkpoint.checkpoints import Checkpoint, Checkpoints, verify
from pretrainkit.train.checkpoint.hf_tokenizer import write_hf_tokenizer
from pretrainkit.train.checkpoint.loop_state import LoopState
from pretrainkit.train.model.hf_adapter import CONFIG_FILE, INDEX_FILE, hf_config, to_hf_state_dict
from pretrainkit.train.model.llama import ModelConfig, Transformer
from pretrainkit.train.rundir.names import META_FILE
from pretrainkit.train.rundir.run_dir import RunDir

if TYPE_CHECKING:
    from pretrainkit.train.checkpoint.load_model import LoadedModel

WEIGHTS_FILE = "model.safetensors"
NATIVE_CONFIG = "pretrainkit_model.json"
TIED_KEY = "output.weight"
TOKENIZER_KEY = "tokenizer_sha256"
DEFAULT_MAX_SHARD_BYTES = 5 * 10**9
DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


def find_checkpoint(path: Path) -> Checkpoint:
    if (path / META_FILE).exists():
        return verify(path)
    found = Checkpoints(RunDir(path).checkpoints, keep=1).latest_valid()
    if found is None:
        raise UserError(
            f"{path}: no valid checkpoint (expected a run dir with checkpoints/step-*/ or a checkpoint dir)"
        )
    return found


def checkpoint_model(ckpt: Checkpoint) -> tuple[Transformer, ModelConfig]:
    """The checkpoint's model as a plain Transformer on one process (full tensors), eval mode."""
    if "model" not in ckpt.meta:
        raise UserError(f"{ckpt.path}/{META_FILE}: no model config recorded; cannot load the model alone")
    cfg = ModelConfig(**ckpt.meta["model"])
    model = Transformer(cfg)
    state = {"model": model.state_dict()}
    with warnings.catch_warnings():  # "torch.distributed is ... uninitialized": loading alone is the point
        warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=ckpt.path, no_dist=True)
    model.load_state_dict(state["model"])
    return model.eval(), cfg


def export_model(
    source: str | Path, out: str | Path, dtype: torch.dtype = torch.float32
) -> tuple[Path, Checkpoint, ModelConfig]:
    ckpt = find_checkpoint(Path(source))
    model, cfg = checkpoint_model(ckpt)
    tensors = {
        k: v.to(dtype).contiguous() for k, v in model.state_dict().items() if not (cfg.tie_embeddings and k == TIED_KEY)
    }
    config_json = json.dumps(dataclasses.asdict(cfg), sort_keys=True)
    metadata = {"model_config": config_json, "step": str(ckpt.step), "tokens": str(ckpt.meta.get("tokens", 0))}
    state = LoopState.from_meta(ckpt.meta, ckpt.path / META_FILE)
    if state is not None and state.tokenizer_sha256 is not None:  # init_from checks it against the new run's mixture
        metadata[TOKENIZER_KEY] = state.tokenizer_sha256
    out = Path(out)
    if out.suffix != ".safetensors":
        write_text_atomic(out / NATIVE_CONFIG, config_json + "\n")
        out = out / WEIGHTS_FILE
    write_bytes_atomic(out, with_sorted_header(save(tensors, metadata=metadata)))
    return out, ckpt, cfg


def with_sorted_header(blob: bytes) -> bytes:
    """A safetensors file's bytes with its header's keys in sorted order: safetensors writes `__metadata__`
    in the order of a Rust HashMap, which differs from process to process, so the same export would
    not be the same bytes. Only the order changes, so the header keeps its length and every offset."""
    size = int.from_bytes(blob[:8], "little")
    text = blob[8 : 8 + size].decode("utf-8").rstrip(" ")
    ordered = json.dumps(json.loads(text), separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    if len(ordered.encode("utf-8")) != len(text.encode("utf-8")):
        raise AssertionError("a safetensors header changed its length when its keys were sorted")
    return blob[:8] + ordered.encode("utf-8").ljust(size, b" ") + blob[8 + size :]


def load_exported(path: str | Path) -> tuple[Transformer, ModelConfig]:
    path = Path(path)
    if path.is_dir():
        path = path / WEIGHTS_FILE
    try:
        with safe_open(str(path), framework="pt") as f:
            cfg = ModelConfig(**json.loads(f.metadata()["model_config"]))
        tensors = load_file(str(path))
    except (OSError, KeyError, ValueError, TypeError, SafetensorError) as e:
        raise UserError(f"{path}: not an exported pretrainkit model ({e})") from None
    if cfg.tie_embeddings:
        tensors[TIED_KEY] = tensors["tok_embeddings.weight"]
    model = Transformer(cfg)
    model.load_state_dict({k: v.float() for k, v in tensors.items()})
    return model.eval(), cfg


def export_hf(
    loaded: LoadedModel,
    out: str | Path,
    dtype: torch.dtype = torch.float32,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
) -> list[Path]:
    """Write `loaded` (a model with its tokenizer) as a Hugging Face directory; returns the weight files."""
    if loaded.tokenizer is None:
        raise UserError(
            f"{loaded.path}: the model's tokenizer is not known; "
            "name it with --tokenizer (a tokenizer.json or an HF directory)"
        )
    out, cfg, tok = Path(out), loaded.config, loaded.tokenizer
    tmp = out.with_name(f".tmp-{out.name}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        tensors = {k: v.to(dtype) for k, v in to_hf_state_dict(loaded.model.state_dict(), cfg).items()}
        shards = _split(tensors, max_shard_bytes)
        names = (
            [WEIGHTS_FILE]
            if len(shards) == 1
            else [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]
        )
        for name, shard in zip(names, shards):
            write_bytes_atomic(tmp / name, with_sorted_header(save(shard, metadata={"format": "pt"})))
        if len(shards) > 1:
            index = {
                "metadata": {"total_size": sum(t.numel() * t.element_size() for t in tensors.values())},
                "weight_map": {k: name for name, shard in zip(names, shards) for k in sorted(shard)},
            }
            write_text_atomic(tmp / INDEX_FILE, json.dumps(index, indent=2, sort_keys=True) + "\n")
        bos = None if tok.bos_token is None else tok.tokenizer.token_to_id(tok.bos_token)
        config = hf_config(cfg, bos_id=bos, eos_id=tok.eos_id, dtype=DTYPE_NAMES[dtype])
        write_text_atomic(tmp / CONFIG_FILE, json.dumps(config, indent=2, sort_keys=True) + "\n")
        generation = {"bos_token_id": bos, "eos_token_id": tok.eos_id, "do_sample": False}
        write_text_atomic(tmp / "generation_config.json", json.dumps(generation, indent=2, sort_keys=True) + "\n")
        write_hf_tokenizer(tok, tmp, cfg.max_seq_len)
    except BaseException:  # a full disk, say: the half-built folder goes, the previous export stays
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    publish(tmp, out)
    return [out / name for name in names]


def _split(tensors: dict[str, torch.Tensor], max_bytes: int) -> list[dict[str, torch.Tensor]]:
    """Tensors in name order, a new shard whenever the next would take the current one past max_bytes."""
    shards: list[dict[str, torch.Tensor]] = [{}]
    size = 0
    for name in sorted(tensors):
        n = tensors[name].numel() * tensors[name].element_size()
        if shards[-1] and size + n > max_bytes:
            shards.append({})
            size = 0
        shards[-1][name] = tensors[name].contiguous()
        size += n
    return shards
