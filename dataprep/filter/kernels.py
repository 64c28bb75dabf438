"""The filters' per-character work, compiled (numba): a text's words in one pass over its code points.

    w = scan_words(text)     # Words: w.count, w.lengths, w.alpha (has a letter), w.hashes, w.lower_hashes
    w = scan_words(text, unicode=True)   # the words of every script (below)
    word_hash("the")         # the hash scan_words gives that word (lower_hashes: of its lower case)
    candidate_windows(text, "ipv4")   # where an address could be: the PII patterns run there only
    ngram_repeats(grams, chars, n)    # Gopher's top and duplicate n-gram characters, in one hash table

Python's regular expressions find words at ~15 MB/s; one compiled pass over the code points
(`str.encode("utf-32-le")`, a copy at memory speed) does it at several hundred. A word is what
the regular expression `\\w+(?:['’.\\-]\\w+)*` finds: a run of word characters (`str.isalnum` or "_",
as `\\w` is), with inner apostrophes, hyphens and periods joining runs (`don't`, `well-known`, `U.S`,
`3.14`); punctuation and symbols are no words. The published filters say "word" without saying how
words are found; this is close to what a word tokenizer keeps (datatrove uses spaCy's, then drops its
punctuation tokens for counts and lengths). The character classes and the
lower-case mapping are tables over every code point, made from Python's own `str` methods (~0.4 s,
once per Python and Unicode version: saved beside numba's cache), so the kernels agree with `re`
and `str.lower` character by character
(a character whose lower case is several characters keeps its own code point in `lower_hashes`).
Word hashes are FNV-1a over code points: the same in every process (Python's `hash` of a str is not).

`words_of(cps, unicode=True)` finds the words of every script (`language_rules`: every language but
English): a combining mark (Unicode category M, and the joiners U+200C/U+200D) is a word character, as
it is to the `regex` package's `\\w` (`re`'s `\\w` cuts हिन्दी into three words), and each character of
a script written without spaces between words (Han, kana, Thai, Lao, Khmer, Myanmar, ...:
`pretrainkit.dataprep.kernels.scripts`) is a word of its own.
"""

from __future__ import annotations

import contextlib
import functools
import io
import os
import sys
import unicodedata
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.kernels import numba_cache as _cache  # noqa: F401  (numba's cache directory, before numba loads)
from pretrainkit.dataprep.kernels.scripts import UNSPACED_SCRIPTS
from pretrainkit.files import write_bytes_atomic

# isort: split
import numba  # noqa: E402

# character class bits: WORD what \w matches, ALPHA str.isalpha, SPACE str.isspace (what str.strip and
# str.split take away, and \s matches), DECIMAL str.isdecimal (what \d matches), MARK a combining mark or
# joiner (a word character to `regex`'s \w), UNSPACED a word character or mark of a script written without
# spaces between words
WORD, ALPHA, SPACE, DECIMAL, MARK, UNSPACED = 1, 2, 4, 8, 16, 32
TABLES_FORMAT = 4  # in the saved file's name: a file of an earlier layout (fewer bits) is never read
_DTYPES = (np.dtype(np.uint8), np.dtype(np.uint32))  # of the tables: (classes, lower)
JOINERS = np.array([ord(c) for c in "'’.-"], np.uint32)
FNV_OFFSET = np.uint64(0xCBF29CE484222325)
FNV_PRIME = np.uint64(0x100000001B3)


@functools.cache
def tables() -> tuple[np.ndarray, np.ndarray]:
    """(class bits per code point, lower-case code point per code point), read from the file a process
    before this one saved where numba keeps its machine code (`_tables_file`), else made and saved:
    making them takes ~0.4 s, which every worker of a run paid at its start."""
    path = _tables_file()
    with contextlib.suppress(OSError, ValueError, KeyError, EOFError, zipfile.BadZipFile):  # none, or not whole
        with np.load(path) as saved:
            classes, lower = saved["classes"], saved["lower"]
        if classes.shape == lower.shape == (sys.maxunicode + 1,) and (classes.dtype, lower.dtype) == _DTYPES:
            return classes, lower
    classes, lower = _made_tables()
    buffer = io.BytesIO()
    np.savez(buffer, classes=classes, lower=lower)
    with contextlib.suppress(OSError):  # a folder this user cannot write: made again by the next process
        path.parent.mkdir(parents=True, exist_ok=True)
        write_bytes_atomic(path, buffer.getvalue())
    return classes, lower


