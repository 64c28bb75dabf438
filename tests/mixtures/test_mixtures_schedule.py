"""Interleaving guarantee: every prefix holds each source within 1 sequence of its share, and the
O(1) position functions agree with counting the order itself."""

from __future__ import annotations

import numpy as np
import pytest

from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.mixtures.schedule import InterleaveSchedule, quotas_from_weights

WEIGHTS = [
    [1.0],
    [0.25, 0.75],
    [0.5, 0.3, 0.2],
    [1, 1, 1],
    [0.05, 0.95],
    [32, 26, 14, 16, 3, 4],
    [0.123457, 0.3, 0.5765431],  # no short exact period: rounded to shares of 2**16
]


def _brute_counts(sched: InterleaveSchedule, n: int) -> np.ndarray:
    src = sched.source_of(np.arange(n))
    return np.stack([np.cumsum(src == s) for s in range(len(sched.quotas))], axis=1)  # [n, S]


@pytest.mark.parametrize("weights", WEIGHTS, ids=str)
def test_every_prefix_is_within_one_sequence_of_its_share(weights):
    sched = InterleaveSchedule.from_weights(weights)
    n = min(3 * sched.period, 200_000) + 7
    counts = _brute_counts(sched, n)
    ideal = np.arange(1, n + 1)[:, None] * np.asarray(sched.shares)[None, :]
    assert np.abs(counts - ideal).max() < 1
    assert np.allclose(sched.shares, np.asarray(weights) / sum(weights), atol=1 / (1 << 16))


@pytest.mark.parametrize("weights", WEIGHTS[:6], ids=str)
def test_any_window_is_within_two_and_period_windows_within_one(weights):
    sched = InterleaveSchedule.from_weights(weights)
    counts = np.vstack([np.zeros(len(weights), dtype=np.int64), _brute_counts(sched, max(2 * sched.period, 200) + 50)])
    shares = np.asarray(sched.shares)
    for length in (1, 2, 3, 7, 16, 64):
        window = counts[length:] - counts[:-length]
        assert np.abs(window - length * shares).max() < 2
        starts = np.arange(0, len(counts) - length, sched.period)
        assert np.abs(window[starts] - length * shares).max() < 1


@pytest.mark.parametrize("weights", WEIGHTS[:6], ids=str)
def test_constant_time_positions_match_the_order(weights):
    sched = InterleaveSchedule.from_weights(weights)
    n = 2 * sched.period + 13
    counts = _brute_counts(sched, n)
    for m in (0, 1, 5, sched.period, n):
        assert np.array_equal(sched.counts(m), counts[m - 1] if m else np.zeros(len(weights)))
    src, idx = sched.source_of(np.arange(n)), sched.index_in_source(np.arange(n))
    for s in range(len(weights)):
        assert np.array_equal(idx[src == s], np.arange(np.sum(src == s)))
        for c in (1, 2, sched.quotas[s] + 1):
            first = sched.first_index_reaching(s, c)
            assert counts[first - 1, s] == c and (first == 1 or counts[first - 2, s] == c - 1)


def test_quotas_are_exact_for_decimal_weights():
    assert quotas_from_weights([0.25, 0.75]) == ([1, 3], 4)
    assert quotas_from_weights([0.5, 0.3, 0.2]) == ([5, 3, 2], 10)
    assert quotas_from_weights([2, 2]) == ([1, 1], 2)
    quotas, period = quotas_from_weights([1e-9, 1.0])
    assert quotas[0] == 1 and sum(quotas) == period  # a tiny positive weight still gets its turn


def test_sampler_batches_hold_the_mixture_proportions(write_yaml):
    mix = load_mixture(
        write_yaml("""seed: 1
sources:
  - {name: wiki, shards: wiki, weight: 0.5}
  - {name: peps, shards: peps, weight: 0.3}
  - {name: shakespeare, shards: shakespeare, weight: 0.2}
""")
    )
    sampler = MixtureSampler(mix, seq_len=32, global_batch_size=8)
    ids = np.concatenate([sampler.batch(k)[1] for k in range(25)])
    assert ids.dtype == np.int16
    counts = np.stack([np.cumsum(ids == s) for s in range(3)], axis=1)
    ideal = np.arange(1, len(ids) + 1)[:, None] * np.array([0.5, 0.3, 0.2])
    assert np.abs(counts - ideal).max() < 1
