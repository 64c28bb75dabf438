"""Text normalized into tokens, and the 64-bit hashes of its n-grams, in compiled loops.

    tokens = normalized_words("Don't PANIC, it's 42!")    # [b"dont", b"panic", b"its", b"42"]
    hashes = gram_hashes(text, ngram=13)                  # uint64, one per n-gram in token order
    first, words = first_hits(texts, ngram, table, bits)  # per text: the token position of its first
                                                          # n-gram whose hash is in `table`, or -1;
                                                          # and its length in words

Normalization (GPT-3, Brown et al. 2020, Appendix C: "a gram as a lowercase, whitespace delimited
word with no punctuation"; the same as lm-evaluation-harness's janitor), exactly:
1. text that is not all ASCII is put in Unicode NFKC and then case-folded (`str.casefold`), so
   compatibility forms (ligatures, full-width letters and punctuation, half-width katakana,
   non-breaking and ideographic spaces) and case meet; ASCII letters are lower-cased;
2. every character of Unicode category P (punctuation) or S (symbols) is deleted, without a space
   in its place: "don't" -> "dont", "e-mail" -> "email" (in ASCII: exactly `string.punctuation`);
3. tokens: each character of a script written without spaces between words (Han, kana, Thai, Lao,
   Khmer, Myanmar, Tai: `scripts`) is a token of its own; the words are the maximal runs of the
   other characters between whitespace (what `str.split()` splits on) and those characters.
   Digits and letters of every script are kept as they are.

An n-gram is measured in weight, not in tokens (`scripts`: a word weighs WORD_UNITS, a character of
an unspaced script what it holds of a word): the n-gram at a token is the shortest run of tokens
from it that weighs `ngram` words or more. In text of spaced scripts alone, that is `ngram` words,
as GPT-3's; in Chinese 23 characters at --ngram 13, in Japanese about 40, in Thai 78 code points;
a Latin word inside a Japanese sentence weighs a word. Since the run depends only on its own tokens,
a copy holds the same n-grams, whatever surrounds it, and spaces put between the characters of
unspaced text change no token.

A token hashes to splitmix64's finalizer of its FNV-1a hash (UTF-8 bytes); an n-gram of tokens
t_0..t_{k-1} to the finalizer of sum(t_j * m_j) mod 2^64, with fixed odd multipliers m_j. The
hashes only find candidates: every hit is confirmed on the tokens themselves (`evalindex`).
"""

from __future__ import annotations

import sys
import unicodedata
from functools import lru_cache

import numba
import numpy as np

from pretrainkit.dataprep.kernels.hashing import mix64
from pretrainkit.dataprep.kernels.scripts import UNSPACED_SCRIPTS, WORD_UNITS

_U64 = np.uint64
# classes of code points: a character of a word, whitespace, deleted, then one per unspaced script
_WORD, _SPACE, _DELETED = 0, 1, 2
_FIRST_UNSPACED = 3
# the weight of a token by the class of its (first) character; 0 for the classes that make no token
_UNITS = np.array([WORD_UNITS, 0, 0] + [units for _, units, _ in UNSPACED_SCRIPTS], np.int64)
_FNV_OFFSET = _U64(0xCBF29CE484222325)
_FNV_PRIME = _U64(0x100000001B3)
_mix64 = numba.njit(cache=True)(mix64)


@lru_cache(maxsize=1)
def code_point_classes() -> np.ndarray:
    """uint8 per code point: word character, whitespace (`str.isspace`), deleted (category P or S),
    or the class of its unspaced script (`scripts.UNSPACED_SCRIPTS`, in order, from _FIRST_UNSPACED)."""
    classes = np.zeros(sys.maxunicode + 1, np.uint8)
    for k, (_, _, ranges) in enumerate(UNSPACED_SCRIPTS):
        for lo, hi in ranges:
            classes[lo : hi + 1] = _FIRST_UNSPACED + k
    for cp in range(sys.maxunicode + 1):
        c = chr(cp)
        if c.isspace():
            classes[cp] = _SPACE
        elif unicodedata.category(c)[0] in "PS":
            classes[cp] = _DELETED
    return classes


def units_threshold(ngram: int) -> int:
    """The weight of an n-gram of `ngram` words."""
    return ngram * WORD_UNITS


def longest_gram(ngram: int) -> int:
    """The most tokens an n-gram can hold: all of the lightest kind."""
    return (units_threshold(ngram) - 1) // int(_UNITS[_FIRST_UNSPACED:].min()) + 1


@lru_cache(maxsize=8)
def multipliers(ngram: int) -> np.ndarray:
    """One per token position of the longest n-gram (the first `ngram` are those of a word n-gram)."""
    return mix64(np.arange(1, longest_gram(ngram) + 1, dtype=_U64) * _U64(0x9E3779B97F4A7C15)) | _U64(1)