def _tables_file() -> Path:
    """Where numba keeps this module's machine code (NUMBA_CACHE_DIR, else `__pycache__` beside it),
    named by what the tables depend on: their layout, Python's version and its Unicode database's."""
    folder = Path(os.environ.get("NUMBA_CACHE_DIR") or Path(__file__).resolve().parent / "__pycache__")
    python = f"py{sys.version_info[0]}{sys.version_info[1]}"
    return folder / f"filter-unicode-tables-v{TABLES_FORMAT}-{python}-{unicodedata.unidata_version}.npz"


def _made_tables() -> tuple[np.ndarray, np.ndarray]:
    every = "".join(map(chr, range(sys.maxunicode + 1)))
    size = len(every)
    classes = np.fromiter(map(str.isalnum, every), np.uint8, size) * np.uint8(WORD)
    classes[ord("_")] |= WORD
    classes |= np.fromiter(map(str.isalpha, every), np.uint8, size) * np.uint8(ALPHA)
    classes |= np.fromiter(map(str.isspace, every), np.uint8, size) * np.uint8(SPACE)
    classes |= np.fromiter(map(str.isdecimal, every), np.uint8, size) * np.uint8(DECIMAL)
    marks = np.fromiter((unicodedata.category(c)[0] == "M" for c in every), np.bool_, size)
    marks[[0x200C, 0x200D]] = True  # zero-width non-joiner and joiner: inside Persian and Indic words
    classes[marks] |= np.uint8(MARK)
    unspaced = np.zeros(size, np.bool_)
    for _, _, ranges in UNSPACED_SCRIPTS:
        for lo, hi in ranges:
            unspaced[lo : hi + 1] = True
    classes[unspaced & ((classes & WORD) != 0) | unspaced & marks] |= np.uint8(UNSPACED)
    lowered = list(map(str.lower, every))
    for i in np.flatnonzero(np.fromiter(map(len, lowered), np.int64, size) != 1).tolist():
        lowered[i] = every[i]  # "İ".lower() is two characters: such a character stands for itself
    lower = np.frombuffer("".join(lowered).encode("utf-32-le", "surrogatepass"), np.uint32)
    return classes, lower


def code_points(text: str) -> np.ndarray:
    """The text's code points (a lone surrogate as itself), in a writable array: the kernels then see
    one array type, so that each is compiled once for the text and its own buffers."""
    return np.frombuffer(bytearray(text.encode("utf-32-le", "surrogatepass")), np.uint32)


@dataclass(frozen=True)
class Words:
    lengths: np.ndarray  # int64, characters per word
    alpha: np.ndarray  # bool, the word has a letter
    hashes: np.ndarray  # uint64
    lower_hashes: np.ndarray  # uint64, of the word in lower case

    @property
    def count(self) -> int:
        return len(self.lengths)


def scan_words(text: str, unicode: bool = False) -> Words:
    return words_of(code_points(text), unicode)


def words_of(cps: np.ndarray, unicode: bool = False) -> Words:
    """`scan_words` of the text whose `code_points` are `cps`; `unicode`: the words of every script
    (marks are word characters, a character of an unspaced script is a word)."""
    classes, lower = tables()
    if unicode:
        return Words(*_scan(cps, classes, lower, JOINERS, WORD | MARK, UNSPACED))
    return Words(*_scan(cps, classes, lower, JOINERS, WORD, 0))


