"""Dedup's compiled match loops equal slow references: the counting sort is the stable argsort,
entries land in their partition in row order, and the pairs of groups of equal hashes are those of
sorting the entries (each member with its group's first, and with its predecessor), for groups
of one to thousands of members, in tables of one slice or many."""

from __future__ import annotations

import numpy as np
import pytest

from pretrainkit.dataprep.dedup.grouping import band_halves, counting_order, group_pairs, scatter_entries


def reference_pairs(entries: np.ndarray, predecessors: bool) -> list[tuple[int, int]]:
    groups: dict[tuple[int, int], list[int]] = {}
    for h1, h2, key in entries.tolist():
        groups.setdefault((h1, h2), []).append(key)
    pairs = []
    for keys in groups.values():
        keys = sorted(keys)
        for i in range(1, len(keys)):
            pairs.append((keys[i], keys[0]))
            if predecessors and i > 1:
                pairs.append((keys[i], keys[i - 1]))
    return sorted(pairs)


def random_entries(rng: np.random.Generator, docs: int, hashes_per_doc: int, distinct: int) -> np.ndarray:
    """Entries in key order, as the bucket files hold them; `distinct` bounds the hash values, so
    that many entries share one (a few groups hold thousands of members)."""
    h1 = rng.integers(distinct, size=(docs, hashes_per_doc), dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    h1[: docs // 4, 0] = np.uint64(12345)  # one group of a quarter of the documents
    h2 = np.broadcast_to(np.arange(hashes_per_doc, dtype=np.uint64), h1.shape)
    keys = np.repeat(np.arange(docs, dtype=np.uint64) * np.uint64(3) + np.uint64(1 << 31), hashes_per_doc)
    return np.stack([h1.ravel(), h2.ravel(), keys], axis=1)


@pytest.mark.parametrize("docs", [0, 1, 7, 3_000, 40_000])  # 40K docs x 4 hashes: many table slices
@pytest.mark.parametrize("predecessors", [False, True])
def test_group_pairs_equal_sorting_the_groups(docs, predecessors):
    entries = random_entries(np.random.default_rng(docs), docs, 4, distinct=max(1, docs))
    later, earlier = group_pairs(entries, predecessors)
    assert later.dtype == earlier.dtype == np.uint32
    assert sorted(zip(later.tolist(), earlier.tolist())) == reference_pairs(entries, predecessors)


def test_group_pairs_tells_equal_digests_apart():
    """Entries that differ only in h2, or whose h1 collide in the table, stay in their own groups."""
    rng = np.random.default_rng(1)
    n = 10_000
    h1 = rng.integers(50, size=n, dtype=np.uint64)  # few h1 values, many h2 values per h1
    h2 = rng.integers(3, size=n, dtype=np.uint64)
    entries = np.stack([h1, h2, np.arange(n, dtype=np.uint64)], axis=1)
    later, earlier = group_pairs(entries, True)
    assert sorted(zip(later.tolist(), earlier.tolist())) == reference_pairs(entries, True)


def test_group_pairs_refuses_keys_out_of_order():
    entries = np.array([[5, 0, 9], [5, 0, 4]], dtype=np.uint64)
    with pytest.raises(ValueError, match="do not increase"):
        group_pairs(entries, False)


@pytest.mark.parametrize("dtype", [np.int64, np.uint64])
def test_counting_order_is_the_stable_argsort(dtype):
    targets = np.random.default_rng(3).integers(17, size=50_000).astype(dtype)
    order, bounds = counting_order(targets, 17)
    assert np.array_equal(order, np.argsort(targets, kind="stable"))
    assert np.array_equal(bounds, np.searchsorted(np.sort(targets), np.arange(18)))


def test_scatter_entries_groups_rows_by_partition_in_row_order():
    rng = np.random.default_rng(4)
    rows, cols, partitions, first_key = 5_000, 3, 7, 1_000_000
    h1 = rng.integers(1 << 63, size=(rows, cols), dtype=np.uint64)
    h2 = np.broadcast_to(np.arange(cols, dtype=np.uint64), h1.shape)
    eligible = rng.random(rows) < 0.7
    entries, bounds = scatter_entries(h1, h2, eligible, first_key, partitions)

    keys = np.repeat(np.flatnonzero(eligible).astype(np.uint64) + np.uint64(first_key), cols)
    flat = np.stack([h1[eligible].ravel(), h2[eligible].ravel(), keys], axis=1)
    order = np.argsort(flat[:, 0] % np.uint64(partitions), kind="stable")
    assert np.array_equal(entries, flat[order])
    assert np.array_equal(
        bounds, np.searchsorted(np.sort(flat[:, 0] % np.uint64(partitions)), np.arange(partitions + 1))
    )


@pytest.mark.parametrize("partitions", [1, 6])
def test_band_entries_pair_as_their_hash_and_band_number(partitions):
    """12-byte band entries (`band_halves`: uint32) give the pairs of (band hash, band number)
    entries: equal hashes in different bands never pair, equal ones in the same band always do."""
    rng = np.random.default_rng(5)
    docs, bands = 20_000, 16
    pool = rng.integers(1 << 64, size=docs // 4, dtype=np.uint64, endpoint=False)  # mixed, as band hashes are
    hashes = pool[rng.integers(len(pool), size=(docs, bands))]  # each value in many bands
    eligible = rng.random(docs) < 0.9
    h1, h2 = band_halves(hashes)
    entries, bounds = scatter_entries(h1, h2, eligible, 7, partitions)
    assert entries.dtype == np.uint32 and entries.shape == (eligible.sum() * bands, 3)
    pairs = []
    for p in range(partitions):
        later, earlier = group_pairs(entries[bounds[p] : bounds[p + 1]], True)
        pairs += zip(later.tolist(), earlier.tolist())
    wide, _ = scatter_entries(hashes, np.broadcast_to(np.arange(bands, dtype=np.uint64), hashes.shape), eligible, 7, 1)
    assert sorted(pairs) == reference_pairs(wide, True)
    assert len(pairs) > docs  # the test has groups to find
