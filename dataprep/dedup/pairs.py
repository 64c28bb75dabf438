"""Pair files: the key pairs a job finds, fanned out to partition files that later jobs read whole.

    write_fanout(Path("pairs"), writer=3, pairs=found, targets=by_range(found, range_docs), fanout=n)
    read_partition(Path("pairs"), 7)          # every writer's pairs of partition 7, writer order

A pair is two uint32 keys (8 bytes). Partition `t` is the folder `t:05d/`, one file per writer
that found pairs for it (`wWWWWW.bin`, written atomically; empty ones are not written), so a
stage's pairs never have to be in one process: a partition is a bounded share of them, as the
fan-out is chosen from the memory budget. `by_range` partitions by the first key's range (what a
job over a range of keys needs), `by_hash` by a hash of the pair (even for skewed keys).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.dedup.grouping import counting_order
from pretrainkit.files import atomic_write

PAIR_BYTES = 8
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def by_range(pairs: np.ndarray, range_docs: int) -> np.ndarray:
    return pairs[:, 0].astype(np.int64) // range_docs


def pack(first: np.ndarray, second: np.ndarray) -> np.ndarray:
    """uint64 (first << 32) | second per pair: one value to sort, deduplicate or hash pairs by."""
    return (np.asarray(first).astype(np.uint64) << np.uint64(32)) | np.asarray(second).astype(np.uint64)


def unpack(packed: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The [n, 2] pairs of `pack`'s values, as `dtype`."""
    return np.stack([packed >> np.uint64(32), packed & np.uint64(0xFFFFFFFF)], axis=1).astype(dtype)


def distinct(values: np.ndarray) -> np.ndarray:
    """The sorted distinct values, as np.unique gives them, by one sort: numpy 2.4's np.unique
    without return_inverse goes through a hash table, ~50x slower on large integer arrays."""
    ordered = np.sort(values)
    return ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))] if len(ordered) else ordered


def by_hash(pairs: np.ndarray, fanout: int) -> np.ndarray:
    return ((pack(pairs[:, 0], pairs[:, 1]) * _GOLDEN) >> np.uint64(32)) % np.uint64(fanout)


def write_fanout(directory: Path, writer: int, pairs: np.ndarray, targets: np.ndarray, fanout: int) -> None:
    """Write `pairs` (uint32 [n, 2]) into the partitions `targets` names, keeping their order."""
    order, bounds = counting_order(targets, fanout)
    for t in np.flatnonzero(np.diff(bounds)).tolist():
        with atomic_write(directory / f"{t:05d}" / f"w{writer:05d}.bin", durable=False) as f:
            f.write(np.ascontiguousarray(pairs[order[bounds[t] : bounds[t + 1]]], dtype=np.uint32).tobytes())


def partition_files(directory: Path, t: int) -> list[Path]:
    d = directory / f"{t:05d}"
    return sorted(d.glob("w*.bin")) if d.is_dir() else []


def partition_pairs(directory: Path, t: int) -> int:
    return sum(f.stat().st_size for f in partition_files(directory, t)) // PAIR_BYTES


def read_partition(directory: Path, t: int) -> np.ndarray:
    files = partition_files(directory, t)
    if not files:
        return np.empty((0, 2), np.uint32)
    return np.concatenate([np.fromfile(f, dtype=np.uint32).reshape(-1, 2) for f in files])


def pair_chunks(path: Path, chunk_pairs: int) -> Iterator[np.ndarray]:
    """The pairs of one file, `chunk_pairs` at a time."""
    total = path.stat().st_size // PAIR_BYTES
    for lo in range(0, total, chunk_pairs):
        n = min(chunk_pairs, total - lo)
        yield np.fromfile(path, dtype=np.uint32, count=2 * n, offset=lo * PAIR_BYTES).reshape(-1, 2)
