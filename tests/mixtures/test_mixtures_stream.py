"""Packing: a source's sequences are its training documents, EOS-joined, epoch after epoch in a
seeded windowed-shuffle order, cut into seq_len + 1 tokens; the held-out split never enters it.
The statistical cost of the windowed shuffle is measured here, against a full shuffle and no shuffle."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from pretrainkit.mixtures.config import HoldoutConfig
from pretrainkit.mixtures.holdout import doc_hashes, split_heldout
from pretrainkit.mixtures.mixture import load_mixture
from pretrainkit.mixtures.sampler import MixtureSampler
from pretrainkit.mixtures.stream import SourceStream
from pretrainkit.shards import ShardSet, write_shards


def _stream(shard_root, name="shakespeare", seq_len=100, seed=7, start_token=0, window_batches=4, shuffle=True):
    ss = ShardSet.open(shard_root / name)
    train = split_heldout(ss, HoldoutConfig()).train
    return SourceStream(
        ss, train, seq_len=seq_len, seed=seed, start_token=start_token, window_batches=window_batches, shuffle=shuffle
    )


def _epoch_documents(stream: SourceStream, epoch: int) -> np.ndarray:
    return np.concatenate([stream.window_documents(epoch, w) for w in range(stream.num_windows())])


def _train_documents(stream: SourceStream) -> np.ndarray:
    return np.flatnonzero(stream.docs.mask(0, stream.shard_set.num_docs))


@pytest.mark.parametrize(
    "name, seq_len, window_batches", [("shakespeare", 100, 4), ("shakespeare", 100, 64), ("wiki", 1000, 3)]
)
def test_sequences_are_the_window_ordered_documents_cut_in_rows(
    shard_root, reference_stream, name, seq_len, window_batches
):
    stream = _stream(shard_root, name, seq_len, window_batches=window_batches)
    expected = reference_stream(stream, epochs=3)
    rows = len(expected) // stream.row_tokens
    index = np.arange(rows)
    got = stream.sequences(index)
    assert got.dtype == np.int64 and got.shape == (rows, seq_len + 1)
    assert np.array_equal(got.reshape(-1), expected[: rows * stream.row_tokens])  # no token dropped or repeated
    scattered = np.array([rows - 1, 3, 0, rows // 2, 3])  # any order, repeats: each row on its own
    assert np.array_equal(stream.sequences(scattered), got[scattered])
    assert np.array_equal(
        _stream(shard_root, name, seq_len, window_batches=window_batches).sequences(scattered), got[scattered]
    )


def test_each_epoch_is_a_fresh_permutation_of_the_training_documents(shard_root):
    stream = _stream(shard_root)
    orders = [_epoch_documents(stream, e) for e in range(3)]
    train = _train_documents(stream)
    assert len(train) == stream.docs.num_docs and stream.num_windows() > 3
    for order in orders:
        assert np.array_equal(np.sort(order), train)
    assert not np.array_equal(orders[0], orders[1]) and not np.array_equal(orders[1], orders[2])
    assert np.array_equal(_epoch_documents(_stream(shard_root), 1), orders[1])  # a pure function of (seed, epoch)
    assert not np.array_equal(_epoch_documents(_stream(shard_root, seed=8), 1), orders[1])


def test_a_window_is_its_record_batches_and_each_is_decompressed_once_per_epoch(shard_root, monkeypatch):
    stream = _stream(shard_root, window_batches=4)
    ss = stream.shard_set
    batch_of = np.searchsorted(ss.batches.docs, np.arange(ss.num_docs), side="right") - 1
    for w in range(stream.num_windows()):
        docs = stream.window_documents(0, w)
        batches = np.unique(batch_of[docs])
        assert len(batches) <= 4
        members = np.flatnonzero(np.isin(batch_of, batches) & stream.docs.mask(0, ss.num_docs))
        assert np.array_equal(np.sort(docs), members)  # whole record batches, nothing else
    reads = []
    monkeypatch.setattr(ss, "read_batch", lambda b, read=ss.read_batch: reads.append(b) or read(b))
    rows = 2 * stream.epoch_tokens // stream.row_tokens
    for first in range(0, rows, 8):  # two epochs, a batch of rows at a time
        stream.sequences(np.arange(first, min(first + 8, rows)))
    nonempty = int(np.count_nonzero(stream.docs.batch_tokens))
    assert len(reads) == 2 * nonempty  # each record batch once per epoch
    assert sorted(reads[:nonempty]) == np.flatnonzero(stream.docs.batch_tokens).tolist()


def _adjacent_stats(stream: SourceStream, epochs: int = 3) -> tuple[float, float]:
    """(share of stream-adjacent document pairs from the same record batch, mean input-order distance
    between them as a fraction of the documents)."""
    ss = stream.shard_set
    batch_of = np.searchsorted(ss.batches.docs, np.arange(ss.num_docs), side="right") - 1
    same, dist = [], []
    for e in range(epochs):
        order = _epoch_documents(stream, e)
        same.append(batch_of[order[1:]] == batch_of[order[:-1]])
        dist.append(np.abs(order[1:] - order[:-1]) / ss.num_docs)
    return float(np.concatenate(same).mean()), float(np.concatenate(dist).mean())


def test_windowed_shuffle_cost_is_what_the_docstring_states(shard_root):
    """Adjacent documents share a record batch with probability ~1/window_batches (not ~1 as unshuffled),
    and otherwise come from anywhere in the input (mean distance ~1/3 of the corpus, as for a full shuffle)."""
    ss = ShardSet.open(shard_root / "shakespeare")
    assert ss.batches.num_batches >= 16
    for window_batches in (4, 8):
        same, dist = _adjacent_stats(_stream(shard_root, window_batches=window_batches))
        assert 0.5 / window_batches < same < 1.6 / window_batches
        assert dist > (1 - 1.6 / window_batches) / 3 * 0.8
    full_same, full_dist = _adjacent_stats(_stream(shard_root, window_batches=ss.batches.num_batches))
    assert full_same < 2.5 / ss.batches.num_batches and full_dist > 0.28
    in_order_same, in_order_dist = _adjacent_stats(_stream(shard_root, shuffle=False), epochs=1)
    assert in_order_same > 0.9 and in_order_dist < 0.01  # the measure can tell: no shuffle fails both


def test_start_token_shifts_the_stream(shard_root):
    plain = _stream(shard_root)
    shifted = _stream(shard_root, start_token=plain.token_position(5))
    assert np.array_equal(shifted.sequences(np.arange(4)), plain.sequences(np.arange(5, 9)))


def test_sequence_longer_than_an_epoch_wraps_through_several(tmp_path, reference_stream):
    ss = write_shards(
        [np.arange(1, 40), np.arange(50, 60), np.arange(70, 75)],
        tmp_path / "s",
        vocab_size=100,
        eos_id=0,
        batch_tokens=16,
    )
    train = split_heldout(ss, HoldoutConfig(fraction=0, min_tokens=0)).train
    tiny = SourceStream(ss, train, seq_len=150, seed=1, window_batches=1)
    assert tiny.num_windows() == ss.batches.num_batches > 1
    expected = reference_stream(tiny, epochs=8)
    assert np.array_equal(tiny.sequences(np.arange(2)).reshape(-1), expected[: 2 * tiny.row_tokens])


def _reference_split(lengths: np.ndarray, holdout: HoldoutConfig) -> np.ndarray:
    """The rule, the obvious way: documents in hash order until the held-out tokens reach the target."""
    order = np.argsort(doc_hashes(0, len(lengths)))
    tokens = np.cumsum(lengths[order] + 1)
    target = max(holdout.fraction * int(tokens[-1]), holdout.min_tokens)
    count = min(int(np.searchsorted(tokens, target)) + 1 if target > 0 else 0, len(lengths) // 2)
    return np.sort(order[:count])


@pytest.mark.parametrize(
    "holdout",
    [
        HoldoutConfig(0.01, 0),
        HoldoutConfig(0.2, 0),
        HoldoutConfig(0.01, 10**9),
        HoldoutConfig(0, 0),
        HoldoutConfig(0, 500),
    ],
)
def test_heldout_split_is_the_hash_order_rule_kept_per_record_batch(tmp_path_factory, holdout):
    # 100k documents: more than the 65536 hash buckets, so buckets hold several documents
    root = tmp_path_factory.getbasetemp() / "holdout_set"
    if not (root / "manifest.json").exists():
        lengths = np.random.default_rng(0).integers(1, 6, size=100_000)
        write_shards((np.full(n, 7) for n in lengths), root, vocab_size=100, eos_id=0, batch_tokens=4096)
    ss = ShardSet.open(root)
    lengths = ss.doc_lengths()
    held = _reference_split(lengths, holdout)
    split = split_heldout(ss, holdout)
    assert np.array_equal(np.flatnonzero(split.heldout.mask(0, ss.num_docs)), held)
    assert np.array_equal(split.train.mask(0, ss.num_docs), ~split.heldout.mask(0, ss.num_docs))
    assert split.heldout.num_docs == len(held) and split.heldout.tokens == int((lengths[held] + 1).sum())
    assert split.train.tokens + split.heldout.tokens == ss.stream_length
    batch_of = np.searchsorted(ss.batches.docs, held, side="right") - 1
    assert np.array_equal(split.heldout.batch_docs, np.bincount(batch_of, minlength=ss.batches.num_batches))
    assert np.array_equal(split_heldout(ss, holdout).heldout.batch_tokens, split.heldout.batch_tokens)  # from the cache


def test_heldout_split_never_takes_more_than_half_and_extends_the_same_order(tmp_path):
    ss = write_shards([np.full(n, 3) for n in range(1, 200)], tmp_path / "s", vocab_size=10, eos_id=0, batch_tokens=512)
    small = np.flatnonzero(split_heldout(ss, HoldoutConfig(0.01, 0)).heldout.mask(0, ss.num_docs))
    big = np.flatnonzero(split_heldout(ss, HoldoutConfig(0.01, 10**9)).heldout.mask(0, ss.num_docs))
    assert len(big) == 99 and np.isin(small, big).all()
    one = write_shards([np.full(50, 3)], tmp_path / "one", vocab_size=10, eos_id=0)
    assert split_heldout(one, HoldoutConfig()).heldout.num_docs == 0


def test_what_a_loader_process_receives_does_not_grow_with_documents(tmp_path):
    """The sampler pickled into every DataLoader worker holds per-record-batch arrays only."""
    sizes = {}
    for docs in (2_000, 40_000):
        ss = write_shards(
            (np.full(3, 5) for _ in range(docs)), tmp_path / f"s{docs}", vocab_size=10, eos_id=0, batch_tokens=1 << 20
        )
        assert ss.batches.num_batches == 1
        (tmp_path / f"m{docs}.yaml").write_text(f"seed: 1\nsources:\n  - {{name: a, shards: s{docs}, weight: 1}}\n")
        sampler = MixtureSampler(load_mixture(tmp_path / f"m{docs}.yaml"), seq_len=16, global_batch_size=4)
        sampler.batch(3)
        sizes[docs] = len(pickle.dumps(sampler))
    assert abs(sizes[40_000] - sizes[2_000]) < 256  # 20x the documents: the same bytes
