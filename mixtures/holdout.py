"""The held-out validation split of a shard set: which documents training never samples.

    split = split_heldout(ss, HoldoutConfig(fraction=0.01))
    split.train.num_docs, split.train.tokens     # documents and tokens (with EOS) training samples from
    split.heldout.batch_tokens                   # int64 per record batch: its held-out tokens
    split.heldout.mask(first_doc, count)         # which of documents [first, first + count) are held out

Guarantee: the split is a pure function of the documents' lengths and the holdout settings, not
of the seed, the mixture or the source's name, so a shard set keeps the same held-out documents in
every mixture (a continued run measures forgetting on documents the base run never trained on).
Documents are taken in the order of a fixed hash of their index until the held-out share holds
`max(fraction * tokens, min_tokens)` tokens, but never more than half of the documents.
Since the hash order is fixed, the held-out documents are exactly those whose hash is at most one
value, `last_hash`: the split is kept as that number and per-record-batch counts (cached under the
shard set's fingerprint and the settings), never as a list of documents. Finding it reads the
length columns twice, a million documents at a time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from pretrainkit.cache import cached_arrays
from pretrainkit.mixtures.config import HoldoutConfig
from pretrainkit.shards import ShardSet

_SALT = np.uint64(0x5EED_0F_4E1D_0C5)
_BUCKET_SHIFT = np.uint64(48)  # 2^16 hash buckets: a bucket holds ~num_docs / 65536 documents
_BUCKETS = 1 << 16
_CHUNK_DOCS = 1 << 20


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """A well-mixed 64-bit hash of each element (the SplitMix64 finalizer)."""
    with np.errstate(over="ignore"):
        z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def doc_hashes(first_doc: int, count: int) -> np.ndarray:
    """uint64 hash of documents first_doc .. first_doc + count - 1 (a bijection: no two are equal)."""
    return _splitmix64(np.arange(first_doc, first_doc + count, dtype=np.uint64) ^ _SALT)


@dataclass(frozen=True)
class DocumentSubset:
    """One side of the split: which documents of each record batch it holds, and their tokens."""

    heldout: bool
    last_hash: int | None  # documents with a hash <= this are held out; None: none are
    batch_docs: np.ndarray  # int64 per record batch: documents of this subset in it
    batch_tokens: np.ndarray  # int64 per record batch: their tokens, one EOS each

    @property
    def num_docs(self) -> int:
        return int(self.batch_docs.sum())

    @property
    def tokens(self) -> int:
        return int(self.batch_tokens.sum())

    def mask(self, first_doc: int, count: int) -> np.ndarray:
        """bool per document first_doc .. first_doc + count - 1: True where it is in this subset."""
        held = (
            np.zeros(count, dtype=bool)
            if self.last_hash is None
            else doc_hashes(first_doc, count) <= np.uint64(self.last_hash)
        )
        return held if self.heldout else ~held


@dataclass(frozen=True)
class HeldoutSplit:
    train: DocumentSubset
    heldout: DocumentSubset


def split_heldout(ss: ShardSet, holdout: HoldoutConfig) -> HeldoutSplit:
    key = hashlib.sha256(f"{ss.fingerprint}\0{holdout.fraction!r}\0{holdout.min_tokens}".encode()).hexdigest()[:40]
    arrays = cached_arrays("heldout-split", key, lambda: _compute_split(ss, holdout), ss.cache_dir)
    last = int(arrays["last_hash"][0]) if arrays["any_heldout"][0] else None
    all_docs, all_tokens = np.diff(ss.batches.docs), ss.batches.stream_tokens
    held_docs, held_tokens = arrays["heldout_docs"], arrays["heldout_tokens"]
    return HeldoutSplit(
        train=DocumentSubset(False, last, all_docs - held_docs, all_tokens - held_tokens),
        heldout=DocumentSubset(True, last, held_docs, held_tokens),
    )


def _length_chunks(ss: ShardSet) -> Iterator[tuple[int, int, np.ndarray, np.ndarray]]:
    """(first batch, first document, int64 lengths, per-batch offsets into them) for runs of whole
    record batches of about a million documents."""
    idx = ss.batches
    b = 0
    while b < idx.num_batches:
        stop = min(int(idx.docs.searchsorted(idx.docs[b] + _CHUNK_DOCS, side="left")), idx.num_batches)
        stop = max(stop, b + 1)
        lengths = np.concatenate([ss.batch_lengths(i) for i in range(b, stop)]).astype(np.int64)
        yield b, int(idx.docs[b]), lengths, idx.docs[b : stop + 1] - idx.docs[b]
        b = stop


def _compute_split(ss: ShardSet, holdout: HoldoutConfig) -> dict[str, np.ndarray]:
    n = ss.num_docs
    bucket_tokens = np.zeros(_BUCKETS, dtype=np.int64)
    bucket_docs = np.zeros(_BUCKETS, dtype=np.int64)
    for _, first, lengths, _ in _length_chunks(ss):
        bucket = (doc_hashes(first, len(lengths)) >> _BUCKET_SHIFT).astype(np.intp)
        bucket_tokens += np.rint(np.bincount(bucket, weights=lengths + 1, minlength=_BUCKETS)).astype(np.int64)
        bucket_docs += np.bincount(bucket, minlength=_BUCKETS)
    # count = how many documents, in hash order, until the held-out tokens reach the target
    target = max(holdout.fraction * ss.stream_length, holdout.min_tokens)
    count = 0
    if target > 0:
        cum_tokens = np.cumsum(bucket_tokens)
        k = int(np.searchsorted(cum_tokens, target))
        if k == _BUCKETS:
            count = n + 1
        else:
            hashes, tokens = _bucket_members(ss, k)
            before = int(cum_tokens[k - 1]) if k else 0
            count = int(bucket_docs[:k].sum()) + int(np.searchsorted(before + np.cumsum(tokens), target)) + 1
    count = min(count, n // 2)
    last = np.zeros(1, dtype=np.uint64)
    if count:
        cum_docs = np.cumsum(bucket_docs)
        k = int(np.searchsorted(cum_docs, count))
        hashes, _ = _bucket_members(ss, k)
        last[0] = hashes[count - (int(cum_docs[k - 1]) if k else 0) - 1]
    held_docs = np.zeros(ss.batches.num_batches, dtype=np.int64)
    held_tokens = np.zeros(ss.batches.num_batches, dtype=np.int64)
    if count:
        for b, first, lengths, offsets in _length_chunks(ss):
            held = doc_hashes(first, len(lengths)) <= last[0]
            docs = np.concatenate([[0], np.cumsum(held)])
            tokens = np.concatenate([[0], np.cumsum(np.where(held, lengths + 1, 0))])
            held_docs[b : b + len(offsets) - 1] = np.diff(docs[offsets])
            held_tokens[b : b + len(offsets) - 1] = np.diff(tokens[offsets])
    return {
        "any_heldout": np.array([count > 0]),
        "last_hash": last,
        "heldout_docs": held_docs,
        "heldout_tokens": held_tokens,
    }


def _bucket_members(ss: ShardSet, bucket: int) -> tuple[np.ndarray, np.ndarray]:
    """(hashes, tokens with EOS) of the documents in one hash bucket, in hash order."""
    docs = []
    for first in range(0, ss.num_docs, _CHUNK_DOCS):
        h = doc_hashes(first, min(_CHUNK_DOCS, ss.num_docs - first))
        docs.append(first + np.flatnonzero((h >> _BUCKET_SHIFT) == np.uint64(bucket)))
    members = np.concatenate(docs)
    batch = np.searchsorted(ss.batches.docs, members, side="right") - 1
    tokens = np.empty(len(members), dtype=np.int64)
    for b in np.unique(batch).tolist():
        sel = batch == b
        tokens[sel] = ss.batch_lengths(b)[members[sel] - int(ss.batches.docs[b])].astype(np.int64) + 1
    hashes = _splitmix64(members.astype(np.uint64) ^ _SALT)
    order = np.argsort(hashes)
    return hashes[order], tokens[order]
