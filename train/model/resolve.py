"""The model a training config asks for: its `model:` section, or the Hugging Face model `init_from` names.

    mcfg = model_config(cfg, vocab_size=mix.tokenizer.vocab_size, where="run.yaml")

Without an HF `init_from`, the shape is the `model:` section, its unset keys ModelConfig's defaults, the
mixture's vocabulary and `data.seq_len` as max_seq_len. With `init_from: DIR` naming a Hugging Face
model directory, the shape is DIR/config.json's; a key the section gives anyway must agree with it, else a
UserError names both values, except `router_aux_loss_coef`, the training objective's weight of a mixture of
experts' load-balancing loss rather than part of the model, which the section may set. The model's vocabulary
must cover the mixture's (HF models often pad their embedding table), and `data.seq_len` must fit the model's
context.
"""

from __future__ import annotations

from dataclasses import fields, replace
from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.train.config import ModelSection, TrainConfig
from pretrainkit.train.model.hf_adapter import CONFIG_FILE, is_hf_model_dir, model_config_from_hf, read_hf_config
from pretrainkit.train.model.llama import ModelConfig

# Section key -> the ModelConfig property it decides (compared after the HF config resolved it).
_COMPARED_AS = {"n_kv_heads": "kv_heads", "ffn_hidden": "ffn_hidden_size"}
OBJECTIVE_KEYS = ("router_aux_loss_coef",)  # the section's value replaces config.json's


def model_config(cfg: TrainConfig, vocab_size: int, where: str = "config") -> ModelConfig:
    if cfg.init_from is not None and is_hf_model_dir(cfg.init_from):
        return _from_hf(cfg, vocab_size, where)
    # An unset key (None) is left out, so that ModelConfig's default decides it: the one place defaults live.
    values = {
        f.name: getattr(cfg.model, f.name) for f in fields(ModelSection) if getattr(cfg.model, f.name) is not None
    }
    try:
        return ModelConfig(vocab_size=vocab_size, max_seq_len=cfg.data.seq_len, **values)
    except ValueError as e:
        raise UserError(f"{where}: model.{e}") from None


def _from_hf(cfg: TrainConfig, vocab_size: int, where: str) -> ModelConfig:
    config = Path(cfg.init_from) / CONFIG_FILE
    model = model_config_from_hf(read_hf_config(cfg.init_from), str(config))
    objective = {k: getattr(cfg.model, k) for k in OBJECTIVE_KEYS if getattr(cfg.model, k) is not None}
    try:
        model = replace(model, **objective)
    except ValueError as e:
        raise UserError(f"{where}: model.{e}") from None
    for f in fields(ModelSection):
        mine = getattr(cfg.model, f.name)
        theirs = getattr(model, _COMPARED_AS.get(f.name, f.name))
        if mine is not None and mine != theirs:
            raise UserError(
                f"{where}: model.{f.name}: {mine!r} disagrees with init_from {config} ({theirs!r}); "
                "the model's shape comes from there, so leave the key out or make it match"
            )
    if vocab_size > model.vocab_size:
        raise UserError(
            f"{where}: the mixture's tokenizer has {vocab_size} tokens, more than the vocab_size "
            f"{model.vocab_size} of init_from {config}"
        )
    if cfg.data.seq_len > model.max_seq_len:
        raise UserError(
            f"{where}: data.seq_len: {cfg.data.seq_len} exceeds the context of init_from {config} "
            f"({model.max_seq_len} positions)"
        )
    return model
