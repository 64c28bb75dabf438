"""Three byte-level domains for mixture searches: Shakespeare (whose other speeches are the target), WikiText
articles and Python PEPs; a tiny training config whose proxy runs take seconds; one search over them,
run once for the session and compared against by the tests that search again (in parallel, on Ray)."""

from __future__ import annotations

import contextlib
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fixtures.corpora import DATA, need_data
from pretrainkit.cli import main

RUNS = 8  # the session's search: fewer runs found the wrong domain (the fit is noisy at this budget)


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


def in_process(*argv: object) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `ptk ARGV` in this process, on one thread (see `one_thread`)."""
    out, err = io.StringIO(), io.StringIO()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:  # argparse
                code = int(e.code or 0)
    finally:
        torch.set_num_threads(before)
    return code, out.getvalue(), err.getvalue()


@pytest.fixture(scope="session")
def ptk() -> Callable[..., tuple[int, str, str]]:
    """`ptk(*argv)`: (exit status, stdout, stderr) of `ptk ARGV` run in this process on one thread."""
    return in_process


@dataclass(frozen=True)
class Search:
    domains: Path
    config: Path  # the proxy runs' training config
    out: Path  # the session's search: `runs` runs around the uniform mixture, seed 0
    stdout: str
    runs: int = RUNS

    def argv(self, out: Path) -> list[object]:
        """The session's search, into `out` (add --runs and more)."""
        target = self.domains / "target"
        return ["mix", "search", self.domains / "uniform.yaml", "--config", self.config, "--target", target, "-o", out]

    @staticmethod
    def first_runs(out: Path, count: int) -> list[dict]:
        """The first `count` rows of a search's runs.jsonl without the leave-one-out prediction (which
        depends on the other runs of that search)."""
        rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()[:count]]
        return [{k: v for k, v in row.items() if k != "predicted_loo"} for row in rows]


@pytest.fixture(scope="session")
def search(domains, tmp_path_factory) -> Search:
    root = tmp_path_factory.mktemp("search")
    config = write_tiny_config(root / "config", domains / "uniform.yaml")
    found = Search(domains, config, root / "out", "")
    code, stdout, err = in_process(*found.argv(found.out), "--runs", RUNS)
    assert code == 0, err[-3000:]
    return Search(domains, config, found.out, stdout)
