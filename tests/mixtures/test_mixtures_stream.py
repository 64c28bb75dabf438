"""Packing: a source's sequences are its training documents, EOS-joined, epoch after epoch in a
seeded per-epoch order, cut into seq_len + 1 tokens; the held-out split never enters it."""

from __future__ import annotations

import numpy as np
import pytest

from mixtures.config import HoldoutConfig
from mixtures.holdout import split_heldout
from mixtures.stream import SourceStream
from shards import ShardSet


def _stream(shard_root, name="shakespeare", seq_len=100, seed=7, start_token=0):
    ss = ShardSet.open(shard_root / name)
    train, _ = split_heldout(ss.doc_lengths(), HoldoutConfig())
    return SourceStream(ss, train, seq_len=seq_len, seed=seed, start_token=start_token)


@pytest.mark.parametrize("name, seq_len", [("shakespeare", 100), ("wiki", 1000)])
def test_sequences_are_the_epoch_ordered_documents_cut_in_rows(shard_root, reference_stream, name, seq_len):
    stream = _stream(shard_root, name, seq_len)
    expected = reference_stream(stream, epochs=3)
    rows = len(expected) // stream.row_tokens
    index = np.arange(rows)
    got = stream.sequences(index)
    assert got.dtype == np.int64 and got.shape == (rows, seq_len + 1)
    assert np.array_equal(got.reshape(-1), expected[: rows * stream.row_tokens])
    scattered = np.array([rows - 1, 3, 0, rows // 2, 3])  # any order, repeats: each row on its own
    assert np.array_equal(stream.sequences(scattered), got[scattered])


def test_each_epoch_is_a_fresh_permutation_of_the_training_documents(shard_root):
    stream = _stream(shard_root)
    orders = [stream.epoch_order(e)[0] for e in range(3)]
    for order in orders:
        assert np.array_equal(np.sort(order), stream.docs)
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])
    again = _stream(shard_root)
    assert np.array_equal(again.epoch_order(1)[0], orders[1])  # a pure function of (seed, epoch)
    assert not np.array_equal(_stream(shard_root, seed=8).epoch_order(1)[0], orders[1])


def test_start_token_shifts_the_stream(shard_root):
    plain = _stream(shard_root)
    shifted = _stream(shard_root, start_token=plain.token_position(5))
    assert np.array_equal(shifted.sequences(np.arange(4)), plain.sequences(np.arange(5, 9)))


def test_sequence_longer_than_an_epoch_wraps_through_several(shard_root, reference_stream):
    ss = ShardSet.open(shard_root / "shakespeare")
    tiny = SourceStream(ss, np.array([0, 1]), seq_len=int(ss.doc_lengths()[:2].sum()) * 3, seed=1)
    expected = reference_stream(tiny, epochs=8)
    assert np.array_equal(tiny.sequences(np.arange(2)).reshape(-1), expected[: 2 * tiny.row_tokens])


def test_heldout_split_is_fixed_disjoint_and_sized():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 2000, size=5000)
    train, held = split_heldout(lengths, HoldoutConfig(fraction=0.01, min_tokens=0))
    assert np.array_equal(np.sort(np.concatenate([train, held])), np.arange(5000))
    held_tokens = int((lengths[held] + 1).sum())
    assert 0.01 * (lengths + 1).sum() <= held_tokens < 0.01 * (lengths + 1).sum() + 2001
    train2, held2 = split_heldout(lengths, HoldoutConfig(fraction=0.01, min_tokens=0))
    assert np.array_equal(held, held2) and np.array_equal(train, train2)
    _, more = split_heldout(lengths, HoldoutConfig(fraction=0.01, min_tokens=10**9))
    assert len(more) == 2500  # never more than half of the documents
    assert np.isin(held, more).all()  # a bigger share extends the same hash order
    assert len(split_heldout(np.array([50]), HoldoutConfig())[1]) == 0
