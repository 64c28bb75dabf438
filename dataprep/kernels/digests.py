"""BLAKE2b-128 digests of many byte strings at once, in one compiled loop (RFC 7693).

    digests = blake2b_128(buf, offsets)   # uint64 [n, 2]: the digest of buf[offsets[i]:offsets[i + 1]]

Each row's 16 bytes (little-endian) are `hashlib.blake2b(piece, digest_size=16).digest()`; with
`strip=True`, of the piece without its leading and trailing ASCII whitespace (what `bytes.strip`
with `str.strip`'s ASCII characters removes). The scan hashes every document's text and id this
way: a call of hashlib per document costs more in Python than the hashing itself.
"""

from __future__ import annotations

import numba
import numpy as np

_U64 = np.uint64
_IV = np.array(
    [
        0x6A09E667F3BCC908,
        0xBB67AE8584CAA73B,
        0x3C6EF372FE94F82B,
        0xA54FF53A5F1D36F1,
        0x510E527FADE682D1,
        0x9B05688C2B3E6C1F,
        0x1F83D9ABFB41BD6B,
        0x5BE0CD19137E2179,
    ],
    dtype=_U64,
)
_SIGMA = np.array(
    [
        [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15],
        [14, 10, 4, 8, 9, 15, 13, 6, 1, 12, 0, 2, 11, 7, 5, 3],
        [11, 8, 12, 0, 5, 2, 15, 13, 10, 14, 3, 6, 7, 1, 9, 4],
        [7, 9, 3, 1, 13, 12, 11, 14, 2, 6, 5, 10, 4, 0, 15, 8],
        [9, 0, 5, 7, 2, 4, 10, 15, 14, 1, 11, 12, 6, 8, 3, 13],
        [2, 12, 6, 10, 0, 11, 8, 3, 4, 13, 7, 5, 15, 14, 1, 9],
        [12, 5, 1, 15, 14, 13, 4, 10, 0, 7, 6, 3, 9, 2, 8, 11],
        [13, 11, 7, 14, 12, 1, 3, 9, 5, 0, 15, 4, 8, 6, 2, 10],
        [6, 15, 14, 9, 11, 3, 0, 8, 12, 2, 13, 7, 1, 4, 10, 5],
        [10, 2, 8, 4, 7, 6, 1, 5, 15, 11, 9, 14, 3, 12, 13, 0],
    ],
    dtype=np.int64,
)
_PARAMS_16 = _U64(0x01010010)  # digest length 16, no key, fanout 1, depth 1
_ASCII_WHITESPACE = np.zeros(256, np.bool_)
_ASCII_WHITESPACE[list(b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f")] = True  # exactly what str.strip() removes from ASCII text


@numba.njit(cache=True, inline="always")
def _rotr(x, n):
    return (x >> _U64(n)) | (x << _U64(64 - n))


@numba.njit(cache=True, inline="always")
def _mix(a, b, c, d, x, y):
    a = a + b + x
    d = _rotr(d ^ a, 32)
    c = c + d
    b = _rotr(b ^ c, 24)
    a = a + b + y
    d = _rotr(d ^ a, 16)
    c = c + d
    b = _rotr(b ^ c, 63)
    return a, b, c, d


@numba.njit(cache=True)
def _compress(h: np.ndarray, m: np.ndarray, counter: int, last: bool) -> None:
    v0, v1, v2, v3, v4, v5, v6, v7 = h[0], h[1], h[2], h[3], h[4], h[5], h[6], h[7]
    v8, v9, v10, v11 = _IV[0], _IV[1], _IV[2], _IV[3]
    v12, v13, v14, v15 = _IV[4] ^ _U64(counter), _IV[5], _IV[6], _IV[7]  # counters stay below 2^64
    if last:
        v14 = ~v14
    for r in range(12):
        s = _SIGMA[r % 10]
        v0, v4, v8, v12 = _mix(v0, v4, v8, v12, m[s[0]], m[s[1]])
        v1, v5, v9, v13 = _mix(v1, v5, v9, v13, m[s[2]], m[s[3]])
        v2, v6, v10, v14 = _mix(v2, v6, v10, v14, m[s[4]], m[s[5]])
        v3, v7, v11, v15 = _mix(v3, v7, v11, v15, m[s[6]], m[s[7]])
        v0, v5, v10, v15 = _mix(v0, v5, v10, v15, m[s[8]], m[s[9]])
        v1, v6, v11, v12 = _mix(v1, v6, v11, v12, m[s[10]], m[s[11]])
        v2, v7, v8, v13 = _mix(v2, v7, v8, v13, m[s[12]], m[s[13]])
        v3, v4, v9, v14 = _mix(v3, v4, v9, v14, m[s[14]], m[s[15]])
    h[0] ^= v0 ^ v8
    h[1] ^= v1 ^ v9
    h[2] ^= v2 ^ v10
    h[3] ^= v3 ^ v11
    h[4] ^= v4 ^ v12
    h[5] ^= v5 ^ v13
    h[6] ^= v6 ^ v14
    h[7] ^= v7 ^ v15


@numba.njit(cache=True)
def _digests(buf: np.ndarray, offsets: np.ndarray, strip: bool, out: np.ndarray) -> None:
    block = np.zeros(16, _U64)
    block_bytes = block.view(np.uint8)  # message words are little-endian, as the machine's
    h = np.empty(8, _U64)
    for i in range(len(offsets) - 1):
        lo, hi = offsets[i], offsets[i + 1]
        if strip:
            while lo < hi and _ASCII_WHITESPACE[buf[lo]]:
                lo += 1
            while hi > lo and _ASCII_WHITESPACE[buf[hi - 1]]:
                hi -= 1
        h[:] = _IV
        h[0] ^= _PARAMS_16
        at = lo
        while True:  # every block but the last is full; the last (empty for empty input) is padded with zeros
            take = min(128, hi - at)
            block[:] = 0
            block_bytes[:take] = buf[at : at + take]
            at += take
            _compress(h, block, at - lo, at == hi)
            if at == hi:
                break
        out[i, 0], out[i, 1] = h[0], h[1]


def blake2b_128(buf: np.ndarray, offsets: np.ndarray, strip: bool = False) -> np.ndarray:
    """uint64 [len(offsets) - 1, 2]: the BLAKE2b-128 of each piece buf[offsets[i]:offsets[i + 1]]
    (buf uint8, offsets int64 and ascending); `strip`: of each piece without its ASCII whitespace ends."""
    out = np.empty((len(offsets) - 1, 2), _U64)
    _digests(buf, offsets, strip, out)
    return out
