"""demo/hf_stand_in.py: a random Hugging Face model with a ptk tokenizer, which init_from reads as its family."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pretrainkit.shards.tokenizer import train_tokenizer
from pretrainkit.train.model.hf_adapter import model_config_from_hf

SCRIPT = Path(__file__).resolve().parents[3] / "demo" / "hf_stand_in.py"


@pytest.mark.parametrize(("model_type", "family"), [("qwen3", "qwen3"), ("olmo2", "olmo2")])
def test_the_stand_in_is_a_model_of_its_family_with_the_tokenizer(tmp_path, model_type, family):
    texts = [p.read_text(errors="replace") for p in sorted(Path(json.__file__).parent.glob("*.py"))]
    train_tokenizer(texts, 400).save(str(tmp_path / "tok.json"))
    out = tmp_path / "base"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), model_type, "--tokenizer", str(tmp_path / "tok.json"), "-o", str(out)],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    config = json.loads((out / "config.json").read_text())
    cfg = model_config_from_hf(config, str(out / "config.json"))
    assert cfg.family == family and cfg.vocab_size % 64 == 0 and cfg.n_layers == 4
    assert (out / "tokenizer.json").read_bytes() == (tmp_path / "tok.json").read_bytes()
    assert json.loads((out / "tokenizer_config.json").read_text())["eos_token"] == "<|endoftext|>"
    assert f"to {out}" in done.stdout
