"""FineWeb's own three filters (Penedo et al. 2024, "The FineWeb Datasets: Decanting the Web for the
Finest Text Data at Scale", arXiv:2406.17557, Section 3, "Developing additional heuristic filters":
a document goes when the "fraction of lines ending with punctuation <= 0.12", the "fraction of
characters in duplicated lines >= 0.1" or the "fraction of lines shorter than 30 characters >= 0.67"):

    FineWebQuality(FineWebSettings()).check(doc)

Lines are the text's non-blank lines. datatrove's `FineWebQualityFilter` ships 0.01 as the default
of the duplicated-characters rule; the paper's 0.1 is the default here (the published threshold). Its
later fourth rule (line feeds per word, for FineWeb-2) is none of the three.

The settings are English's. In a document labelled with another language (`language_rules`) a line
ends in punctuation also where it ends in one of the language's sentence marks (Khmer's ។, Myanmar's
။), the punctuation share is off where the language has none (Thai, Lao) or no rules, and in a
language of an unspaced script a short line is one of as many words as 30 English characters hold
(5 words: 9 Chinese characters, 15 Japanese, 30 Thai code points).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from pretrainkit.dataprep.filter.kernels import code_points
from pretrainkit.dataprep.filter.language_rules import ENGLISH_CHARS_PER_WORD, LanguageRules, PerLanguage
from pretrainkit.dataprep.filter.line_kernels import fineweb_lines
from pretrainkit.dataprep.filter.rules import Doc, Removal, above, below, ratio

# Marks that end a sentence, in the scripts that have their own (Latin, CJK full stops, Arabic,
# Devanagari, Armenian, Ethiopic, Greek question mark, ...): datatrove's list is longer; these are
# the ones that end lines of text in the languages FineWeb's successors cover most.
TERMINAL_PUNCTUATION = ".!?…。！？．｡؟۔।॥։።፧\u037e᙮᠃᠉"
_TERMINAL_CODE_POINTS = code_points(TERMINAL_PUNCTUATION)


@dataclass(frozen=True)
class FineWebSettings:
    min_line_punct_ratio: float | None = 0.12
    max_short_line_ratio: float | None = 0.67
    short_line_length: int = 30  # characters: a line this long or shorter is short
    max_dup_line_char_fraction: float | None = 0.1


class FineWebQuality:
    name = "fineweb_quality"

    def __init__(self, settings: FineWebSettings):
        self.s = settings
        self.rules = PerLanguage((settings, _TERMINAL_CODE_POINTS), self._language_rules)

    def _language_rules(self, rules: LanguageRules) -> tuple[FineWebSettings, np.ndarray]:
        """The settings and the marks that end a line in punctuation, with the language's."""
        s = self.s
        short = s.short_line_length
        if rules.unspaced:
            short = round(s.short_line_length / ENGLISH_CHARS_PER_WORD * rules.chars_per_word)
        punct = s.min_line_punct_ratio if rules.line_punctuation else None
        marks = TERMINAL_PUNCTUATION + "".join(c for c in rules.sentence_marks if c not in TERMINAL_PUNCTUATION)
        return replace(s, min_line_punct_ratio=punct, short_line_length=short), code_points(marks)

    def check(self, doc: Doc) -> Removal | None:
        (s, terminal), name = self.rules(doc.fields.get("lang")), self.name
        # the lines that are not blank; one ends in punctuation when its last character but blanks does
        f = fineweb_lines(doc.code_points(), s.short_line_length, terminal)
        if removal := below(name, "min_line_punct_ratio", ratio(f.ending, f.lines), s.min_line_punct_ratio):
            return removal
        if removal := above(name, "max_short_line_ratio", ratio(f.short, f.lines), s.max_short_line_ratio):
            return removal
        fraction = ratio(f.repeated_chars, f.chars)
        return above(name, "max_dup_line_char_fraction", fraction, s.max_dup_line_char_fraction)
