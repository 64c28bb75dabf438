"""Gopher's quality and repetition filters (Rae et al. 2021, "Scaling Language Models: Methods,
Analysis & Insights from Training Gopher", arXiv:2112.11446, Appendix A, MassiveText's
"Quality filtering" and "Repetition removal", the thresholds of its Table A1), as FineWeb ran them.

    GopherQuality(GopherQualitySettings()).check(Doc(text))      # None, or the rule that failed
    GopherRepetition(GopherRepetitionSettings()).check(Doc(text))

Words are `pretrainkit.dataprep.filter.kernels.scan_words`. Where the paper leaves a detail open, the
choice is datatrove's (`pipeline/filters/gopher_*_filter.py`, which FineWeb used), named at each
rule; where this module differs from datatrove, the comment says so and why. The settings are
English's; a document labelled with another language is judged with its language's stop words, word
length range and word unit (`language_rules`).
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
from pretrainkit.dataprep.filter.kernels import scan_words, word_hash
from pretrainkit.dataprep.filter.language_rules import LanguageRules, PerLanguage
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


@dataclass(frozen=True)
class _QualityRules:
    """GopherQuality's rules for one language: its thresholds in QUALITY_RULES' order, the kernel's
    limits, the stop words' hashes (or the stop words themselves, where they are found in the text)."""

    thresholds: list
    limits: np.ndarray
    stop_hashes: np.ndarray
    unicode: bool  # the words of every script (`kernels.words_of`)
    stop_words_in_text: tuple[str, ...]  # found anywhere in the text: the kernel's stop-word rule off


class GopherQuality:
    name = "gopher_quality"

    def __init__(self, settings: GopherQualitySettings):
        self.s = settings
        self.bullets = joined_code_points(settings.bullets)
        # stop words as scan_words hashes them in lower case: any letter case counts (datatrove's
        # set intersection of tokens misses "The")
        stop_hashes = np.array(sorted({word_hash(w.lower())[1] for w in settings.stop_words}), np.uint64)
        # the thresholds in the order the kernel checks them (gopher_kernel.QUALITY_RULES)
        thresholds = [getattr(settings, rule) for rule in QUALITY_RULES]
        english = _QualityRules(thresholds, limits_array(thresholds), stop_hashes, False, ())
        self.rules = PerLanguage(english, self._language_rules)

    def _language_rules(self, r: LanguageRules) -> _QualityRules:
        """The settings with `r`'s values where they depend on the language: a rule the settings turn
        off stays off; word counts in the language's word tokens; the symbols' ratio to tokens."""
        s = self.s
        on = {rule: getattr(s, rule) is not None for rule in QUALITY_RULES}
        t = dict(zip(QUALITY_RULES, self.rules.english.thresholds))
        t["min_words"], t["max_words"] = r.words(s.min_words), r.words(s.max_words)
        t["min_mean_word_length"] = r.min_mean_word_length if on["min_mean_word_length"] else None
        t["max_mean_word_length"] = r.max_mean_word_length if on["max_mean_word_length"] else None
        if on["max_symbol_word_ratio"]:
            t["max_symbol_word_ratio"] = s.max_symbol_word_ratio / r.chars_per_word
        t["min_stop_words"] = s.min_stop_words if on["min_stop_words"] and r.stop_words else None
        thresholds = [t[rule] for rule in QUALITY_RULES]
        in_text = r.stop_words if r.stop_words_in_text and t["min_stop_words"] is not None else ()
        limits = limits_array([None if in_text and rule == "min_stop_words" else t[rule] for rule in QUALITY_RULES])
        # FineWeb-2's lists hold a few words that are no word here ("l'", "d'": a word runs on over an
        # inner apostrophe): only those that are one word can match one
        hashes = [scan_words(w.lower(), True) for w in r.stop_words]
        stop_hashes = np.array(sorted({int(w.lower_hashes[0]) for w in hashes if w.count == 1}), np.uint64)
        return _QualityRules(thresholds, limits, stop_hashes, True, in_text)

    def check(self, doc: Doc) -> Removal | None:
        # Words: what kernels.scan_words finds. In order: their count; their mean length; the ratio
        # of each symbol to the words, the hash and the ellipsis each on its own (datatrove divides by
        # all its tokens, punctuation included; the paper's ratio is to words); lines whose first
        # character but blanks is a bullet, and lines that end in an ellipsis but blanks, each to all
        # lines; words with a letter; how many of the stop words occur.
        q = self.rules(doc.fields.get("lang"))
        words = doc.words(q.unicode)
        rule, value = quality_verdict(doc.code_points(), words, self.bullets, q.stop_hashes, q.limits)
        if rule < 0 and q.stop_words_in_text:
            least = q.thresholds[-1]
            found = _found_in_text(doc.text, q.stop_words_in_text, least)
            rule, value = (len(QUALITY_RULES) - 1, found) if found < least else (-1, 0.0)
        if rule < 0:
            return None
        name = QUALITY_RULES[rule]
        value = int(value) if name in QUALITY_COUNTS else shown(value)
        return Removal(f"{self.name}.{name}", value, q.thresholds[rule])


