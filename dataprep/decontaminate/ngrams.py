"""Text normalized into words, and the 64-bit hashes of its word n-grams, in compiled loops.

    words = normalized_words("Don't PANIC, it's 42!")     # [b"dont", b"panic", b"its", b"42"]
    hashes = gram_hashes(text, ngram=13)                  # uint64, one per n-gram in word order
    first = first_hits(texts, ngram, table)               # per text: the word position of its first
                                                          # n-gram whose hash is in `table`, or -1

Normalization (GPT-3, Brown et al. 2020, Appendix C: "a gram as a lowercase, whitespace delimited
word with no punctuation"; the same as lm-evaluation-harness's janitor), exactly:
1. text that is not all ASCII is put in Unicode NFKC and then case-folded (`str.casefold`), so
   compatibility forms (ligatures, full-width letters, non-breaking spaces) and case meet;
   ASCII letters are lower-cased;
2. every character of Unicode category P (punctuation) or S (symbols) is deleted, without a space
   in its place: "don't" -> "dont", "e-mail" -> "email" (in ASCII: exactly `string.punctuation`);
3. words are the maximal runs of the other characters between whitespace (what `str.split()`
   splits on). Digits and letters of every script are word characters, kept as they are.

A word hashes to splitmix64's finalizer of its FNV-1a hash (UTF-8 bytes); an n-gram of words
w_0..w_{n-1} to the finalizer of sum(w_k * m_k) mod 2^64, with fixed odd multipliers m_k. The
hashes only find candidates: every hit is confirmed on the words themselves (`evalindex`).
"""

from __future__ import annotations

import sys
import unicodedata
from functools import lru_cache

import numba
import numpy as np

from pretrainkit.dataprep.kernels.hashing import mix64

_U64 = np.uint64
_WORD, _SPACE, _DELETED = 0, 1, 2  # classes of code points
_FNV_OFFSET = _U64(0xCBF29CE484222325)
_FNV_PRIME = _U64(0x100000001B3)
_mix64 = numba.njit(cache=True)(mix64)


@lru_cache(maxsize=1)
def code_point_classes() -> np.ndarray:
    """uint8 per code point: word character, whitespace (`str.isspace`) or deleted (category P or S)."""
    classes = np.zeros(sys.maxunicode + 1, np.uint8)
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        if c.isspace():
            classes[cp] = _SPACE
        elif unicodedata.category(c)[0] in "PS":
            classes[cp] = _DELETED
    return classes


@lru_cache(maxsize=8)
def multipliers(ngram: int) -> np.ndarray:
    return mix64(np.arange(1, ngram + 1, dtype=_U64) * _U64(0x9E3779B97F4A7C15)) | _U64(1)


def case_folded(text: str) -> bytes:
    """Step 1 of the normalization, as UTF-8 (steps 2 and 3 are `_clean_into`'s, on the bytes)."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text).casefold()
    return text.encode("utf-8", "surrogatepass")


@numba.njit(cache=True, nogil=True, inline="always")
def _class_at(buf: np.ndarray, i: int, hi: int, classes: np.ndarray) -> tuple[int, int]:
    """The class of the code point whose UTF-8 sequence starts at buf[i], and the sequence's length
    (a sequence cut by `hi` is decoded from what is there)."""
    b = buf[i]
    if b < 0x80:
        cp, size = np.int64(b), 1
    elif b < 0xE0:
        cp, size = np.int64(b & 0x1F), 2
    elif b < 0xF0:
        cp, size = np.int64(b & 0x0F), 3
    else:
        cp, size = np.int64(b & 0x07), 4
    for k in range(1, size):
        if i + k < hi:
            cp = (cp << 6) | np.int64(buf[i + k] & 0x3F)
    return (classes[cp] if cp < len(classes) else _WORD), size


@numba.njit(cache=True, nogil=True)
def _clean_into(buf: np.ndarray, lo: int, hi: int, classes: np.ndarray, out: np.ndarray) -> int:
    """The words of the UTF-8 bytes buf[lo:hi] into `out` (room for hi - lo bytes), each followed
    by one space: ASCII upper case lowered, deleted code points left out; returns the bytes written."""
    n = 0
    i = lo
    in_word = False
    while i < hi:
        cls, size = _class_at(buf, i, hi, classes)
        if cls == 1:
            if in_word:
                out[n] = 32
                n += 1
                in_word = False
        elif cls == 0:
            for k in range(size):
                if i + k < hi:
                    c = buf[i + k]
                    out[n] = c + 32 if 65 <= c <= 90 else c
                    n += 1
            in_word = True
        i += size
    if in_word:
        out[n] = 32
        n += 1
    return n


@numba.njit(cache=True, nogil=True)
def _word_hashes_into(clean: np.ndarray, n: int, out: np.ndarray) -> int:
    """The hash of every word of clean[:n] (words each followed by a space) into `out`; returns how many."""
    words = 0
    h = _FNV_OFFSET
    for i in range(n):
        c = clean[i]
        if c == 32:
            out[words] = _mix64(h)
            words += 1
            h = _FNV_OFFSET
        else:
            h = (h ^ _U64(c)) * _FNV_PRIME
    return words


@numba.njit(cache=True, nogil=True)
def _grams_into(words: np.ndarray, count: int, mult: np.ndarray, out: np.ndarray) -> int:
    ngram = len(mult)
    grams = count - ngram + 1
    for i in range(max(grams, 0)):
        g = _U64(0)
        for k in range(ngram):
            g += words[i + k] * mult[k]
        out[i] = _mix64(g)
    return max(grams, 0)


@numba.njit(cache=True, nogil=True)
def _gram_hashes(buf: np.ndarray, classes: np.ndarray, mult: np.ndarray) -> np.ndarray:
    clean = np.empty(len(buf) + 1, np.uint8)
    n = _clean_into(buf, 0, len(buf), classes, clean)
    words = np.empty(n // 2 + 1, _U64)
    count = _word_hashes_into(clean, n, words)
    out = np.empty(max(count - len(mult) + 1, 0), _U64)
    _grams_into(words, count, mult, out)
    return out


def hash_filter(table: np.ndarray) -> np.ndarray:
    """A bit per slot of the top bits of the hashes, set where some hash of `table` has them: at 16
    or more slots per hash, nearly every n-gram that is in no evaluation set is told so by one read
    of a bit array that stays in the CPU's cache, before any binary search."""
    bits = max(16, int(16 * len(table)).bit_length())
    bit_array = np.zeros((1 << bits) >> 3, np.uint8)
    _set_bits(table, _U64(64 - bits), bit_array)
    return bit_array


