"""Pieces of bytes in one buffer: joined with their offsets, and the kept ones copied by a compiled
loop (a run of kept pieces is one copy).

    buf, offsets = joined([b"ab", b"cde"])        # uint8 b"abcde", int64 [0, 2, 5]
    copied = copy_kept(data, ends, flags, out)    # out[:copied]: the pieces i with flags[i]

Piece i of `data` (a uint8 array) ends at `ends[i]` (the next starts there; a last piece without an
end runs to the end of `data`). numpy's boolean indexing would need a flag per byte (np.repeat);
this reads each piece's flag once. Used for records (pieces: lines), shingle sets and ids; it
releases the GIL (the write stage copies records and index pieces in two threads at once).
"""

from __future__ import annotations

import numba
import numpy as np


def joined(pieces: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """The pieces one after another (uint8) and where each starts, with the end last (int64, one more)."""
    offsets = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum([len(p) for p in pieces], out=offsets[1:])
    return np.frombuffer(b"".join(pieces), np.uint8), offsets


@numba.njit(cache=True, nogil=True)
def copy_kept(data: np.ndarray, ends: np.ndarray, flags: np.ndarray, out: np.ndarray) -> int:
    """Copy to `out` the pieces of `data` whose flag is set; returns the bytes copied."""
    copied = run_start = 0
    start = 0
    for i in range(len(flags) + 1):
        end = len(data) if i >= len(ends) else ends[i]
        if i == len(flags) or not flags[i]:
            if start > run_start:
                out[copied : copied + start - run_start] = data[run_start:start]
                copied += start - run_start
            run_start = end
        start = end
    return copied
