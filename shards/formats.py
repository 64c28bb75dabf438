"""Shard-set constants shared by writers and readers: file names, token dtype, the document batch.

A shard file holds a sequence of `DocBatch`es (an Arrow record batch, or one WebDataset sample),
each of about `DEFAULT_BATCH_TOKENS` tokens, so that a reader decompresses only what it touches.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

# The version each format is written in, and those still read: webdataset 1 held opaque `.ptk` samples
# (see webdataset_format.py); 2 writes standard `.json` + `.npy` members.
FORMAT_VERSION = {"arrow": 1, "webdataset": 2}
READ_VERSIONS = {"arrow": (1,), "webdataset": (1, 2)}
MANIFEST_NAME = "manifest.json"
FORMATS = ("arrow", "webdataset")
SUFFIX = {"arrow": ".arrow", "webdataset": ".tar"}
SHARD_NAME_RE = re.compile(r"^shard-\d{5}\.(arrow|tar)$")
SHARD_FILE_RE = re.compile(r"^shard-\d{5}\.(arrow|tar|arrow\.batches)$")  # shards and record-batch sidecars
DEFAULT_BATCH_TOKENS = 16384
DEFAULT_SHARD_TOKENS = 32_000_000
ZSTD_LEVEL = 3


def shard_file_name(index: int, fmt: str) -> str:
    return f"shard-{index:05d}{SUFFIX[fmt]}"


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


@dataclass
class DocBatch:
    """Consecutive documents: their ids, token counts, and all their tokens back to back; in a set whose
    documents have addresses (`ptk extract`'s pages), their urls (None where a document has none)."""

    ids: list[str]
    lengths: np.ndarray  # uint32, one per document
    tokens: np.ndarray  # flat, the set's token dtype
    urls: list[str | None] | None = None  # None: the set has no url column

    @property
    def offsets(self) -> np.ndarray:
        """int64 (n+1,): document i is tokens[offsets[i]:offsets[i+1]]."""
        out = np.zeros(len(self.lengths) + 1, dtype=np.int64)
        np.cumsum(self.lengths, out=out[1:])
        return out