def case_folded(text: str) -> bytes:
    """Step 1 of the normalization, as UTF-8 (steps 2 and 3 are the compiled loops', on the bytes)."""
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
    """The tokens of the UTF-8 bytes buf[lo:hi] into `out` (room for 2 * (hi - lo) bytes), each
    followed by one space: ASCII upper case lowered, deleted code points left out; returns the bytes written."""
    n = 0
    i = lo
    in_word = False
    while i < hi:
        cls, size = _class_at(buf, i, hi, classes)
        if in_word and (cls == _SPACE or cls >= _FIRST_UNSPACED):
            out[n] = 32
            n += 1
            in_word = False
        if cls == _WORD or cls >= _FIRST_UNSPACED:
            for k in range(size):
                if i + k < hi:
                    c = buf[i + k]
                    out[n] = c + 32 if 65 <= c <= 90 else c
                    n += 1
            in_word = True
            if cls >= _FIRST_UNSPACED:  # a token of its own
                out[n] = 32
                n += 1
                in_word = False
        i += size
    if in_word:
        out[n] = 32
        n += 1
    return n


@numba.njit(cache=True, nogil=True, inline="always")
def _hashed(h: np.uint64, c: np.uint8) -> np.uint64:
    """FNV-1a's step for one byte of a token, ASCII upper case lowered."""
    return (h ^ _U64(c + 32 if 65 <= c <= 90 else c)) * _FNV_PRIME


@numba.njit(cache=True, nogil=True, inline="always")
def _scan(
    buf: np.ndarray, i: int, hi: int, classes: np.ndarray, h: np.uint64, in_word: bool
) -> tuple[int, np.uint64, bool, int, np.uint64]:
    """One step of the tokenization at buf[i] (the text's end where i == hi), `h` being the hash so
    far of the word it may continue: returns the bytes it read; `h` and `in_word` after it; the units
    of the token it ends (0 where none) and that token's hash. A character of an unspaced script
    that ends a word is read by the next step (this one reads nothing), so a step ends one token."""
    if i == hi:
        cls, size = _SPACE, 1  # the text's last word ends with it
    else:
        cls, size = _class_at(buf, i, hi, classes)
    if in_word and (cls == _SPACE or cls >= _FIRST_UNSPACED):
        return (size if cls == _SPACE else 0), _FNV_OFFSET, False, WORD_UNITS, _mix64(h)
    if cls == _WORD or cls >= _FIRST_UNSPACED:
        for k in range(size):
            if i + k < hi:
                h = _hashed(h, buf[i + k])
        if cls >= _FIRST_UNSPACED:  # a token of its own
            return size, _FNV_OFFSET, False, _UNITS[cls], _mix64(h)
        return size, h, True, 0, _U64(0)
    return size, h, in_word, 0, _U64(0)


