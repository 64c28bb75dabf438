"""Gopher's quality and repetition filters (Rae et al. 2021, "Scaling Language Models: Methods,
Analysis & Insights from Training Gopher", arXiv:2112.11446, Appendix A, MassiveText's
"Quality filtering" and "Repetition removal", the thresholds of its Table A1), as FineWeb ran them.

    GopherQuality(GopherQualitySettings()).check(Doc(text))      # None, or the rule that failed
    GopherRepetition(GopherRepetitionSettings()).check(Doc(text))

Words are `pretrainkit.dataprep.filter.kernels.scan_words`. Where the paper leaves a detail open, the
choice is datatrove's (`pipeline/filters/gopher_*_filter.py`, which FineWeb used), named at each
rule; where this module differs from datatrove, the comment says so and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from pretrainkit.dataprep.filter.kernels import distinct_members, ngram_repeats, word_hash
from pretrainkit.dataprep.filter.line_kernels import joined_code_points, line_marks, repeated_lines
from pretrainkit.dataprep.filter.rules import Doc, Removal, above, below, ratio

GOPHER_STOP_WORDS = ("the", "be", "to", "of", "and", "that", "have", "with")  # Appendix A, quality filtering


@dataclass(frozen=True)
class GopherQualitySettings:
    """Appendix A, "Quality filtering": every threshold as the paper gives it."""

    min_words: int | None = 50  # "does not contain between 50 and 100,000 words"
    max_words: int | None = 100_000
    min_mean_word_length: float | None = 3.0  # "mean word length is outside the range of 3 to 10 characters"
    max_mean_word_length: float | None = 10.0
    max_symbol_word_ratio: float | None = (
        0.1  # "symbol-to-word ratio greater than 0.1 for either the hash symbol or the ellipsis"
    )
    max_bullet_lines_ratio: float | None = 0.9  # "more than 90% of lines starting with a bullet point"
    max_ellipsis_lines_ratio: float | None = 0.3  # "or more than 30% ending with an ellipsis"
    min_alpha_words_ratio: float | None = 0.8  # "80% of words in a document contain at least one alphabetic character"
    min_stop_words: int | None = 2  # "at least two of the following English words"
    stop_words: list[str] = field(default_factory=lambda: list(GOPHER_STOP_WORDS))
    bullets: list[str] = field(default_factory=lambda: ["•", "-"])  # datatrove's bullet marks


class GopherQuality:
    name = "gopher_quality"

    def __init__(self, settings: GopherQualitySettings):
        self.s = settings
        self.bullets = joined_code_points(settings.bullets)
        # stop words as scan_words hashes them in lower case: any letter case counts (datatrove's
        # set intersection of tokens misses "The")
        self.stop_hashes = np.array(sorted({word_hash(w.lower())[1] for w in settings.stop_words}), np.uint64)

    def check(self, doc: Doc) -> Removal | None:
        s, name = self.s, self.name
        ws = doc.words()
        n = ws.count
        removal = below(name, "min_words", n, s.min_words) or above(name, "max_words", n, s.max_words)
        if removal:
            return removal
        mean = ratio(int(ws.lengths.sum()), n)
        removal = below(name, "min_mean_word_length", mean, s.min_mean_word_length) or above(
            name, "max_mean_word_length", mean, s.max_mean_word_length
        )
        if removal:
            return removal
        # a line whose first character but blanks is a bullet; one that ends in an ellipsis but blanks
        marks = line_marks(doc.code_points(), self.bullets)
        # the ratio of each symbol to the words, the hash and the ellipsis each on its own (datatrove
        # divides by all its tokens, punctuation included; the paper's ratio is to words)
        hashes, ellipses = ratio(marks.hashes, n), ratio(marks.ellipses, n)
        removal = above(name, "max_symbol_word_ratio", max(hashes, ellipses), s.max_symbol_word_ratio)
        if removal:
            return removal
        lines = marks.lines
        bulleted = ratio(marks.bulleted, lines)
        if removal := above(name, "max_bullet_lines_ratio", bulleted, s.max_bullet_lines_ratio):
            return removal
        trailing = ratio(marks.ellipsis_lines, lines)
        if removal := above(name, "max_ellipsis_lines_ratio", trailing, s.max_ellipsis_lines_ratio):
            return removal
        if s.min_alpha_words_ratio is not None:
            alpha = int(np.count_nonzero(ws.alpha))
            if removal := below(name, "min_alpha_words_ratio", ratio(alpha, n), s.min_alpha_words_ratio):
                return removal
        if s.min_stop_words is not None:
            found = distinct_members(ws.lower_hashes, self.stop_hashes)
            return below(name, "min_stop_words", found, s.min_stop_words)
        return None


@dataclass(frozen=True)
class GopherRepetitionSettings:
    """Table A1 of the paper: every threshold, the n of each n-gram rule a key of its mapping."""

    max_dup_line_fraction: float | None = 0.30
    max_dup_paragraph_fraction: float | None = 0.30
    max_dup_line_char_fraction: float | None = 0.20
    max_dup_paragraph_char_fraction: float | None = 0.20
    max_top_ngram_char_fraction: dict[int, float] = field(default_factory=lambda: {2: 0.20, 3: 0.18, 4: 0.16})
    max_dup_ngram_char_fraction: dict[int, float] = field(
        default_factory=lambda: {5: 0.15, 6: 0.14, 7: 0.13, 8: 0.12, 9: 0.11, 10: 0.10}
    )


class GopherRepetition:
    """Duplicate lines and paragraphs (their count and their characters, to the text's), the most
    common n-gram's characters (n = 2, 3, 4) and the characters of all repeated n-grams (n = 5..10)."""

    name = "gopher_repetition"

    def __init__(self, settings: GopherRepetitionSettings):
        self.s = s = settings
        # each rule's name and threshold, made once rather than per document (an f-string per rule
        # per document was a fifth of this step's time)
        self.units = [
            (
                f"max_dup_{unit}_fraction",
                getattr(s, f"max_dup_{unit}_fraction"),
                f"max_dup_{unit}_char_fraction",
                getattr(s, f"max_dup_{unit}_char_fraction"),
            )
            for unit in ("paragraph", "line")
        ]
        self.most_n = max([*s.max_top_ngram_char_fraction, *s.max_dup_ngram_char_fraction, 1])
        self.ngram_rules = [
            (
                n,
                (f"max_top_ngram_char_fraction.{n}", s.max_top_ngram_char_fraction.get(n)),
                (f"max_dup_ngram_char_fraction.{n}", s.max_dup_ngram_char_fraction.get(n)),
            )
            for n in range(2, self.most_n + 1)
        ]

    def check(self, doc: Doc) -> Removal | None:
        name, size = self.name, len(doc.text)
        # paragraphs: pieces of the stripped text between blank lines (what re.split(r"\n{2,}", ...)
        # gives); lines: pieces between line feeds, blank lines no lines
        r = repeated_lines(doc.code_points())
        measured = (
            (r.paragraphs, r.repeated_paragraphs, r.repeated_paragraph_chars),
            (r.lines, r.repeated_lines, r.repeated_line_chars),
        )
        for (count_rule, most_count, chars_rule, most_chars), (pieces, count, chars) in zip(self.units, measured):
            removal = above(name, count_rule, ratio(count, pieces), most_count)
            removal = removal or above(name, chars_rule, ratio(chars, size), most_chars)
            if removal:
                return removal
        ws = doc.words()
        # Words and n-grams as 64-bit hashes: two distinct ones of a document share one with odds of
        # about 2^-64, the only way a decision here could differ from comparing the strings.
        top, repeated = (a.tolist() for a in ngram_repeats(ws, self.most_n))  # ints: numpy's scalars are slow
        for n, (top_rule, most_top), (dup_rule, most_dup) in self.ngram_rules:
            if not top[n]:  # no n-gram repeats, so no longer one does: every fraction from here on is 0
                break
            # the most common n-gram; only a repeated one (datatrove also counts an n-gram seen
            # once, which says nothing of repetition)
            if removal := above(name, top_rule, ratio(top[n], size), most_top):
                return removal
            # datatrove's reading of "the fraction of characters contained within all duplicate
            # n-grams": a repeated run's words are counted once, not n times
            if removal := above(name, dup_rule, ratio(repeated[n], size), most_dup):
                return removal
        return None
