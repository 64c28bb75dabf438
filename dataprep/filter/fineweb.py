"""FineWeb's own three filters (Penedo et al. 2024, "The FineWeb Datasets: Decanting the Web for the
Finest Text Data at Scale", arXiv:2406.17557, Section 3, "Developing additional heuristic filters":
a document goes when the "fraction of lines ending with punctuation <= 0.12", the "fraction of
characters in duplicated lines >= 0.1" or the "fraction of lines shorter than 30 characters >= 0.67"):

    FineWebQuality(FineWebSettings()).check(doc)

Lines are the text's non-blank lines. datatrove's `FineWebQualityFilter` ships 0.01 as the default
of the duplicated-characters rule; the paper's 0.1 is the default here (the published threshold). Its
later fourth rule (line feeds per word, for FineWeb-2) is none of the three.
"""

from __future__ import annotations

from dataclasses import dataclass

from pretrainkit.dataprep.filter.rules import Doc, Removal, above, below, ratio
from pretrainkit.dataprep.filter.text import duplicates

# Marks that end a sentence, in the scripts that have their own (Latin, CJK full stops, Arabic,
# Devanagari, Armenian, Ethiopic, Greek question mark, ...): datatrove's list is longer; these are
# the ones that end lines of text in the languages FineWeb's successors cover most.
TERMINAL_PUNCTUATION = tuple(".!?…。！？．｡؟۔।॥։።፧\u037e᙮᠃᠉")


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

    def check(self, doc: Doc) -> Removal | None:
        s, text, name = self.s, doc.text, self.name
        ls = [line for line in text.split("\n") if line.strip()]
        if s.min_line_punct_ratio is not None:
            ending = sum(1 for line in ls if line.rstrip().endswith(TERMINAL_PUNCTUATION))
            if removal := below(name, "min_line_punct_ratio", ratio(ending, len(ls)), s.min_line_punct_ratio):
                return removal
        if s.max_short_line_ratio is not None:
            short = sum(1 for line in ls if len(line) <= s.short_line_length)
            if removal := above(name, "max_short_line_ratio", ratio(short, len(ls)), s.max_short_line_ratio):
                return removal
        if s.max_dup_line_char_fraction is not None:
            _, chars = duplicates(ls)
            fraction = ratio(chars, len(text) - text.count("\n"))
            return above(name, "max_dup_line_char_fraction", fraction, s.max_dup_line_char_fraction)
        return None
