"""splitmix64's finalizer, the mixing step of the stages' 64-bit hashes (dedup's MinHash words and
bands, decontaminate's n-grams).

    h = mix64(np.arange(4, dtype=np.uint64))   # on numpy arrays
    _mix64 = numba.njit(cache=True)(mix64)      # on scalars inside a stage's kernels
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64


def mix64(x):
    """splitmix64's finalizer: a bijective, well-mixing map on uint64 (wraps mod 2^64); on numpy
    arrays, and (compiled by the caller) on scalars inside the kernels."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))
