"""The held-out validation split of a shard set: which documents training never samples.

    train_docs, heldout_docs = split_heldout(ss.doc_lengths(), HoldoutConfig(fraction=0.01))

Guarantee: the split is a pure function of the documents' lengths and the holdout settings, not
of the seed, the mixture or the source's name, so a shard set keeps the same held-out documents in
every mixture (a continued run measures forgetting on documents the base run never trained on).
Documents are taken in the order of a fixed hash of their index until the held-out share holds
`max(fraction * tokens, min_tokens)` tokens, but never more than half of the documents.
"""

from __future__ import annotations

import numpy as np

from mixtures.config import HoldoutConfig

_SALT = np.uint64(0x5EED_0F_4E1D_0C5)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A well-mixed 64-bit hash of each element (the SplitMix64 finalizer)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def split_heldout(lengths: np.ndarray, holdout: HoldoutConfig) -> tuple[np.ndarray, np.ndarray]:
    """(train_docs, heldout_docs): sorted int64 document indices that partition range(len(lengths))."""
    n = len(lengths)
    order = np.argsort(_splitmix64(np.arange(n, dtype=np.uint64) ^ _SALT), kind="stable")
    tokens = np.cumsum(np.asarray(lengths, dtype=np.int64)[order] + 1)
    total = int(tokens[-1]) if n else 0
    target = max(holdout.fraction * total, holdout.min_tokens)
    count = int(np.searchsorted(tokens, target)) + 1 if target > 0 else 0
    count = min(count, n // 2)
    heldout = np.sort(order[:count]).astype(np.int64)
    train = np.sort(order[count:]).astype(np.int64)
    return train, heldout