def word_hash(word: str) -> tuple[int, int]:
    """(hash, lower-case hash) of `word` as `scan_words` computes them for a word of the text."""
    w = scan_words(word)
    if w.count != 1:
        raise ValueError(f"{word!r} is not one word")
    return int(w.hashes[0]), int(w.lower_hashes[0])


@numba.njit(cache=True)
def _runs(cps, classes, word_bits, split_bits):
    """Runs of word characters, each character of `split_bits` a run of its own: at least as many as
    words (joiners merge runs), so that `_scan`'s arrays are sized to the text's words rather than to
    its characters (a 48 MB document has ~8M)."""
    runs = 0
    inside = False
    for c in cps:
        k = classes[c]
        word = (k & word_bits) != 0
        if word and (not inside or k & split_bits):
            runs += 1
        inside = word and not k & split_bits
    return runs


SMALL_TEXT = 1 << 16  # code points: up to here `_scan`'s arrays take half a word per character, with no counting pass


@numba.njit(cache=True)
def _scan(cps, classes, lower, joiners, word_bits, split_bits):
    """The words: runs of characters of `word_bits` joined by `joiners`; a character of `split_bits`
    (none for `re`'s words) is a word of its own."""
    n = len(cps)
    if n > SMALL_TEXT:
        room = _runs(cps, classes, word_bits, split_bits)
    else:  # a word and its end take 2 characters; a word of an unspaced script 1
        room = n // 2 + 1 if split_bits == 0 else n + 1
    lengths = np.empty(room, np.int64)
    alpha = np.empty(room, np.bool_)
    hashes = np.empty(room, np.uint64)
    lower_hashes = np.empty(room, np.uint64)
    count = 0
    i = 0
    while i < n:
        c = cps[i]
        k = classes[c]
        if not k & word_bits:
            i += 1
            continue
        start = i
        h = FNV_OFFSET
        lh = FNV_OFFSET
        bits = np.uint8(0)  # the word's characters' classes, or-ed: ALPHA where one is a letter
        if k & split_bits:  # a character of an unspaced script: a word of its own, a letter where it is a mark
            bits = k | np.uint8(ALPHA) if k & MARK else k
            h = (h ^ np.uint64(c)) * FNV_PRIME
            lh = (lh ^ np.uint64(lower[c])) * FNV_PRIME
            i += 1
        else:
            while True:  # c = cps[i], k its classes
                if k & word_bits and not k & split_bits:
                    bits |= k
                    h = (h ^ np.uint64(c)) * FNV_PRIME
                    lh = (lh ^ np.uint64(lower[c])) * FNV_PRIME
                elif (
                    i + 1 < n
                    and classes[cps[i + 1]] & word_bits
                    and not classes[cps[i + 1]] & split_bits
                    and among(c, joiners)
                ):
                    h = (h ^ np.uint64(c)) * FNV_PRIME
                    lh = (lh ^ np.uint64(c)) * FNV_PRIME
                else:
                    break
                i += 1
                if i == n:
                    break
                c = cps[i]
                k = classes[c]
        lengths[count] = i - start
        alpha[count] = (bits & 2) != 0
        hashes[count] = h
        lower_hashes[count] = lh
        count += 1
    return lengths[:count], alpha[:count], hashes[:count], lower_hashes[:count]


@numba.njit(cache=True)
def among(c, marks):
    """Whether code point c is one of `marks`."""
    for mark in marks:
        if c == mark:
            return True
    return False


def candidate_windows(
    text: str, kinds: tuple[str, ...], cps: np.ndarray | None = None
) -> dict[str, list[tuple[int, int]]]:
    """Per kind, the stretches of `text` where an address of that kind could be, as (start, end)
    offsets, in order and disjoint: "email", an "@" with a local part before it and a domain after
    it; "ipv4", a run of digits and periods holding at least four digits and three periods; "ipv6", a
    run of hexadecimal digits, colons and periods holding at least two colons. The patterns of
    `pretrainkit.dataprep.filter.pii` then run on these alone (on a whole text they cost ~70 ms per MB).
    `cps`: the text's `code_points`, where the caller has them."""
    wanted = [k for k in kinds if _MARKS[k] in text]
    if wanted and cps is None:
        cps = code_points(text)
    return {k: [(int(a), int(b)) for a, b in _WINDOWS[k](cps)] if k in wanted else [] for k in kinds}


