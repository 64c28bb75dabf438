"""The paragraphs of a batch of texts: every non-blank line, stripped of its surrounding whitespace
and hashed, in one compiled call.

    found = paragraphs(["Home\n  Story one. \n\nHome", "Story two."])
    found.hashes, found.docs, found.lines   # uint64, int64, int64: one row per non-blank line
    found.text_bytes                        # int64 per text: its UTF-8 size

A paragraph is a line of the text as `text.split("\\n")` cuts it (`lines[i]` is the index of the
line in that list), so CR of a CRLF text stays with its line. Lines are compared after stripping
the whitespace `str.strip()` strips (Unicode White_Space: ASCII's, U+0085, U+00A0, U+1680,
U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000), and nothing else (no case folding or
normalization); a line empty after stripping is blank and has no row. Its hash is the first 64
bits of the BLAKE2b-128 (`pretrainkit.dataprep.kernels.digests`) of its stripped UTF-8 bytes: at a
billion distinct paragraphs, the chance that two of them share a hash is about 3%.
"""

from __future__ import annotations

from typing import NamedTuple

import numba
import numpy as np

from pretrainkit.dataprep.kernels.digests import blake2b_128
from pretrainkit.dataprep.kernels.pieces import joined

_NEWLINE = 10
_ASCII_SPACE = np.zeros(128, np.bool_)
_ASCII_SPACE[list(b"\t\n\x0b\x0c\r\x1c\x1d\x1e\x1f ")] = True  # str.isspace's ASCII characters


class Paragraphs(NamedTuple):
    hashes: np.ndarray  # uint64 per paragraph
    docs: np.ndarray  # int64: the index of its text in the batch
    lines: np.ndarray  # int64: its index in text.split("\n")
    text_bytes: np.ndarray  # int64 per text


def paragraphs(texts: list[str]) -> Paragraphs:
    """The non-blank lines of `texts`, hashed (see the module docstring)."""
    buf, offsets = joined([t.encode("utf-8", "surrogatepass") for t in texts])
    stripped, line_offsets, docs, lines = _stripped_lines(buf, offsets)
    hashes = blake2b_128(stripped, line_offsets)[:, 0].copy()
    return Paragraphs(hashes, docs, lines, np.diff(offsets))


@numba.njit(cache=True, inline="always")
def _three_byte_space(a: int, b: int, c: int) -> bool:
    """Whether the UTF-8 sequence a b c is one of the three-byte White_Space characters."""
    if a == 0xE1:
        return b == 0x9A and c == 0x80  # U+1680
    if a == 0xE2:
        if b == 0x80:
            return 0x80 <= c <= 0x8A or c == 0xA8 or c == 0xA9 or c == 0xAF  # U+2000-200A, 2028, 2029, 202F
        return b == 0x81 and c == 0x9F  # U+205F
    return a == 0xE3 and b == 0x80 and c == 0x80  # U+3000


@numba.njit(cache=True, inline="always")
def _space_starting(buf: np.ndarray, at: int, end: int) -> int:
    """The length of the whitespace character at `at` (a character boundary), 0 if it is none."""
    a = buf[at]
    if a < 0x80:
        return 1 if _ASCII_SPACE[a] else 0
    if a == 0xC2:
        return 2 if end - at >= 2 and (buf[at + 1] == 0x85 or buf[at + 1] == 0xA0) else 0
    return 3 if end - at >= 3 and _three_byte_space(a, buf[at + 1], buf[at + 2]) else 0


@numba.njit(cache=True, inline="always")
def _space_ending(buf: np.ndarray, start: int, at: int) -> int:
    """The length of the whitespace character ending at `at`, 0 if it is none. UTF-8 is
    self-synchronizing: a whole sequence matched backwards is a character."""
    c = buf[at - 1]
    if c < 0x80:
        return 1 if _ASCII_SPACE[c] else 0
    if at - start >= 2 and buf[at - 2] == 0xC2 and (c == 0x85 or c == 0xA0):
        return 2
    return 3 if at - start >= 3 and _three_byte_space(buf[at - 3], buf[at - 2], c) else 0


@numba.njit(cache=True)
def _stripped_lines(buf: np.ndarray, doc_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(stripped lines joined, where each starts with the end last, text index, line index) of the
    non-blank lines of the texts buf[doc_offsets[d]:doc_offsets[d + 1]]."""
    most = len(doc_offsets) - 1
    for b in buf:
        if b == _NEWLINE:
            most += 1
    out = np.empty(len(buf), np.uint8)
    offsets = np.zeros(most + 1, np.int64)
    docs = np.empty(most, np.int64)
    lines = np.empty(most, np.int64)
    n = written = 0
    for d in range(len(doc_offsets) - 1):
        lo, end, line = doc_offsets[d], doc_offsets[d + 1], 0
        while True:
            hi = lo
            while hi < end and buf[hi] != _NEWLINE:
                hi += 1
            a, z = lo, hi
            while a < z:
                k = _space_starting(buf, a, z)
                if k == 0:
                    break
                a += k
            while z > a:
                k = _space_ending(buf, a, z)
                if k == 0:
                    break
                z -= k
            if z > a:
                out[written : written + z - a] = buf[a:z]
                written += z - a
                docs[n], lines[n] = d, line
                n += 1
                offsets[n] = written
            if hi == end:
                break
            lo, line = hi + 1, line + 1
    return out[:written], offsets[: n + 1], docs[:n], lines[:n]
