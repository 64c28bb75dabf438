"""The line-level rules' per-character work, compiled (numba): a text's lines and paragraphs cut,
compared and counted over its code points (`kernels.code_points(text)`), one call per step.

    r = repeated_lines(cps)                 # Gopher repetition: paragraphs and lines, and their repeats
    m = line_marks(cps, joined_code_points(["•", "-"]))   # Gopher quality: lines, bulleted and ellipsis ones, ...
    f = fineweb_lines(cps, 30, terminal)    # FineWeb: non-blank lines, those ending in punctuation, short ones

Each count is what the Python expression its field names gives on the text (`str.split`,
`str.splitlines`, `str.strip`, `str.count`, `re.split`, `re.findall`), character for character:
whitespace is `str.isspace` (the tables of `kernels`). Repeated pieces are compared exactly (a
64-bit hash, then their code points where hashes meet), so a repeat count is what a Python set of
the strings gives. In Python (lists of strings, sets, regular expressions) these took ~30 us of a
1.6 KB page, a fifth of the steps' time; compiled, ~15 us.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pretrainkit.dataprep.filter.kernels import FNV_OFFSET, FNV_PRIME, SPACE, among, tables

# isort: split
import numba  # noqa: E402

NEWLINE, CARRIAGE_RETURN, PERIOD, ELLIPSIS, HASH = 10, 13, 46, 0x2026, 35


@dataclass(frozen=True)
class RepeatedLines:
    paragraphs: int  # len([p for p in re.split(r"\n{2,}", text.strip()) if p] or [""])
    repeated_paragraphs: int  # of those, equal to an earlier one
    repeated_paragraph_chars: int  # their characters
    lines: int  # non-empty pieces of text.split("\n")
    repeated_lines: int
    repeated_line_chars: int


@dataclass(frozen=True)
class LineMarks:
    lines: int  # len(text.splitlines())
    bulleted: int  # lines whose first character but blanks (whitespace but "\n") starts a bullet mark
    ellipsis_lines: int  # lines ("\n" ends them) ending in "..." or "…" but blanks
    hashes: int  # text.count("#")
    ellipses: int  # text.count("...") + text.count("…")


@dataclass(frozen=True)
class FineWebLines:
    lines: int  # pieces of text.split("\n") that are not blank (line.strip() is not empty)
    ending: int  # of those, the ones whose last character but blanks is one of `terminal`
    short: int  # of those, the ones of `short` characters or fewer (blanks included)
    repeated_chars: int  # the characters of the ones equal to an earlier one
    chars: int  # len(text) - text.count("\n")


def repeated_lines(cps: np.ndarray) -> RepeatedLines:
    return RepeatedLines(*_repeated_lines(cps, tables()[0]).tolist())


def joined_code_points(strings: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Strings as the kernels take them (bullet marks, policy phrases): (their code points one after
    another, where each ends)."""
    code_points = np.array([ord(c) for string in strings for c in string], np.uint32)
    return code_points, np.cumsum([len(string) for string in strings], dtype=np.int64)


def line_marks(cps: np.ndarray, bullets: tuple[np.ndarray, np.ndarray]) -> LineMarks:
    """`bullets`: `joined_code_points(marks)`, made once per step rather than per page."""
    return LineMarks(*_line_marks(cps, tables()[0], *bullets).tolist())


def fineweb_lines(cps: np.ndarray, short: int, terminal: np.ndarray) -> FineWebLines:
    """`terminal`: the code points that end a sentence, as a uint32 array."""
    return FineWebLines(*_fineweb_lines(cps, tables()[0], short, terminal).tolist())


@numba.njit(cache=True)
def _equal(cps, a, b, c, d):
    if b - a != d - c:
        return False
    for k in range(b - a):
        if cps[a + k] != cps[c + k]:
            return False
    return True


