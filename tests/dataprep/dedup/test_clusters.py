"""Dedup's clustering and pair files: components over a memory-mapped label array, read in small
chunks, equal a reference union-find on random graphs, long chains and stars; pair files keep
every pair, in its partition, in order."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from pretrainkit.dataprep.dedup.clusters import label_components
from pretrainkit.dataprep.dedup.pairs import by_hash, by_range, pair_chunks, read_partition, write_fanout


def union_find_minima(n: int, edges: np.ndarray) -> np.ndarray:
    parent = list(range(n))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in edges.tolist():
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)  # the root stays the smallest key of its component
    return np.array([find(x) for x in range(n)], dtype=np.uint32)


def graph(shape: str, n: int, rng: np.random.Generator) -> np.ndarray:
    if shape == "random":  # many small components and a few large ones
        return rng.integers(n, size=(n // 2, 2))
    if shape == "chain in key order":
        return np.stack([np.arange(n - 1), np.arange(1, n)], axis=1)
    if shape == "chain in reverse order":
        return np.stack([np.arange(n - 1, 0, -1), np.arange(n - 2, -1, -1)], axis=1)
    if shape == "chain through shuffled keys, edges shuffled":  # the longest paths between labels
        order = rng.permutation(n)
        edges = np.stack([order[:-1], order[1:]], axis=1)
        return edges[rng.permutation(len(edges))]
    if shape == "stars and self-loops":
        hubs = rng.integers(n, size=n // 3)
        return np.concatenate(
            [np.stack([hubs, rng.integers(n, size=len(hubs))], axis=1), np.repeat(hubs[:5, None], 2, axis=1)]
        )
    raise ValueError(shape)


@pytest.mark.parametrize(
    "shape",
    [
        "random",
        "chain in key order",
        "chain in reverse order",
        "chain through shuffled keys, edges shuffled",
        "stars and self-loops",
    ],
)
def test_components_equal_a_reference_union_find(tmp_path, shape):
    rng = np.random.default_rng(7)
    n = 20_000
    edges = graph(shape, n, rng).astype(np.uint32)
    label = np.memmap(tmp_path / "labels.u32", dtype=np.uint32, mode="w+", shape=(n,))
    label[:] = np.arange(n, dtype=np.uint32)
    chunk = 1_013  # edges and keys read in pieces far smaller than the graph
    label_components(label, lambda: (edges[i : i + chunk] for i in range(0, len(edges), chunk)), chunk_keys=777)
    assert np.array_equal(np.asarray(label), union_find_minima(n, edges))


def test_no_edges_leaves_every_key_its_own_label():
    label = np.arange(10, dtype=np.uint32)
    assert label_components(label, lambda: iter([np.empty((0, 2), np.uint32)]), chunk_keys=4) == 1
    assert np.array_equal(label, np.arange(10))


def test_pair_files_keep_every_pair_in_its_partition(tmp_path: Path):
    rng = np.random.default_rng(3)
    writers = [rng.integers(1000, size=(500, 2)).astype(np.uint32) for _ in range(3)]
    for w, pairs in enumerate(writers):
        write_fanout(tmp_path / "range", w, pairs, by_range(pairs, 128), 8)
        write_fanout(tmp_path / "hash", w, pairs, by_hash(pairs, 5), 5)
    everything = np.concatenate(writers)
    for t in range(8):  # by range of the first key: every writer's pairs of the range, in writer order
        assert np.array_equal(read_partition(tmp_path / "range", t), everything[everything[:, 0] // 128 == t])
    hashed = [read_partition(tmp_path / "hash", t) for t in range(5)]
    assert sum(len(h) for h in hashed) == len(everything)
    assert max(len(h) for h in hashed) < len(everything) / 2  # spread over the partitions
    for t, h in enumerate(hashed):
        assert np.all(by_hash(h, 5) == t)
    file = next((tmp_path / "range" / "00000").glob("*.bin"))
    assert np.array_equal(np.concatenate(list(pair_chunks(file, 7))), np.fromfile(file, np.uint32).reshape(-1, 2))
