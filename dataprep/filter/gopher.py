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

from pretrainkit.dataprep.filter.gopher_kernel import (
    QUALITY_COUNTS,
    QUALITY_RULES,
    REPETITION_LINE_RULES,
    limits_array,
    quality_verdict,
    repetition_verdict,
)
from pretrainkit.dataprep.filter.kernels import word_hash
from pretrainkit.dataprep.filter.line_kernels import joined_code_points
from pretrainkit.dataprep.filter.rules import Doc, Removal, shown

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
        self.bullets = joined_code_points(settings.bullets)
        # stop words as scan_words hashes them in lower case: any letter case counts (datatrove's
        # set intersection of tokens misses "The")
        self.stop_hashes = np.array(sorted({word_hash(w.lower())[1] for w in settings.stop_words}), np.uint64)
        # the thresholds in the order the kernel checks them (gopher_kernel.QUALITY_RULES)
        self.thresholds = [getattr(settings, rule) for rule in QUALITY_RULES]
        self.limits = limits_array(self.thresholds)

    def check(self, doc: Doc) -> Removal | None:
        # Words: what kernels.scan_words finds. In order: their count; their mean length; the ratio
        # of each symbol to the words, the hash and the ellipsis each on its own (datatrove divides by
        # all its tokens, punctuation included; the paper's ratio is to words); lines whose first
        # character but blanks is a bullet, and lines that end in an ellipsis but blanks, each to all
        # lines; words with a letter; how many of the stop words occur.
        rule, value = quality_verdict(doc.code_points(), doc.words(), self.bullets, self.stop_hashes, self.limits)
        if rule < 0:
            return None
        name = QUALITY_RULES[rule]
        value = int(value) if name in QUALITY_COUNTS else shown(value)
        return Removal(f"{self.name}.{name}", value, self.thresholds[rule])


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
        s = settings
        self.most_n = max([*s.max_top_ngram_char_fraction, *s.max_dup_ngram_char_fraction, 1])
        # (rule, threshold) in the order the kernel checks them (gopher_kernel.REPETITION_LINE_RULES)
        rules = [(rule, getattr(s, rule)) for rule in REPETITION_LINE_RULES] + [
            (f"{rule}.{n}", getattr(s, rule).get(n))
            for n in range(2, self.most_n + 1)
            for rule in ("max_top_ngram_char_fraction", "max_dup_ngram_char_fraction")
        ]
        self.rules, self.thresholds = [r for r, _ in rules], [t for _, t in rules]
        self.limits = limits_array(self.thresholds)

    def check(self, doc: Doc) -> Removal | None:
        # Paragraphs: pieces of the stripped text between blank lines (what re.split(r"\n{2,}", ...)
        # gives); lines: pieces between line feeds, blank lines no lines. Then the n-grams of words
        # (kernels.scan_words) as 64-bit hashes: two distinct ones of a document share one with odds of
        # about 2^-64, the only way a decision here could differ from comparing the strings. The
        # most common n-gram counts only if it repeats (datatrove also counts an n-gram seen once,
        # which says nothing of repetition); "the fraction of characters contained within all
        # duplicate n-grams" is datatrove's reading: a repeated run's words count once, not n times.
        rule, value = repetition_verdict(doc.code_points(), doc.words(), self.most_n, self.limits)
        if rule < 0:
            return None
        return Removal(f"{self.name}.{self.rules[rule]}", shown(value), self.thresholds[rule])