@numba.njit(cache=True)
def _hash(cps, a, b):
    """A 64-bit hash of cps[a:b]: two chains of FNV-1a steps, each over two code points at a time (a
    chain of multiplications is what a per-character hash waits on)."""
    h1 = FNV_OFFSET ^ np.uint64(b - a)
    h2 = FNV_OFFSET
    k = a
    while k + 4 <= b:
        h1 = (h1 ^ (np.uint64(cps[k]) << np.uint64(32) | np.uint64(cps[k + 1]))) * FNV_PRIME
        h2 = (h2 ^ (np.uint64(cps[k + 2]) << np.uint64(32) | np.uint64(cps[k + 3]))) * FNV_PRIME
        k += 4
    while k < b:
        h1 = (h1 ^ np.uint64(cps[k])) * FNV_PRIME
        k += 1
    return (h1 ^ (h2 >> np.uint64(31))) * FNV_PRIME ^ h2


@numba.njit(cache=True)
def _repeats(cps, starts, ends, count):
    """(pieces equal to an earlier one, their characters) among the first `count` pieces
    cps[starts[i]:ends[i]]: a repeat counts each time, a first occurrence never."""
    if count < 2:
        return 0, 0
    size = 16
    while size < 2 * count:
        size *= 2
    mask = size - 1
    slots = np.full(size, -1, np.int64)  # open addressing, linear probing: a first occurrence's index
    hashes = np.empty(count, np.uint64)
    repeats, chars = 0, 0
    for i in range(count):
        a, b = starts[i], ends[i]
        h = _hash(cps, a, b)
        hashes[i] = h
        slot = np.int64(h & np.uint64(mask))
        while True:
            j = slots[slot]
            if j == -1:
                slots[slot] = i
                break
            if hashes[j] == h and _equal(cps, starts[j], ends[j], a, b):
                repeats += 1
                chars += b - a
                break
            slot = (slot + 1) & mask
    return repeats, chars


@numba.njit(cache=True)
def _piece_arrays(cps):
    """(starts, ends) for the text's lines: one entry more than it has line feeds, not one per two
    characters, which for a 48 MB page would be 384 MB."""
    newlines = 0
    for c in cps:
        newlines += c == NEWLINE
    return np.empty(newlines + 1, np.int64), np.empty(newlines + 1, np.int64)


@numba.njit(cache=True)
def _repeated_lines(cps, classes):
    n = len(cps)
    starts, ends = _piece_arrays(cps)
    out = np.zeros(6, np.int64)
    # lines: the non-empty pieces of text.split("\n")
    count, s = 0, 0
    for k in range(n):
        if cps[k] == NEWLINE:
            if k > s:
                starts[count], ends[count] = s, k
                count += 1
            s = k + 1
    if n > s:
        starts[count], ends[count] = s, n
        count += 1
    out[3] = count
    out[4], out[5] = _repeats(cps, starts, ends, count)
    # paragraphs, re.split(r"\n{2,}", text.strip()): runs of lines one line feed apart, the text's
    # leading and trailing whitespace cut from them (a run of only that is none); written over the lines
    a, b = 0, n
    while a < b and classes[cps[a]] & SPACE:
        a += 1
    while b > a and classes[cps[b - 1]] & SPACE:
        b -= 1
    paragraphs, i = 0, 0
    while i < count:
        j = i
        while j + 1 < count and starts[j + 1] - ends[j] == 1:
            j += 1
        first, last = max(starts[i], a), min(ends[j], b)
        if first < last:
            starts[paragraphs], ends[paragraphs] = first, last
            paragraphs += 1
        i = j + 1
    out[0] = max(paragraphs, 1)  # no paragraph: [""], one piece that repeats nothing
    out[1], out[2] = _repeats(cps, starts, ends, paragraphs)
    return out


@numba.njit(cache=True)
def is_line_end(c):
    """What str.splitlines ends a line at: \\n \\x0b \\x0c \\r \\x1c \\x1d \\x1e \\x85 \\u2028 \\u2029 (no branch:
    most characters are none, and the counting loop stays one the compiler can widen)."""
    return ((c >= 10) & (c <= 13)) | ((c >= 0x1C) & (c <= 0x1E)) | (c == 0x85) | ((c >= 0x2028) & (c <= 0x2029))


