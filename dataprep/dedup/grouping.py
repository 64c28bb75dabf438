"""The compiled loops of dedup's match rounds: entries scattered by partition, pairs found in groups.

    order, bounds = counting_order(targets, n)        # stable: targets[order] is sorted
    entries, bounds = scatter_entries(h1, h2, eligible, first_key, partitions)
    h1, h2 = band_halves(band_hashes)                  # a band entry's hash: 64 bits, its band mixed in
    later, earlier = group_pairs(entries, predecessors=True)

An entry is (h1, h2, key), the rows of an [n, 3] array of the hashes' type: uint64 for the exact
round (h1, h2: a 128-bit digest), uint32 for the band round (h1, h2: the low and high
halves of the band hash with its band number mixed in, so 12 bytes an entry, half the bucket
files the rounds write and read). Every loop is linear in its input: a counting sort instead of
a comparison sort, and a hash table instead of sorting to find equal hashes. A group's table is
built a slice of entries at a time (those whose digest starts with the same bits, found by one
counting sort), so the table being probed fits in the CPU caches whatever the partition's size.
"""

from __future__ import annotations

import numba
import numpy as np

from pretrainkit.dataprep.dedup.minhash import mix64

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX = np.uint64(0xD6E8FEB86659FD93)
_SLICE_BITS = 12  # ~4K entries per hash table: 64 KB of slots, in L2
_NO_ENTRY = -1


def band_halves(band_hashes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(low, high) uint32 halves of each band hash XOR `mix64` of its band number (a random-looking
    constant per column): equal halves are equal hashes of the same band, but for a 2^-64 chance
    per pair of different bands (band hashes are mixed: as likely as two rows hashing alike;
    candidates are verified either way)."""
    band_numbers = np.arange(1, band_hashes.shape[1] + 1, dtype=np.uint64)
    salted = band_hashes ^ mix64(band_numbers * _GOLDEN)
    halves = salted.view(np.uint32).reshape(*band_hashes.shape, 2)  # little-endian: low half first
    return halves[..., 0], halves[..., 1]


@numba.njit(cache=True)
def _target_bounds(targets: np.ndarray, n: int) -> np.ndarray:
    bounds = np.zeros(n + 1, np.int64)
    for t in targets:
        bounds[t + 1] += 1
    for t in range(n):
        bounds[t + 1] += bounds[t]
    return bounds


@numba.njit(cache=True)
def counting_order(targets: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(order, bounds): the stable permutation that sorts `targets` (integers in [0, n)), and
    where each target's run starts in it (`bounds[t]` .. `bounds[t + 1]`)."""
    bounds = _target_bounds(targets, n)
    at = bounds[:-1].copy()
    order = np.empty(len(targets), np.int64)
    for i in range(len(targets)):
        t = targets[i]
        order[at[t]] = i
        at[t] += 1
    return order, bounds


@numba.njit(cache=True)
def scatter_entries(
    h1: np.ndarray, h2: np.ndarray, eligible: np.ndarray, first_key: int, partitions: int
) -> tuple[np.ndarray, np.ndarray]:
    """Entries (h1[i, j], h2[i, j], first_key + i) of the eligible rows i, for every column j,
    grouped by partition `h1 % partitions` ([m, 3] of h1's type, and the bounds of each
    partition's run); within a partition in row order, then column order (so keys never
    decrease)."""
    rows, cols = h1.shape
    m = 0
    for i in range(rows):
        if eligible[i]:
            m += cols
    targets = np.empty(m, np.int64)
    p = np.uint64(partitions)
    k = 0
    for i in range(rows):
        if eligible[i]:
            for j in range(cols):
                targets[k] = h1[i, j] % p
                k += 1
    bounds = _target_bounds(targets, partitions)
    at = bounds[:-1].copy()
    entries = np.empty((m, 3), h1.dtype)
    k = 0
    for i in range(rows):
        if eligible[i]:
            key = first_key + i
            for j in range(cols):
                t = targets[k]
                k += 1
                entries[at[t], 0], entries[at[t], 1], entries[at[t], 2] = h1[i, j], h2[i, j], key
                at[t] += 1
    return entries, bounds


@numba.njit(cache=True)
def _digest(h1: np.uint64, h2: np.uint64) -> np.uint64:
    x = h1 ^ (h2 * _GOLDEN)
    x ^= x >> np.uint64(32)
    x *= _MIX
    return x ^ (x >> np.uint64(29))


@numba.njit(cache=True)
def group_pairs(entries: np.ndarray, predecessors: bool) -> tuple[np.ndarray, np.ndarray]:
    """(later, earlier) keys (uint32) of the groups of entries with equal (h1, h2): each member
    after a group's first is paired with the first, and with `predecessors` also with the member
    before it when that is not the first (linear in the group's size, and enough to connect the
    group through verified pairs in the common case). Within a group keys must increase in the
    order of `entries` (`scatter_entries` writes them so, and a partition's files are read in
    part order); pairs come out in an order that depends only on `entries`."""
    n = len(entries)
    digests = np.empty(n, np.uint64)
    for i in range(n):
        digests[i] = _digest(entries[i, 0], entries[i, 1])
    slice_bits = 0
    while (n >> (slice_bits + _SLICE_BITS)) > 0:
        slice_bits += 1
    slices = np.empty(n, np.int64)
    for i in range(n):
        slices[i] = digests[i] >> np.uint64(64 - slice_bits) if slice_bits else 0
    order, bounds = counting_order(slices, 1 << slice_bits)
    largest = 1
    for s in range(1 << slice_bits):
        largest = max(largest, bounds[s + 1] - bounds[s])
    size = 2
    while size < 2 * largest:
        size *= 2
    first = np.empty(size, np.int64)  # entry index of the group's first member, per slot
    last = np.empty(size, np.uint64)  # the group's latest key
    later = np.empty(2 * n, np.uint32)
    earlier = np.empty(2 * n, np.uint32)
    found = 0
    for s in range(1 << slice_bits):
        lo, hi = bounds[s], bounds[s + 1]
        if hi - lo < 2:
            continue
        mask = 2
        while mask < 2 * (hi - lo):
            mask *= 2
        mask -= 1
        first[: mask + 1] = _NO_ENTRY
        for at in range(lo, hi):
            i = order[at]
            h1, h2, key = entries[i, 0], entries[i, 1], entries[i, 2]
            slot = digests[i] & np.uint64(mask)
            while True:
                j = first[slot]
                if j == _NO_ENTRY:
                    first[slot], last[slot] = i, key
                    break
                if entries[j, 0] == h1 and entries[j, 1] == h2:
                    if key <= last[slot]:
                        raise ValueError("group_pairs: keys of a group do not increase")
                    head = entries[j, 2]
                    later[found], earlier[found] = key, head
                    found += 1
                    if predecessors and last[slot] != head:
                        later[found], earlier[found] = key, last[slot]
                        found += 1
                    last[slot] = key
                    break
                slot = (slot + np.uint64(1)) & np.uint64(mask)
    return later[:found].copy(), earlier[:found].copy()
