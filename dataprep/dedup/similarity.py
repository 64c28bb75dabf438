"""Exact Jaccard similarity of documents' shingle sets, for many pairs of global keys at once.

    sims = pair_similarities(pairs, parts, offsets, chunk_pairs=1 << 16, chunk_bytes=64 << 20)   # float64 per row
    linked = pairs_reaching(0.8, pairs, parts, offsets, chunk_pairs, chunk_bytes)      # bool per row
    jaccard(a, b)                          # of two sorted unique uint32 arrays (compiled)

A document's set is its run of sorted unique uint32 hashes in its part's `.shingles` file; where
each run starts comes from `.counts` (`IndexPart.shingle_extents`), once per call for all the keys
it names. Then, a chunk of pairs at a time (at most `chunk_pairs`, whose sets take at most
`chunk_bytes`, or a single pair), the chunk's distinct documents are gathered into one
buffer (`index.read_extents`: compiled positioned reads in file order, documents a few KB apart
sharing one), and a compiled loop merges each pair's two sorted runs.
Python does a few numpy calls per chunk, nothing per pair or per document.

Memory: one chunk's shingle sets and the scratch buffer, plus ~40 bytes per pair of the call
(each pair's two document numbers and the distinct keys with their extents). Nothing is
memory-mapped: a process's resident memory holds what it read, not the pages of every file it
touched.
"""

from __future__ import annotations

import numba
import numpy as np

from pretrainkit.dataprep.dedup.index import IndexPart, read_extents
from pretrainkit.dataprep.dedup.pairs import distinct


@numba.njit(cache=True)
def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|a & b| / |a | b| of two sorted unique arrays; 1.0 for two empty ones, 0.0 for one."""
    na, nb = len(a), len(b)
    if na == 0 or nb == 0:
        return 1.0 if na == nb else 0.0
    i = j = inter = 0
    while i < na and j < nb:  # a merge without branches on the data: they are unpredictable
        x, y = a[i], b[j]
        inter += x == y
        i += x <= y
        j += y <= x
    return inter / (na + nb - inter)


@numba.njit(cache=True)
def _pair_jaccards(shingles: np.ndarray, bounds: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    out = np.empty(len(first), np.float64)
    for p in range(len(first)):
        a, b = first[p], second[p]
        out[p] = jaccard(shingles[bounds[a] : bounds[a + 1]], shingles[bounds[b] : bounds[b + 1]])
    return out


@numba.njit(cache=True)
def _reaches(a: np.ndarray, b: np.ndarray, threshold: float) -> bool:
    """jaccard(a, b) >= threshold, the merge stopped as soon as the intersection so far settles it."""
    na, nb = len(a), len(b)
    if na == 0 or nb == 0:
        return (1.0 if na == nb else 0.0) >= threshold
    lo, hi = 0, min(na, nb) + 1  # the least intersection whose Jaccard, computed as `jaccard` does, reaches it
    while lo < hi:
        mid = (lo + hi) // 2
        if mid / (na + nb - mid) >= threshold:
            hi = mid
        else:
            lo = mid + 1
    need = lo
    i = j = inter = 0
    while i < na and j < nb:
        if inter >= need:
            return True
        if inter + min(na - i, nb - j) < need:
            return False
        x, y = a[i], b[j]
        inter += x == y
        i += x <= y
        j += y <= x
    return inter >= need


@numba.njit(cache=True)
def _pairs_reach(
    shingles: np.ndarray, bounds: np.ndarray, first: np.ndarray, second: np.ndarray, threshold: float
) -> np.ndarray:
    out = np.empty(len(first), np.bool_)
    for p in range(len(first)):
        a, b = first[p], second[p]
        out[p] = _reaches(shingles[bounds[a] : bounds[a + 1]], shingles[bounds[b] : bounds[b + 1]], threshold)
    return out


def _chunks(pair_bytes: np.ndarray, chunk_pairs: int, chunk_bytes: int) -> list[tuple[int, int]]:
    """Consecutive (lo, hi) ranges of pairs, each at most `chunk_pairs` long and `chunk_bytes` of
    sets (counting a set once per pair that names it: a bound), or one pair."""
    ends = np.cumsum(pair_bytes)
    out, lo = [], 0
    while lo < len(pair_bytes):
        within = int(np.searchsorted(ends, (ends[lo - 1] if lo else 0) + chunk_bytes, side="right"))
        hi = min(max(within, lo + 1), lo + chunk_pairs, len(pair_bytes))
        out.append((lo, hi))
        lo = hi
    return out


def pair_similarities(
    pairs: np.ndarray, parts: list[IndexPart], offsets: np.ndarray, chunk_pairs: int, chunk_bytes: int
) -> np.ndarray:
    """Exact Jaccard of each (key, key) row of `pairs` (keys global: part p holds offsets[p] ..
    offsets[p + 1] - 1), reading the sets of a chunk of pairs at a time (see the module)."""
    return _each_pair(pairs, parts, offsets, chunk_pairs, chunk_bytes, None)


def pairs_reaching(
    threshold: float, pairs: np.ndarray, parts: list[IndexPart], offsets: np.ndarray, chunk_pairs: int, chunk_bytes: int
) -> np.ndarray:
    """Whether each pair's Jaccard reaches `threshold`: `pair_similarities(...) >= threshold`, with
    less work. A pair whose set sizes alone rule it out is never read (its Jaccard is at most
    small / large, and below the threshold when that ratio is, in floating point too), and a
    merge stops once the intersection so far settles the answer."""
    return _each_pair(pairs, parts, offsets, chunk_pairs, chunk_bytes, threshold)


def _each_pair(
    pairs: np.ndarray,
    parts: list[IndexPart],
    offsets: np.ndarray,
    chunk_pairs: int,
    chunk_bytes: int,
    threshold: float | None,
) -> np.ndarray:
    """`pair_similarities` (threshold None) or `pairs_reaching`."""
    keys, docs = np.unique(np.asarray(pairs, dtype=np.int64).ravel(), return_inverse=True)
    docs = docs.reshape(-1, 2)
    where = np.searchsorted(offsets, keys, side="right") - 1
    starts, counts = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
    for p in distinct(where).tolist():  # keys are sorted: each part's are one run, in file order
        run = slice(*np.searchsorted(where, [p, p + 1]))
        starts[run], counts[run] = parts[p].shingle_extents(keys[run] - int(offsets[p]))
    if threshold is None:
        out, todo = np.empty(len(docs), np.float64), np.arange(len(docs))
    else:
        small, large = np.sort(counts[docs], axis=1).T
        out, todo = (
            np.zeros(len(docs), np.bool_),
            np.flatnonzero((large == 0) | (small / np.maximum(large, 1) >= threshold)),
        )
    docs = docs[todo]
    shingle_files = [f"{part.base}.shingles" for part in parts]
    for lo, hi in _chunks(4 * (counts[docs[:, 0]] + counts[docs[:, 1]]), chunk_pairs, chunk_bytes):
        needed, local = np.unique(docs[lo:hi].ravel(), return_inverse=True)
        local = local.reshape(-1, 2)
        bounds = np.concatenate(([0], np.cumsum(counts[needed])))
        shingles = read_extents(shingle_files, where[needed], 4 * starts[needed], 4 * counts[needed]).view(np.uint32)
        out[todo[lo:hi]] = (
            _pair_jaccards(shingles, bounds, local[:, 0], local[:, 1])
            if threshold is None
            else _pairs_reach(shingles, bounds, local[:, 0], local[:, 1], threshold)
        )
    return out
