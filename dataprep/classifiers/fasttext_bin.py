"""A supervised fastText model written as a `.bin` file that fastText's `load_model` reads.

    write_model(path, Header(dim=100, epoch=5, min_count=1, word_ngrams=2, bucket=2_000_000),
                words=[(b"the", 812), ...], labels=[(b"__label__positive", 50), ...], tokens=...,
                input_matrix=wi, output_matrix=wo)

The layout is `FastText::saveModel`'s (fastText v0.9.2, version 12; `dataprep/classifiers/fasttext_model.py`
reads the same fields), little-endian: the magic number and version; the arguments (`Args::save`);
the dictionary (`Dictionary::save`: sizes, token count, no pruning, then each entry's bytes, NUL, its
count and its type, the words before the labels); the input matrix and then the output matrix, each a
flag (not quantized), its row and column counts and its float32 rows (`DenseMatrix::save`).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.classifiers.fasttext_model import MAGIC, SUPERVISED
from pretrainkit.files import atomic_write

VERSION = 12
SOFTMAX = 3  # Args' loss_name::softmax
WORD, LABEL = 0, 1  # a dictionary entry's type
NOT_PRUNED = -1  # the dictionary's pruneidx_size for a model that was never quantized


@dataclass(frozen=True)
class Header:
    """The arguments the file records (`Args::save`); those that do not apply to supervised softmax
    training (window, negatives, character n-grams, sampling) keep fastText's defaults."""

    dim: int
    epoch: int
    min_count: int
    word_ngrams: int
    bucket: int
    ws: int = 5
    neg: int = 5
    minn: int = 0
    maxn: int = 0
    lr_update_rate: int = 100
    t: float = 1e-4

    def packed(self) -> bytes:
        ints = (self.dim, self.ws, self.epoch, self.min_count, self.neg, self.word_ngrams, SOFTMAX, SUPERVISED)
        return struct.pack("<12id", *ints, self.bucket, self.minn, self.maxn, self.lr_update_rate, self.t)


def _matrix(matrix: np.ndarray) -> bytes:
    """A matrix's flag and shape; its rows follow."""
    return struct.pack("<?qq", False, *matrix.shape)


def write_model(
    path: str | Path,
    header: Header,
    words: list[tuple[bytes, int]],
    labels: list[tuple[bytes, int]],
    tokens: int,
    input_matrix: np.ndarray,
    output_matrix: np.ndarray,
) -> None:
    """The model file at `path`, published atomically; the matrices float32 [words + bucket, dim] and
    [labels, dim]."""
    entries = [(w, c, WORD) for w, c in words] + [(w, c, LABEL) for w, c in labels]
    with atomic_write(path) as f:
        f.write(struct.pack("<ii", MAGIC, VERSION) + header.packed())
        f.write(struct.pack("<iiiqq", len(entries), len(words), len(labels), tokens, NOT_PRUNED))
        f.write(b"".join(word + b"\0" + struct.pack("<qb", count, kind) for word, count, kind in entries))
        for matrix in (input_matrix, output_matrix):
            f.write(_matrix(matrix))
            f.write(memoryview(np.ascontiguousarray(matrix, np.float32)).cast("B"))
