"""Three byte-level domains for mixture searches: Shakespeare (whose other speeches are the target), WikiText
articles and Python PEPs; and a tiny training config whose proxy runs take seconds."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import yaml

from fixtures.corpora import DATA, need_data


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


@pytest.fixture(scope="session")
def domains(tmp_path_factory) -> Path:
    """A folder with shard sets `shakespeare`, `target` (other Shakespeare speeches), `wiki` and `peps`
    (byte-level: token = byte, EOS 256) and `uniform.yaml`, the three training domains weighted alike."""
    from pretrainkit.shards import write_shards

    root = tmp_path_factory.mktemp("mix_search_domains")
    text = need_data(DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:240_000]
    speeches = [s for s in text.split("\n\n") if s.strip()]
    wiki = need_data(DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8")
    articles = [a for a in re.split(r"\n(?= = [^=].* = \n)", wiki) if a.strip()][:40]
    peps = [p.read_text(encoding="utf-8") for p in sorted(need_data(DATA / "python_peps" / "peps").glob("*.rst"))[:40]]
    sets = {"shakespeare": speeches[:-200], "target": speeches[-200:], "wiki": articles, "peps": peps}
    for name, docs in sets.items():
        write_shards([_bytes(d) for d in docs], root / name, vocab_size=257, eos_id=256, tokenizer_sha256="b" * 64)
    (root / "uniform.yaml").write_text(
        yaml.safe_dump(
            {
                "seed": 1,
                "holdout": {"fraction": 0.02, "min_tokens": 1024},
                "sources": [{"name": n, "shards": n, "weight": 1} for n in ("shakespeare", "wiki", "peps")],
            }
        )
    )
    return root


@pytest.fixture(scope="session")
def tiny_config():
    """`tiny_config(directory, mixture, **overrides)`: writes a training config of a few seconds on CPU
    over `mixture` (`run_dir: run` beside it) and returns its path."""
    return write_tiny_config


def write_tiny_config(directory: Path, mixture: Path, **overrides) -> Path:
    cfg = {
        "run_dir": "run",
        "seed": 0,
        "device": "cpu",
        "data": {"mixture": str(mixture), "seq_len": 32},
        "model": {"d_model": 32, "n_layers": 1, "n_heads": 2, "n_kv_heads": 1},
        "batch": {"global_size": 16, "micro_size": 16},
        "optim": {"lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2},
        "max_steps": 24,
        "checkpoint": {"every": 8, "keep": 2},
        "eval": {"every": 0},
        "spikes": {"action": "none"},
        **overrides,
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "train.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path