def _found_in_text(text: str, stop_words: tuple[str, ...], enough: float) -> int:
    """How many of `stop_words` occur in `text`, counted until `enough` are found."""
    found = 0
    for word in stop_words:
        if word in text:
            found += 1
            if found >= enough:
                break
    return found


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


@dataclass(frozen=True)
class _RepetitionRules:
    """GopherRepetition's rules for one language: (rule, threshold) in the kernel's order, its limits."""

    most_n: int
    rules: list[str]
    thresholds: list
    limits: np.ndarray
    unicode: bool  # the words of every script (`kernels.words_of`)
    gap: int  # characters between an n-gram's words: 1, a space; 0 between an unspaced script's


def _repetition_rules(s: GopherRepetitionSettings, rules: LanguageRules | None) -> _RepetitionRules:
    """The rules in the order the kernel checks them (gopher_kernel.REPETITION_LINE_RULES, then for each
    n the most common n-gram's and the duplicate n-grams'). In a language of an unspaced script an
    n-gram of words is one of n x chars_per_word characters (its rules keep the n of the settings)."""
    scale = 1.0 if rules is None else rules.chars_per_word
    by_n: dict[tuple[str, int], tuple[int, float]] = {}  # (rule, n in tokens) -> (n of the settings, threshold)
    for rule in ("max_top_ngram_char_fraction", "max_dup_ngram_char_fraction"):
        for n, threshold in getattr(s, rule).items():
            by_n[rule, max(n, round(n * scale))] = (n, threshold)
    most_n = max([n for _, n in by_n] + [1])
    named = [(rule, getattr(s, rule)) for rule in REPETITION_LINE_RULES]
    for n in range(2, most_n + 1):
        for rule in ("max_top_ngram_char_fraction", "max_dup_ngram_char_fraction"):
            words_n, threshold = by_n.get((rule, n), (n, None))
            named.append((f"{rule}.{words_n}", threshold))
    thresholds = [t for _, t in named]
    unspaced = rules is not None and rules.unspaced
    return _RepetitionRules(
        most_n, [r for r, _ in named], thresholds, limits_array(thresholds), rules is not None, 0 if unspaced else 1
    )


class GopherRepetition:
    """Duplicate lines and paragraphs (their count and their characters, to the text's), the most
    common n-gram's characters (n = 2, 3, 4) and the characters of all repeated n-grams (n = 5..10)."""

    name = "gopher_repetition"

    def __init__(self, settings: GopherRepetitionSettings):
        self.rules = PerLanguage(
            _repetition_rules(settings, None), lambda language: _repetition_rules(settings, language)
        )

    def check(self, doc: Doc) -> Removal | None:
        # Paragraphs: pieces of the stripped text between blank lines (what re.split(r"\n{2,}", ...)
        # gives); lines: pieces between line feeds, blank lines no lines. Then the n-grams of words
        # (kernels.scan_words) as 64-bit hashes: two distinct ones of a document share one with odds of
        # about 2^-64, the only way a decision here could differ from comparing the strings. The
        # most common n-gram counts only if it repeats (datatrove also counts an n-gram seen once,
        # which says nothing of repetition); "the fraction of characters contained within all
        # duplicate n-grams" is datatrove's reading: a repeated run's words count once, not n times.
        r = self.rules(doc.fields.get("lang"))
        rule, value = repetition_verdict(doc.code_points(), doc.words(r.unicode), r.most_n, r.limits, r.gap)
        if rule < 0:
            return None
        return Removal(f"{self.name}.{r.rules[rule]}", shown(value), r.thresholds[rule])