@numba.njit(cache=True)
def _set_bits(table: np.ndarray, shift: np.uint64, bit_array: np.ndarray) -> None:
    for h in table:
        slot = h >> shift
        bit_array[slot >> _U64(3)] |= np.uint8(1 << (slot & _U64(7)))


@numba.njit(cache=True, nogil=True)
def _first_hits(
    buf: np.ndarray,
    offsets: np.ndarray,
    classes: np.ndarray,
    mult: np.ndarray,
    table: np.ndarray,
    bit_array: np.ndarray,
    shift: np.uint64,
) -> tuple[np.ndarray, np.ndarray]:
    """Per text buf[offsets[d]:offsets[d + 1]]: the position of its first n-gram whose hash is in
    `table` (sorted; `bit_array` its `hash_filter`), or -1; and its number of words (where it has
    a hit, those up to its end). One pass over the bytes: the normalization of `_clean_into`, the
    word hashes of `_word_hashes_into` and the n-gram hashes of `_grams_into`, computed as the
    words end, with the last n word hashes in a ring, so no text needs memory of its size."""
    docs = len(offsets) - 1
    ngram = len(mult)
    first = np.full(docs, -1, np.int64)
    counts = np.zeros(docs, np.int64)
    ring = np.empty(ngram, _U64)
    for d in range(docs):
        words = 0
        h = _FNV_OFFSET
        in_word = False
        i, hi = offsets[d], offsets[d + 1]
        while i <= hi and first[d] < 0:
            if i == hi:
                ends, size = in_word, 1  # the text's last word ends with it
            else:
                cls, size = _class_at(buf, i, hi, classes)
                ends = cls == 1 and in_word
                if cls == 0:
                    for k in range(size):
                        if i + k < hi:
                            c = buf[i + k]
                            h = (h ^ _U64(c + 32 if 65 <= c <= 90 else c)) * _FNV_PRIME
                    in_word = True
            if ends:
                ring[words % ngram] = _mix64(h)
                words += 1
                h = _FNV_OFFSET
                in_word = False
                if words >= ngram:
                    g = _U64(0)
                    for k in range(ngram):
                        g += ring[(words - ngram + k) % ngram] * mult[k]
                    g = _mix64(g)
                    slot = g >> shift
                    if (bit_array[slot >> _U64(3)] >> (slot & _U64(7))) & 1:
                        at = np.searchsorted(table, g)
                        if at < len(table) and table[at] == g:
                            first[d] = words - ngram
            i += size
        counts[d] = words
    return first, counts


def normalized_words(text: str) -> list[bytes]:
    """The text's words after normalization (the module docstring), as UTF-8."""
    buf = np.frombuffer(case_folded(text), np.uint8)
    clean = np.empty(len(buf) + 1, np.uint8)
    n = _clean_into(buf, 0, len(buf), code_point_classes(), clean)
    return clean[:n].tobytes().split()


def gram_hashes(text: str, ngram: int) -> np.ndarray:
    """The hash of each of the text's word n-grams, in word order (none when it has fewer words)."""
    return _gram_hashes(np.frombuffer(case_folded(text), np.uint8), code_point_classes(), multipliers(ngram))


def first_hits(texts: list[str], ngram: int, table: np.ndarray, bit_array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each text, the word position of its first n-gram whose hash `table` (sorted uint64,
    `bit_array` its `hash_filter`) holds, or -1; and each text's number of words."""
    pieces = [case_folded(t) for t in texts]
    offsets = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum([len(p) for p in pieces], out=offsets[1:])
    buf = np.frombuffer(b"".join(pieces), np.uint8)
    shift = _U64(64 - ((len(bit_array) * 8).bit_length() - 1))  # the hash's top bits name its slot
    return _first_hits(buf, offsets, code_point_classes(), multipliers(ngram), table, bit_array, shift)