@numba.njit(cache=True)
def mark_at(cps, q, b, marks, ends):
    """The end of the first of the marks (marks[ends[m-1]:ends[m]], `joined_code_points`) that cps[:b]
    holds at q, or -1."""
    begin = 0
    for m in range(len(ends)):
        size = ends[m] - begin
        if q + size <= b:
            same = True
            for k in range(size):
                if cps[q + k] != marks[begin + k]:
                    same = False
                    break
            if same:
                return q + size
        begin = ends[m]
    return -1


@numba.njit(cache=True)
def _line_marks(cps, classes, marks, ends):
    n = len(cps)
    out = np.zeros(5, np.int64)
    # text.count("#"), text.count("…"), line ends, "\r\n" pairs, "..." windows: counts without a branch
    hashes, ellipses, line_ends, pairs, windows = 0, 0, 0, 0, 0
    for k in range(n):
        c = cps[k]
        hashes += c == HASH
        ellipses += c == ELLIPSIS
        line_ends += is_line_end(c)
    for k in range(n - 1):
        pairs += (cps[k] == CARRIAGE_RETURN) & (cps[k + 1] == NEWLINE)
    for k in range(n - 2):
        windows += (cps[k] == PERIOD) & (cps[k + 1] == PERIOD) & (cps[k + 2] == PERIOD)
    # len(text.splitlines()): "\r\n" ends one line, and a last line needs no end
    out[0] = line_ends - pairs + (1 if n and not is_line_end(cps[n - 1]) else 0)
    if windows:  # text.count("...") takes a run of periods len // 3 times
        run = 0
        for k in range(n + 1):
            if k < n and cps[k] == PERIOD:
                run += 1
            elif run:
                ellipses += run // 3
                run = 0
    out[3], out[4] = hashes, ellipses
    # re.findall(r"^[^\S\n]*(?:mark|...)", text, re.M): a line start is 0 or a position after "\n";
    # the blanks are taken greedily, then given back one by one (a mark may begin with a blank), and
    # the search goes on from the end of a match (a mark holding "\n" can pass line starts)
    bulleted, after, p = 0, 0, 0
    while len(ends) > 0 and p <= n:
        if p >= after:
            r = p
            while r < n and cps[r] != NEWLINE and classes[cps[r]] & SPACE:
                r += 1
            for q in range(r, p - 1, -1):
                end = mark_at(cps, q, n, marks, ends)
                if end >= 0:
                    bulleted += 1
                    after = end
                    break
        while p < n and cps[p] != NEWLINE:
            p += 1
        p += 1
    out[1] = bulleted
    # lines ("\n" ends them) ending in "..." or "…" but blanks: re.findall(r"(?:\.\.\.|…)[^\S\n]*$",
    # text, re.M); none without an ellipsis (most texts)
    ellipsis_lines, s = 0, 0
    for k in range(n + 1 if out[4] else 0):
        if k == n or cps[k] == NEWLINE:
            t = k
            while t > s and classes[cps[t - 1]] & SPACE:
                t -= 1
            if (t - s >= 1 and cps[t - 1] == ELLIPSIS) or (
                t - s >= 3 and cps[t - 1] == PERIOD and cps[t - 2] == PERIOD and cps[t - 3] == PERIOD
            ):
                ellipsis_lines += 1
            s = k + 1
    out[2] = ellipsis_lines
    return out


@numba.njit(cache=True)
def _fineweb_lines(cps, classes, short, terminal):
    n = len(cps)
    starts, ends = _piece_arrays(cps)
    out = np.zeros(5, np.int64)
    count, ending, shorter, newlines, s = 0, 0, 0, 0, 0
    for k in range(n + 1):
        if k < n and cps[k] != NEWLINE:
            continue
        if k < n:
            newlines += 1
        t = k
        while t > s and classes[cps[t - 1]] & SPACE:
            t -= 1
        if t > s:  # not blank
            starts[count], ends[count] = s, k
            count += 1
            ending += among(cps[t - 1], terminal)
            if k - s <= short:
                shorter += 1
        s = k + 1
    out[0], out[1], out[2] = count, ending, shorter
    out[3] = _repeats(cps, starts, ends, count)[1]
    out[4] = n - newlines
    return out
