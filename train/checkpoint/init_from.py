"""`init_from`: a fresh run that starts from another run's weights (continued pretraining).

    initialize_from(
        cfg, RunDir(cfg.run_dir), model_cfg, model, optimizer, mix.tokenizer, where="run.yaml", is_main=True
    )  # as ptk train does
    # which is:
    source = find_init_source("runs/base")       # a run dir, a checkpoint dir, a `ptk export` file or an HF model dir
    check_compatible(source, model_cfg, mix.tokenizer, where="run.yaml")
    initialize(model, optimizer, source, with_optimizer=cfg.init_optimizer)

Only the model's weights are loaded: the new run's step, learning-rate schedule (its own warmup and
decay, the re-warm and re-decay of Ibrahim et al. 2024), data order and RNG start fresh. With
`optimizer=True` (`init_optimizer: true`) AdamW's moments are loaded too, from a checkpoint only;
the hyperparameters (weight decay, betas, eps) stay this run's. Before anything is loaded the
source's model shape and tokenizer are compared with this run's; a difference is a `UserError`
naming both sides. A run that resumes from its own checkpoint never reads `init_from` again.

A Hugging Face model directory (a `config.json` with a `model_type`) gives the model its shape
(train/model/resolve.py) and its weights: each process reads only the slices of the safetensors
files that it holds (train/model/materialize.py). Its `tokenizer.json` must give the mixture's ids:
the same vocabulary fingerprint (a re-serialized file is the same tokenizer), or the same sha256
when the mixture's manifests predate the fingerprint (shards/manifest.py `tokenizer_difference`).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict, set_model_state_dict

from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file, write_text_atomic
from pretrainkit.shards.manifest import TokenizerInfo, tokenizer_difference
from pretrainkit.shards.tokenizer import load_tokenizer
from pretrainkit.train.checkpoint.checkpoints import Checkpoint, load_states
from pretrainkit.train.checkpoint.export import TOKENIZER_KEY, WEIGHTS_FILE, find_checkpoint, load_exported
from pretrainkit.train.checkpoint.loop_state import LoopState
from pretrainkit.train.checkpoint.states import ModelState, OptimizerState
from pretrainkit.train.config import TrainConfig
from pretrainkit.train.model.hf_adapter import (
    CONFIG_FILE,
    HFWeights,
    is_hf_model_dir,
    model_config_from_hf,
    read_hf_config,
)
from pretrainkit.train.model.llama import ModelConfig
from pretrainkit.train.model.materialize import load_hf_weights
from pretrainkit.train.rundir.names import META_FILE
from pretrainkit.train.rundir.run_dir import RunDir

# What decides the parameter tensors' shapes and meaning (the family: which norms and how they
# multiply); max_seq_len (RoPE tables are derived, never stored), rope_theta and the attention
# window may change in a continued run.
SHAPE_FIELDS = (
    "family",
    "vocab_size",
    "d_model",
    "n_layers",
    "n_heads",
    "kv_heads",
    "head_dim",
    "ffn_hidden_size",
    "tie_embeddings",
    "qkv_bias",
    "n_experts",
    "moe_ffn_size",
    "mlp_only_layers",
    "decoder_sparse_step",
)
HF_TOKENIZER = "tokenizer.json"


@dataclass(frozen=True)
class InitSource:
    path: Path  # the checkpoint directory, the exported file or the HF directory actually read
    model: ModelConfig
    tokenizer_sha256: str | None  # None when the source predates recording it
    checkpoint: Checkpoint | None  # None for an exported model file or an HF directory
    step: int
    hf: bool = False  # a Hugging Face model directory

    def hf_tokenizer(self, eos_token: str) -> TokenizerInfo:
        """The HF directory's tokenizer, its EOS read as the mixture's `eos_token` (which it must hold)."""
        return load_tokenizer(self.path / HF_TOKENIZER, eos_token).info


def find_init_source(path: str | Path) -> InitSource:
    """What `init_from: PATH` names: a Hugging Face model directory, an exported model (`.safetensors`,
    or a directory holding one without checkpoints), else a run directory's newest valid checkpoint
    or one checkpoint directory."""
    path = Path(path)
    if is_hf_model_dir(path):
        model = model_config_from_hf(read_hf_config(path), str(path / CONFIG_FILE))
        tokenizer = path / HF_TOKENIZER
        if not tokenizer.is_file():
            raise UserError(
                f"init_from: {path}: no {HF_TOKENIZER}, so the model's tokenizer cannot be checked "
                "against the mixture's (tokenize with a tokenizer.json and put it there)"
            )
        return InitSource(path, model, sha256_file(tokenizer), None, 0, hf=True)
    exported = path if path.suffix == ".safetensors" else path / WEIGHTS_FILE
    if exported.is_file() and not RunDir(path).checkpoints.is_dir():
        try:
            with safe_open(str(exported), framework="pt") as f:
                meta = f.metadata() or {}
            model = ModelConfig(**json.loads(meta["model_config"]))
        except (OSError, KeyError, ValueError, TypeError, SafetensorError) as e:
            raise UserError(f"init_from: {exported}: not an exported pretrainkit model ({e})") from None
        return InitSource(exported, model, meta.get(TOKENIZER_KEY), None, int(meta.get("step", 0)))
    if not path.exists():
        raise UserError(
            f"init_from: {path} does not exist (expected a run dir, a checkpoint dir or a .safetensors file)"
        )
    try:
        ckpt = find_checkpoint(path)
    except UserError as e:
        raise UserError(f"init_from: {e}") from None
    if "model" not in ckpt.meta:
        raise UserError(f"init_from: {ckpt.path}: meta.json records no model config")
    model = ModelConfig(**ckpt.meta["model"])
    state = LoopState.from_meta(ckpt.meta, ckpt.path / META_FILE)
    return InitSource(ckpt.path, model, state and state.tokenizer_sha256, ckpt, ckpt.step)


def check_compatible(source: InitSource, model: ModelConfig, tokenizer: TokenizerInfo, where: str) -> None:
    """UserError naming both sides when the source's model shape or tokenizer differs from this run's."""
    tokenizer_sha256 = tokenizer.sha256
    if source.hf:
        try:
            theirs = source.hf_tokenizer(tokenizer.eos_token)
        except UserError as e:  # the mixture's EOS is not in it, or the file does not load
            raise UserError(
                f"{where}: init_from: tokenizer mismatch with this run's mixture (sha256 {tokenizer_sha256[:12]}): {e}"
            ) from None
        diff = tokenizer_difference(theirs, tokenizer)
        if diff is not None:
            raise UserError(
                f"{where}: init_from: tokenizer mismatch: {source.path / HF_TOKENIZER} (sha256 "
                f"{source.tokenizer_sha256[:12]}) is not the tokenizer of this run's mixture (sha256 "
                f"{tokenizer_sha256[:12]}): {diff}; tokenize the data with --tokenizer {source.path}"
            )
    elif source.tokenizer_sha256 is not None and source.tokenizer_sha256 != tokenizer_sha256:
        raise UserError(
            f"{where}: init_from: tokenizer mismatch: {source.path} was trained with tokenizer sha256 "
            f"{source.tokenizer_sha256[:12]} (vocab {source.model.vocab_size}), this run's mixture uses "
            f"{tokenizer_sha256[:12]} (vocab {model.vocab_size})"
        )
    diffs = [
        f"{k} {getattr(source.model, k)} vs {getattr(model, k)}"
        for k in SHAPE_FIELDS
        if getattr(source.model, k) != getattr(model, k)
    ]
    if diffs:
        raise UserError(f"{where}: init_from: model shape mismatch, {source.path} vs this run: {'; '.join(diffs)}")


def initialize(model: nn.Module, optimizer: torch.optim.Optimizer, source: InitSource, with_optimizer: bool) -> None:
    """Load the source's weights (and, `with_optimizer`, AdamW's state) into a fresh model and its optimizer
    (collective)."""
    if source.hf:
        if with_optimizer:
            raise UserError(f"init_optimizer: {source.path} is a Hugging Face model and holds no optimizer state")
        load_hf_weights(model, source.model, HFWeights(source.path))
        return
    if source.checkpoint is None:
        if with_optimizer:
            raise UserError(f"init_optimizer: {source.path} is an exported model and holds no optimizer state")
        full, _ = load_exported(source.path)
        # Under pipeline parallelism this process holds some stages: it takes their tensors.
        own = get_model_state_dict(model).keys()
        weights = {k: v for k, v in full.state_dict().items() if k in own}
        set_model_state_dict(model, weights, options=StateDictOptions(full_state_dict=True))
        return
    if not with_optimizer:  # the model alone: the optimizer's state dict would give a fresh AdamW a first (empty) step
        load_states(source.checkpoint, {"model": ModelState(model)})
        return
    # Loading the optimizer state would also bring back the base run's hyperparameters.
    groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
    load_states(source.checkpoint, {"model": ModelState(model), "optim": OptimizerState(model, optimizer)})
    for group, own in zip(optimizer.param_groups, groups):
        group.update(own)


def initialize_from(
    cfg: TrainConfig,
    run: RunDir,
    model_cfg: ModelConfig,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    tokenizer: TokenizerInfo,
    where: str,
    is_main: bool,
) -> None:
    """A fresh run with `init_from`: the base weights (optimizer too with `init_optimizer`), checked first."""
    source = find_init_source(cfg.init_from)
    check_compatible(source, model_cfg, tokenizer, where)
    initialize(model, optimizer, source, with_optimizer=cfg.init_optimizer)
    if is_main:
        # Where this run starts on its base run's axes: `ptk report` draws it from there.
        tokens = source.checkpoint.meta.get("tokens") if source.checkpoint is not None else None
        base = {"path": str(source.path), "step": source.step, "tokens": tokens}
        write_text_atomic(run.base_file, json.dumps(base, indent=2) + "\n")
        what = "weights and optimizer state" if cfg.init_optimizer else "weights; optimizer and schedule start fresh"
        print(f"ptk train: initialized from {source.path} (step {source.step}; {what})", file=sys.stderr)
