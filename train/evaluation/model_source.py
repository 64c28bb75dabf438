"""The model `ptk eval` scores, on one process: a run dir, a checkpoint dir or a `ptk export`.

    loaded = load_for_eval("runs/base", tokenizer="tokenizer.json")
    loaded.model, loaded.config, loaded.tokenizer, loaded.tokenizer_sha256, loaded.description

The tokenizer given must be the one the model was trained with when that is recorded (sha256).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from dataprep.tokenizer import LoadedTokenizer, load_tokenizer
from pretrainkit.errors import UserError
from train.model.llama import ModelConfig, Transformer


@dataclass
class EvalModel:
    model: Transformer
    config: ModelConfig
    tokenizer: LoadedTokenizer | None
    tokenizer_sha256: str | None  # what the model records, if anything
    description: str


def load_for_eval(path: str, tokenizer: str | None) -> EvalModel:
    from train.checkpoint.export import export_model, load_exported
    from train.checkpoint.init_from import find_init_source

    source = find_init_source(path)
    if source.checkpoint is None:
        model, cfg = load_exported(source.path)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            out, _, _ = export_model(source.path, Path(tmp) / "model.safetensors")
            model, cfg = load_exported(out)
    tok = load_tokenizer(tokenizer) if tokenizer else None
    if tok is not None and source.tokenizer_sha256 is not None and tok.sha256 != source.tokenizer_sha256:
        raise UserError(f"{tokenizer}: not the tokenizer {source.path} was trained with (sha256 {tok.sha256[:12]}, "
                        f"recorded {source.tokenizer_sha256[:12]})")  # fmt: skip
    kind = "checkpoint" if source.checkpoint is not None else "export"
    desc = f"{kind} {source.path} (step {source.step}, {cfg.num_params() / 1e6:.2f}M parameters)"
    return EvalModel(model.eval(), cfg, tok, source.tokenizer_sha256, desc)
