"""Exact Jaccard similarity of documents' shingle sets, for many pairs of global keys at once.

    sims = pair_similarities(pairs, parts, offsets, chunk_pairs=1 << 16, chunk_bytes=64 << 20)   # float64 per row
    jaccard(a, b)                          # of two sorted unique uint32 arrays (compiled)

A document's set is its run of sorted unique uint32 hashes in its part's `.shingles` file; where
each run starts comes from `.counts` (`IndexPart.shingle_extents`), once per call for all the keys
it names. Then, a chunk of pairs at a time (at most `chunk_pairs`, whose sets take at most
`chunk_bytes`, or a single pair), the chunk's distinct documents are gathered into one
buffer by a compiled loop of positioned reads in file order (documents a few KB apart share one
read, through a small scratch buffer), and a compiled loop merges each pair's two sorted runs.
Python does a few numpy calls per chunk, nothing per pair or per document.

Memory: one chunk's shingle sets and the scratch buffer, plus ~40 bytes per pair of the call
(each pair's two document numbers and the distinct keys with their extents). Nothing is
memory-mapped: a process's resident memory holds what it read, not the pages of every file it
touched.
"""

from __future__ import annotations

import contextlib
import os

import numba
import numpy as np
from numba import types

from dataprep.dedup.index import IndexPart
from pretrainkit.errors import UserError

COALESCE_GAP = 4096  # bytes between two documents still read by one call: about what a read call costs in copying
SCRATCH_BYTES = 1 << 20

_pread = types.ExternalFunction("pread", types.intp(types.intc, types.voidptr, types.uintp, types.int64))


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
def _gather(fds: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> int:
    """Read byte extents (offsets[i], sizes[i]) of files fds[i], sorted by (file, offset), one after
    another into `out`; returns -1, or the first extent a read came short for."""
    pos, i, n = 0, 0, len(fds)
    while i < n:
        j, end = i + 1, offsets[i] + sizes[i]
        while j < n and fds[j] == fds[i] and offsets[j] - end <= COALESCE_GAP and offsets[j] + sizes[j] - offsets[i] <= len(scratch):
            end = offsets[j] + sizes[j]
            j += 1
        if j == i + 1:
            if _pread(fds[i], out[pos:].ctypes.data, sizes[i], offsets[i]) != sizes[i]:
                return i
            pos += sizes[i]
        else:
            if _pread(fds[i], scratch.ctypes.data, end - offsets[i], offsets[i]) != end - offsets[i]:
                return i
            for k in range(i, j):
                at = offsets[k] - offsets[i]
                out[pos : pos + sizes[k]] = scratch[at : at + sizes[k]]
                pos += sizes[k]
        i = j
    return -1


@numba.njit(cache=True)
def _pair_jaccards(shingles: np.ndarray, bounds: np.ndarray, first: np.ndarray, second: np.ndarray) -> np.ndarray:
    out = np.empty(len(first), np.float64)
    for p in range(len(first)):
        a, b = first[p], second[p]
        out[p] = jaccard(shingles[bounds[a] : bounds[a + 1]], shingles[bounds[b] : bounds[b + 1]])
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


def pair_similarities(pairs: np.ndarray, parts: list[IndexPart], offsets: np.ndarray, chunk_pairs: int, chunk_bytes: int) -> np.ndarray:
    """Exact Jaccard of each (key, key) row of `pairs` (keys global: part p holds offsets[p] ..
    offsets[p + 1] - 1), reading the sets of a chunk of pairs at a time (see the module)."""
    keys, docs = np.unique(np.asarray(pairs, dtype=np.int64).ravel(), return_inverse=True)
    docs = docs.reshape(-1, 2)
    where = np.searchsorted(offsets, keys, side="right") - 1
    starts, counts = np.empty(len(keys), np.int64), np.empty(len(keys), np.int64)
    touched = np.unique(where)
    for p in touched.tolist():  # keys are sorted: each part's are one run, in file order
        run = slice(*np.searchsorted(where, [p, p + 1]))
        starts[run], counts[run] = parts[p].shingle_extents(keys[run] - int(offsets[p]))
    scratch = np.empty(SCRATCH_BYTES, np.uint8)
    out = [np.empty(0, np.float64)]
    with contextlib.ExitStack() as stack:
        fd_of = np.full(len(parts), -1, np.int32)
        for p in touched.tolist():
            fd_of[p] = os.open(f"{parts[p].base}.shingles", os.O_RDONLY)
            stack.callback(os.close, int(fd_of[p]))
        for lo, hi in _chunks(4 * (counts[docs[:, 0]] + counts[docs[:, 1]]), chunk_pairs, chunk_bytes):
            chunk = docs[lo:hi]
            needed, local = np.unique(chunk.ravel(), return_inverse=True)
            local = local.reshape(-1, 2)
            bounds = np.concatenate(([0], np.cumsum(counts[needed])))
            shingles = np.empty(int(bounds[-1]), np.uint32)
            short = _gather(fd_of[where[needed]], 4 * starts[needed], 4 * counts[needed], shingles.view(np.uint8), scratch)
            if short >= 0:
                raise UserError(f"{parts[where[needed[short]]].base}.shingles: index file is shorter than its counts say; "
                                "rerun the dedup that wrote it")
            out.append(_pair_jaccards(shingles, bounds, local[:, 0], local[:, 1]))
    return np.concatenate(out)
