"""Gopher's two filters decided in one compiled call each (numba): every measure of
`pretrainkit.dataprep.filter.gopher` and its comparison with its threshold, in the rules' order,
stopping at the first that fails.

    rule, value = repetition_verdict(cps, words, most_n, limits, 1)   # (-1, 0.0): every rule passed
    rule, value = quality_verdict(cps, words, bullets, stop_hashes, limits)

`limits` holds the thresholds in the rules' order, NaN for a rule that is off (no comparison with
NaN is true). `value` is the measure that failed, as the Python expression `ratio(part, whole)`
gives it (an integer divided by an integer in double precision, both below 2^53: the same float).
Per document, the Python comparisons, ratios and rule names these replace cost ~10 us of a 1.5 KB
page, more than the measures' own compiled passes.
"""

from __future__ import annotations

import numpy as np

from pretrainkit.dataprep.filter.kernels import Words, _ngram_repeats, tables
from pretrainkit.dataprep.filter.line_kernels import _line_marks, _repeated_lines

# isort: split
import numba  # noqa: E402

# the rules in the order they are checked, each a setting of GopherRepetitionSettings or
# GopherQualitySettings; after the repetition's line rules, for each n from 2 to most_n, the rule of
# the most common n-gram, then the rule of the duplicate n-grams
REPETITION_LINE_RULES = (
    "max_dup_paragraph_fraction",
    "max_dup_paragraph_char_fraction",
    "max_dup_line_fraction",
    "max_dup_line_char_fraction",
)
QUALITY_RULES = (
    "min_words",
    "max_words",
    "min_mean_word_length",
    "max_mean_word_length",
    "max_symbol_word_ratio",
    "max_bullet_lines_ratio",
    "max_ellipsis_lines_ratio",
    "min_alpha_words_ratio",
    "min_stop_words",
)
QUALITY_COUNTS = frozenset({"min_words", "max_words", "min_stop_words"})  # their value is a count, not a ratio


def limits_array(thresholds: list[float | None]) -> np.ndarray:
    return np.array([np.nan if t is None else t for t in thresholds], np.float64)


def repetition_verdict(cps: np.ndarray, words: Words, most_n: int, limits: np.ndarray, gap: int) -> tuple[int, float]:
    """`gap`: the characters between an n-gram's words (`kernels.ngram_repeats`)."""
    return _repetition(cps, tables()[0], words.hashes, words.lengths, most_n, limits, gap)


def quality_verdict(
    cps: np.ndarray,
    words: Words,
    bullets: tuple[np.ndarray, np.ndarray],
    stop_hashes: np.ndarray,
    limits: np.ndarray,
) -> tuple[int, float]:
    return _quality(cps, tables()[0], words.lengths, words.alpha, words.lower_hashes, *bullets, stop_hashes, limits)


@numba.njit(cache=True)
def _ratio(part, whole):
    return part / whole if whole else 0.0


@numba.njit(cache=True)
def _repetition(cps, classes, hashes, lengths, most_n, limits, gap):
    size = len(cps)
    r = _repeated_lines(cps, classes)
    measured = (_ratio(r[1], r[0]), _ratio(r[2], size), _ratio(r[4], r[3]), _ratio(r[5], size))
    for k in range(4):
        if measured[k] > limits[k]:
            return k, measured[k]
    top, repeated = _ngram_repeats(hashes, lengths, most_n, gap)
    for n in range(2, most_n + 1):
        if top[n] == 0:  # no n-gram repeats, so no longer one does: every fraction from here on is 0
            break
        k = 4 + 2 * (n - 2)
        value = _ratio(top[n], size)
        if value > limits[k]:
            return k, value
        value = _ratio(repeated[n], size)
        if value > limits[k + 1]:
            return k + 1, value
    return -1, 0.0


@numba.njit(cache=True)
def _quality(cps, classes, lengths, alpha, lower_hashes, marks, ends, stop_hashes, limits):
    n = len(lengths)
    if n < limits[0]:
        return 0, float(n)
    if n > limits[1]:
        return 1, float(n)
    mean = _ratio(lengths.sum(), n)
    if mean < limits[2]:
        return 2, mean
    if mean > limits[3]:
        return 3, mean
    m = _line_marks(cps, classes, marks, ends)  # lines, bulleted, ellipsis lines, hashes, ellipses
    symbols = max(_ratio(m[3], n), _ratio(m[4], n))
    if symbols > limits[4]:
        return 4, symbols
    value = _ratio(m[1], m[0])
    if value > limits[5]:
        return 5, value
    value = _ratio(m[2], m[0])
    if value > limits[6]:
        return 6, value
    if not np.isnan(limits[7]):
        value = _ratio(np.count_nonzero(alpha), n)
        if value < limits[7]:
            return 7, value
    if not np.isnan(limits[8]):
        found = _distinct_members(lower_hashes, stop_hashes, limits[8])
        if found < limits[8]:
            return 8, float(found)
    return -1, 0.0


@numba.njit(cache=True)
def _distinct_members(hashes, members, enough):
    """How many of `members` (distinct hashes) occur in `hashes`, counted until `enough` are found (the
    rule needs no more: most pages hold two stop words within their first words)."""
    found = np.zeros(len(members), np.bool_)
    count = 0
    for h in hashes:
        for j in range(len(members)):
            if h == members[j] and not found[j]:
                found[j] = True
                count += 1
                if count >= enough or count == len(members):
                    return count
    return count
