"""One model on one process from anything the toolkit can load, with its tokenizer: what `ptk generate`,
`ptk eval` and `ptk export --format hf` start from.

    loaded = load_model("runs/base")                       # run dir: its newest valid checkpoint
    loaded = load_model("runs/base/checkpoints/step-0000200", tokenizer="tok.json")
    loaded = load_model("model.safetensors")                # a native `ptk export` (file or directory)
    loaded = load_model("Llama-3.2-1B/")                     # a Hugging Face directory (or a --format hf export)
    loaded.model, loaded.config, loaded.tokenizer, loaded.kind, loaded.step

The model is a plain Transformer in eval mode (fp32). The tokenizer is the one given, checked
against the sha256 the checkpoint or export recorded (a mismatch is a UserError naming both); else,
for a Hugging Face directory, its own `tokenizer.json`; else, for a run started with `init_from` a
Hugging Face directory, that directory's tokenizer when it is the recorded one; else None (the
caller says that `--tokenizer` is needed, if it needs one).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from safetensors import safe_open

from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file
from pretrainkit.shards.tokenizer import LoadedTokenizer, load_tokenizer
from pretrainkit.train.checkpoint.export import (
    TOKENIZER_KEY,
    WEIGHTS_FILE,
    checkpoint_model,
    find_checkpoint,
    load_exported,
)
from pretrainkit.train.checkpoint.loop_state import LoopState
from pretrainkit.train.model.hf_adapter import is_hf_model_dir
from pretrainkit.train.model.llama import ModelConfig, Transformer
from pretrainkit.train.model.materialize import load_hf_model
from pretrainkit.train.rundir.names import META_FILE
from pretrainkit.train.rundir.run_dir import RunDir

KINDS = ("checkpoint", "native export", "hf")


@dataclass
class LoadedModel:
    model: Transformer
    config: ModelConfig
    tokenizer: LoadedTokenizer | None
    kind: str  # one of KINDS
    path: Path  # the checkpoint directory, exported file or HF directory read
    step: int  # training steps behind the weights (0 for an HF directory)
    tokenizer_sha256: str | None  # the tokenizer the model records (an HF directory: its tokenizer.json's)


def load_model(path: str | Path, tokenizer: str | Path | None = None, device: str = "cpu") -> LoadedModel:
    path = Path(path)
    if not path.exists():
        raise UserError(
            f"{path}: does not exist (expected a run dir, a checkpoint dir, a ptk export or an HF model directory)"
        )
    if is_hf_model_dir(path):
        model, cfg = load_hf_model(path, device)
        own = path / "tokenizer.json"
        recorded = sha256_file(own) if own.is_file() else None
        tok = _checked_tokenizer(tokenizer or (path if own.is_file() else None), recorded, path)
        return LoadedModel(model, cfg, tok, "hf", path, 0, recorded)
    exported = path if path.suffix == ".safetensors" else path / WEIGHTS_FILE
    if exported.is_file() and not RunDir(path).checkpoints.is_dir() and not (path / META_FILE).is_file():
        model, cfg = load_exported(exported)
        with safe_open(str(exported), framework="pt") as f:
            meta = f.metadata()
        recorded = meta.get(TOKENIZER_KEY)
        tok = _checked_tokenizer(tokenizer, recorded, exported)
        return LoadedModel(model.to(device), cfg, tok, "native export", exported, int(meta.get("step", 0)), recorded)
    ckpt = find_checkpoint(path)
    model, cfg = checkpoint_model(ckpt)
    state = LoopState.from_meta(ckpt.meta, ckpt.path / META_FILE)
    recorded = state and state.tokenizer_sha256
    if tokenizer is None:
        tokenizer = _init_from_tokenizer(ckpt.meta.get("config", {}).get("init_from"), recorded)
    tok = _checked_tokenizer(tokenizer, recorded, ckpt.path)
    return LoadedModel(model.to(device), cfg, tok, "checkpoint", ckpt.path, ckpt.step, recorded)


def _checked_tokenizer(tokenizer: str | Path | None, recorded: str | None, where: Path) -> LoadedTokenizer | None:
    if tokenizer is None:
        return None
    tok = load_tokenizer(tokenizer)
    if recorded is not None and tok.sha256 != recorded:
        raise UserError(
            f"{tokenizer}: not the tokenizer {where} was trained with (sha256 {tok.sha256[:12]}, "
            f"recorded {recorded[:12]})"
        )
    return tok


def _init_from_tokenizer(init_from: str | None, recorded: str | None) -> Path | None:
    """The tokenizer of the HF directory a run was initialized from, if it is the one the run recorded."""
    if init_from is None or recorded is None or not is_hf_model_dir(init_from):
        return None
    own = Path(init_from) / "tokenizer.json"
    return Path(init_from) if own.is_file() and sha256_file(own) == recorded else None


def describe(loaded: LoadedModel) -> str:
    """One line: what was loaded."""
    cfg = loaded.config
    tok = "no tokenizer" if loaded.tokenizer is None else f"tokenizer {loaded.tokenizer.path}"
    return (
        f"{loaded.kind} {loaded.path} ({cfg.family}, {cfg.num_params() / 1e6:.2f}M parameters, "
        f"step {loaded.step}, {tok})"
    )
