"""Fixtures for mixture tests: three real corpora from ../shared/data as byte-level shard sets.

Byte-level "tokenizer": token = UTF-8 byte, EOS = 256, vocab 257. The three sources differ in
shape on purpose: WikiText-2 articles (few, long), PEPs (medium), Shakespeare speeches (many, short).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from fixtures.corpora import DATA, need_data
from pretrainkit.shards import write_shards

BYTE_EOS = 256
BYTE_TOKENIZER = "b" * 64


def _tokens(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


def corpus_documents(name: str) -> list[str]:
    if name == "wiki":  # the first 30 articles of WikiText-2 valid, split at their " = Title = " lines
        text = need_data(DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8")
        return [a for a in re.split(r"\n(?= = [^=].* = \n)", text) if a.strip()][:30]
    if name == "peps":  # 40 PEPs, one document each
        files = sorted(need_data(DATA / "python_peps" / "peps").glob("pep-*.rst"))[:40]
        return [f.read_text(encoding="utf-8") for f in files]
    if name == "shakespeare":  # the speeches of the first 200 kB of Tiny Shakespeare
        text = need_data(DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:200_000]
        return [s for s in text.split("\n\n") if s.strip()]
    if name == "tiny":  # the first 30 of those speeches
        return corpus_documents("shakespeare")[:30]
    raise KeyError(name)


def make_shard_set(name: str, out: Path, tokenizer_sha256: str = BYTE_TOKENIZER) -> Path:
    docs = [_tokens(t) for t in corpus_documents(name)]
    # Small batches and shards, so that reads cross batch and shard boundaries.
    write_shards(
        docs,
        out,
        vocab_size=257,
        eos_id=BYTE_EOS,
        tokenizer_sha256=tokenizer_sha256,
        batch_tokens=8192,
        shard_tokens=64 * 1024,
    )
    return out


@pytest.fixture(scope="session")
def shard_root(tmp_path_factory) -> Path:
    """A folder with shard sets wiki/, peps/, shakespeare/, tiny/ (and othertok/: another tokenizer)."""
    root = tmp_path_factory.mktemp("mixture_shards")
    for name in ("wiki", "peps", "shakespeare", "tiny"):
        make_shard_set(name, root / name)
    make_shard_set("shakespeare", root / "othertok", tokenizer_sha256="c" * 64)
    return root


@pytest.fixture
def write_yaml(shard_root):
    """Write a mixture YAML next to the shard sets (so `shards: wiki` resolves); returns its path."""
    counter = iter(range(1_000_000))

    def write(text: str) -> Path:
        path = shard_root / f"mix-{next(counter)}-{abs(hash(text))}.yaml"
        path.write_text(text, encoding="utf-8")
        return path

    return write


@pytest.fixture
def reference_stream():
    """The source's token stream built the slow, obvious way: whole documents and EOS, window by window,
    epoch by epoch, in the order `window_documents` states."""

    def build(stream, epochs: int) -> np.ndarray:
        ss = stream.shard_set
        order = [d for e in range(epochs) for w in range(stream.num_windows()) for d in stream.window_documents(e, w)]
        parts = [np.append(ss.document(int(d)), ss.tokenizer.eos_id) for d in order]
        return np.concatenate(parts).astype(np.int64)[stream.start_token :]

    return build
