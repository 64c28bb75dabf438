"""Fixtures for shard tests: real text from ../shared/data, as byte-level token documents."""

from __future__ import annotations

import numpy as np
import pytest

from fixtures.corpora import DATA, need_data

BYTE_EOS = 256  # byte-level "tokenizer": token = UTF-8 byte, EOS = 256, vocab 257


@pytest.fixture(scope="session")
def wikitext_docs() -> list[np.ndarray]:
    """The non-empty paragraphs of WikiText-2 valid (about 2,400), each as its UTF-8 bytes."""
    path = DATA / "wikitext2" / "valid.txt"
    need_data(path)
    lines = [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [np.frombuffer(ln.encode("utf-8"), dtype=np.uint8).astype(np.uint16) for ln in lines]


@pytest.fixture(scope="session")
def wikitext_stream(wikitext_docs) -> np.ndarray:
    """The reference stream doc0 EOS doc1 EOS ... built directly with numpy."""
    return np.concatenate([np.append(d, BYTE_EOS) for d in wikitext_docs]).astype(np.uint16)