_LOCAL_SYMBOLS = np.array([ord(c) for c in "!#$%&'*+/=?^_`{|}~.-"], np.uint32)


@numba.njit(cache=True)
def _is_digit(c) -> bool:
    return 48 <= c <= 57


@numba.njit(cache=True)
def _is_hex(c) -> bool:
    return 48 <= c <= 57 or 65 <= c <= 70 or 97 <= c <= 102


@numba.njit(cache=True)
def _is_alnum_ascii(c) -> bool:
    return 48 <= c <= 57 or 65 <= c <= 90 or 97 <= c <= 122


@numba.njit(cache=True)
def _is_local(c) -> bool:
    # RFC 5322's atom characters and the period (ASCII)
    if _is_alnum_ascii(c):
        return True
    for x in _LOCAL_SYMBOLS:
        if c == x:
            return True
    return False


@numba.njit(cache=True)
def _email_windows(cps):
    n = len(cps)
    out = []
    last_end = 0
    for i in range(n):
        if cps[i] != 64:  # "@"
            continue
        left = i
        while left > last_end and _is_local(cps[left - 1]):
            left -= 1
        right = i + 1
        while right < n and (
            _is_alnum_ascii(cps[right]) or cps[right] == 45 or cps[right] == 46 or cps[right] == 91 or cps[right] == 93
        ):
            right += 1  # a domain's letters, digits, "-" and ".", or a bracketed address
        if left < i and right > i + 1:
            out.append((left, right))
            last_end = right
    return out


@numba.njit(cache=True)
def _is_ipv4_part(c) -> bool:
    return _is_digit(c) or c == 46


@numba.njit(cache=True)
def _is_ipv6_part(c) -> bool:
    return _is_hex(c) or c == 58 or c == 46


@numba.njit(cache=True)
def _ipv4_windows(cps):
    """The runs of digits and periods holding four digits and three periods or more. Only a run that
    holds a period can, so the scan goes from period to period (prose has few) and reads the run
    around one: the same runs as reading every character, several times faster."""
    n = len(cps)
    out = []
    i = 0
    while i < n:
        if cps[i] != 46:
            i += 1
            continue
        start = i
        while start > 0 and _is_ipv4_part(cps[start - 1]):
            start -= 1
        end = i + 1
        while end < n and _is_ipv4_part(cps[end]):
            end += 1
        digits, dots = 0, 0
        for k in range(start, end):
            if cps[k] == 46:
                dots += 1
            else:
                digits += 1
        if digits >= 4 and dots >= 3:
            out.append((start, end))
        i = end
    return out


@numba.njit(cache=True)
def _ipv6_windows(cps):
    """The runs of hexadecimal digits, colons and periods, not beginning with a period, holding two
    colons or more; found from the colons, as `_ipv4_windows` goes from the periods (the hexadecimal
    letters are common in prose, colons are not)."""
    n = len(cps)
    out = []
    i = 0
    while i < n:
        if cps[i] != 58:
            i += 1
            continue
        start = i
        while start > 0 and _is_ipv6_part(cps[start - 1]):
            start -= 1
        while cps[start] == 46:  # a run begins at a digit, letter or colon: the colon at i is one
            start += 1
        end = i + 1
        colons = 1  # the one at i, the run's first: the scan passed every character before it
        while end < n and _is_ipv6_part(cps[end]):
            colons += cps[end] == 58
            end += 1
        if colons >= 2:
            out.append((start, end))
        i = end
    return out