@numba.njit(cache=True, nogil=True)
def _tokens(buf: np.ndarray, classes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The hash and the units of every token of the UTF-8 bytes, in order."""
    hashes = np.empty(len(buf) + 1, _U64)
    units = np.empty(len(buf) + 1, np.int64)
    count = 0
    h = _FNV_OFFSET
    in_word = False
    i = 0
    while i <= len(buf):
        size, h, in_word, token_units, token = _scan(buf, i, len(buf), classes, h, in_word)
        if token_units:
            hashes[count], units[count] = token, token_units
            count += 1
        i += size
    return hashes[:count], units[:count]


@numba.njit(cache=True, nogil=True)
def _grams(hashes: np.ndarray, units: np.ndarray, mult: np.ndarray, threshold: int) -> np.ndarray:
    """The hash of the n-gram at each token: the shortest run from it whose units reach `threshold`
    (none at the tokens whose run to the end weighs less)."""
    out = np.empty(len(hashes), _U64)
    grams = 0
    start = 0
    window = 0  # the units of tokens start..j
    for j in range(len(hashes)):
        window += units[j]
        while window >= threshold:
            g = _U64(0)
            for k in range(j - start + 1):
                g += hashes[start + k] * mult[k]
            out[grams] = _mix64(g)
            grams += 1
            window -= units[start]
            start += 1
    return out[:grams]


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
    threshold: int,
    table: np.ndarray,
    bit_array: np.ndarray,
    shift: np.uint64,
) -> tuple[np.ndarray, np.ndarray]:
    """Per text buf[offsets[d]:offsets[d + 1]]: the position of its first n-gram whose hash is in
    `table` (sorted; `bit_array` its `hash_filter`), or -1; and its units (where it has a hit,
    those up to its end). One pass over the bytes: the tokens of `_scan` and the n-grams of
    `_grams`, computed as the tokens end, with the last ones in a ring of a power of two at least
    the longest n-gram's length, so no text needs memory of its size."""
    docs = len(offsets) - 1
    first = np.full(docs, -1, np.int64)
    totals = np.zeros(docs, np.int64)
    mask = 1
    while mask < len(mult):
        mask <<= 1
    mask -= 1
    ring = np.empty(mask + 1, _U64)
    ring_units = np.empty(mask + 1, np.int64)
    for d in range(docs):
        tokens = 0
        start = 0  # the first token whose n-gram is not complete yet
        window = 0  # the units of tokens start..tokens-1
        total = 0
        hit = -1
        h = _FNV_OFFSET
        in_word = False
        i, hi = offsets[d], offsets[d + 1]
        while i <= hi and hit < 0:
            # an ASCII byte within a word (the bulk of most text) here: through `_scan` it takes twice as long
            if i < hi and buf[i] < 0x80 and classes[buf[i]] != _SPACE:
                if classes[buf[i]] == _WORD:
                    h = _hashed(h, buf[i])
                    in_word = True
                i += 1
                continue
            size, h, in_word, units, token = _scan(buf, i, hi, classes, h, in_word)
            i += size
            if not units:
                continue
            ring[tokens & mask] = token
            ring_units[tokens & mask] = units
            tokens += 1
            window += units
            total += units
            while window >= threshold and hit < 0:
                g = _U64(0)
                for k in range(tokens - start):
                    g += ring[(start + k) & mask] * mult[k]
                g = _mix64(g)
                slot = g >> shift
                if (bit_array[slot >> _U64(3)] >> (slot & _U64(7))) & 1:
                    at = np.searchsorted(table, g)
                    if at < len(table) and table[at] == g:
                        hit = start
                window -= ring_units[start & mask]
                start += 1
        first[d] = hit
        totals[d] = total
    return first, totals


def normalized_words(text: str) -> list[bytes]:
    """The text's tokens after normalization (the module docstring), as UTF-8."""
    buf = np.frombuffer(case_folded(text), np.uint8)
    clean = np.empty(2 * len(buf) + 1, np.uint8)
    n = _clean_into(buf, 0, len(buf), code_point_classes(), clean)
    return clean[:n].tobytes().split()


def gram_hashes(text: str, ngram: int) -> np.ndarray:
    """The hash of the n-gram at each of the text's tokens, in token order (none where the tokens
    from there weigh less than `ngram` words)."""
    hashes, units = _tokens(np.frombuffer(case_folded(text), np.uint8), code_point_classes())
    return _grams(hashes, units, multipliers(ngram), units_threshold(ngram))


def first_hits(texts: list[str], ngram: int, table: np.ndarray, bit_array: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For each text, the token position of its first n-gram whose hash `table` (sorted uint64,
    `bit_array` its `hash_filter`) holds, or -1; and each text's length in words (float: a
    character of an unspaced script counts as its fraction of a word, `scripts`)."""
    pieces = [case_folded(t) for t in texts]
    offsets = np.zeros(len(pieces) + 1, np.int64)
    np.cumsum([len(p) for p in pieces], out=offsets[1:])
    buf = np.frombuffer(b"".join(pieces), np.uint8)
    shift = _U64(64 - ((len(bit_array) * 8).bit_length() - 1))  # the hash's top bits name its slot
    first, units = _first_hits(
        buf, offsets, code_point_classes(), multipliers(ngram), units_threshold(ngram), table, bit_array, shift
    )
    return first, units / WORD_UNITS


def _units_of(token: str | bytes) -> int:
    """A token's weight: that of the class of its first character."""
    first = token[0] if isinstance(token, str) else token.decode("utf-8", "surrogatepass")[0]
    return int(_UNITS[code_point_classes()[ord(first)]])


def gram_at(tokens: list[bytes], position: int, ngram: int) -> list[bytes]:
    """The n-gram of `normalized_words` at `position`: the shortest run of tokens from it that
    weighs `ngram` words (to the end where they weigh less)."""
    need = units_threshold(ngram)
    end = position
    while end < len(tokens) and need > 0:
        need -= _units_of(tokens[end])
        end += 1
    return tokens[position:end]


def joined(tokens: list[str]) -> str:
    """An n-gram as text: its tokens with a space between them, but none between two characters of
    unspaced scripts, so that Chinese or Thai reads as written and English as before."""
    text = tokens[0] if tokens else ""
    for before, token in zip(tokens, tokens[1:]):
        unspaced = _units_of(before) != WORD_UNITS and _units_of(token) != WORD_UNITS
        text += token if unspaced else " " + token
    return text