def ngram_repeats(words: Words, most_n: int) -> tuple[np.ndarray, np.ndarray]:
    """(top, repeated), each indexed by n for n = 2 .. most_n (0 below): `top[n]`, the characters of
    all occurrences of the most common n-gram seen twice or more (the first to occur among equally
    common ones; its words joined by spaces), 0 where none repeats; `repeated[n]`, the characters
    (without spaces) of the n-grams equal to an earlier one, taken left to right without overlap: a
    repeat's words are counted once and the scan goes on after it."""
    return _ngram_repeats(words.hashes, words.lengths, most_n, 1)


@numba.njit(cache=True)
def _ngram_repeats(hashes, lengths, most_n, gap):
    """`ngram_repeats`, the words of an n-gram joined by `gap` characters (1, a space; 0 between the
    characters of an unspaced script)."""
    words = len(hashes)
    top = np.zeros(most_n + 1, np.int64)
    repeated = np.zeros(most_n + 1, np.int64)
    if words < 2:
        return top, repeated
    size = 16
    while size < 2 * words:
        size *= 2
    mask = size - 1
    keys = np.empty(size, np.uint64)
    used = np.zeros(size, np.int32)  # the n whose table holds the slot: no clearing between the n
    counts = np.empty(size, np.int32)  # its n-gram's occurrences, negative once the repeat scan passed one
    first = np.empty(size, np.int32)
    slot_of = np.empty(words, np.int32)
    grams = hashes.copy()
    ends = np.empty(words + 1, np.int64)
    ends[0] = 0
    for i in range(words):
        ends[i + 1] = ends[i] + lengths[i]
    # The positions whose n-gram may repeat, in order: an (n+1)-gram can repeat only where the n-grams
    # at i and at i + 1 both do, so each n reads the few positions the n before it left (any other
    # n-gram occurs once: it is neither the most common repeat nor a repeat).
    live = np.arange(words - 1)
    alive = len(live)
    repeats = np.zeros(words + 1, np.bool_)
    for n in range(2, most_n + 1):
        count = words - n + 1
        kept = 0
        for j in range(alive):
            if live[j] < count:
                live[kept] = live[j]
                kept += 1
        alive = kept
        if alive == 0:
            break
        best_count, best_first = 1, count
        for j in range(alive):  # the n-gram at i from the (n-1)-gram at i; open addressing, linear probing
            i = live[j]
            g = grams[i] * FNV_PRIME ^ hashes[i + n - 1]
            grams[i] = g
            slot = np.int64(g & np.uint64(mask))
            while used[slot] == n and keys[slot] != g:
                slot = (slot + 1) & mask
            slot_of[i] = slot
            if used[slot] != n:
                used[slot] = n
                keys[slot] = g
                first[slot] = i
                counts[slot] = 1
                continue
            c = counts[slot] + 1
            counts[slot] = c
            # the most common so far, the first to occur among equally common ones
            if c > best_count or (c == best_count and first[slot] < best_first):
                best_count, best_first = c, first[slot]
        if best_count == 1:  # no n-gram repeats, so no longer one does: every count from here on is 0
            break
        top[n] = (ends[best_first + n] - ends[best_first] + (n - 1) * gap) * best_count
        after = 0
        for j in range(alive):
            i = live[j]
            if i < after:
                continue
            slot = slot_of[i]
            if counts[slot] < 0:  # its first occurrence was passed: a repeat, and the scan goes on after it
                repeated[n] += ends[i + n] - ends[i]
                after = i + n
            else:
                counts[slot] = -counts[slot]
        for j in range(alive):
            repeats[live[j]] = abs(counts[slot_of[live[j]]]) > 1
        kept = 0
        for j in range(alive):
            i = live[j]
            both = repeats[i] and repeats[i + 1]
            repeats[i] = False  # read no more: the positions after i read i + 1 and on
            if both:
                live[kept] = i
                kept += 1
        alive = kept
    return top, repeated


_MARKS = {"email": "@", "ipv4": ".", "ipv6": ":"}
_WINDOWS = {"email": _email_windows, "ipv4": _ipv4_windows, "ipv6": _ipv6_windows}
