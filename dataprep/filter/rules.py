"""What every filter step shares: the document as the steps see it, and a removal's reason.

    doc = Doc(text)                     # the text the steps read, and the fields they add
    removal = step.check(doc)           # None: kept (the step may have changed doc.text)
    removal.filter, removal.value       # "gopher_quality.min_words", 12 (with removal.threshold 50)

A step is a class with a `name` (its key in the filters file, `pretrainkit.dataprep.filter.steps`)
and `check(doc) -> Removal | None`; a step that gains from seeing documents together (the language
model's one compiled call) also has `check_many(docs) -> [Removal | None]`, the same verdicts. Its
rules are its settings: a rule whose setting is None (null in the file) is off. A rule is named in
`removed.jsonl` and `stats.json` as `<step>.<setting>`, the setting whose threshold the document
failed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pretrainkit.dataprep.filter.kernels import Words, code_points, words_of


class Doc:
    """A document as the steps see it: its text, the fields the steps add to the kept record (lang,
    lang_score, pii), and what the steps found of the text (its code points, its words), kept for the
    next step until the text changes. Slots and plain attributes: every step reads these for every
    document."""

    __slots__ = ("_text", "fields", "_code_points", "_words", "_unicode_words")

    def __init__(self, text: str):
        self._text = text
        self.fields: dict = {}
        self._code_points: np.ndarray | None = None
        self._words: Words | None = None
        self._unicode_words: Words | None = None

    @property
    def text(self) -> str:
        return self._text

    @text.setter
    def text(self, text: str) -> None:
        if text is not self._text:  # a step that changed nothing may still assign the text it read
            self.set_text(text, None)

    def set_text(self, text: str, code_points: np.ndarray | None) -> None:
        """The text a step leaves, with its code points where the step has them (else found when read)."""
        self._text = text
        self._code_points = code_points
        self._words = None
        self._unicode_words = None

    def code_points(self) -> np.ndarray:
        """The text's code points (`kernels.code_points`), for the compiled kernels."""
        if self._code_points is None:
            self._code_points = code_points(self._text)
        return self._code_points

    def words(self, unicode: bool = False) -> Words:
        """The text's words (`kernels.scan_words`; `unicode`: the words of every script), found once for
        the steps that read the same text."""
        if unicode:
            if self._unicode_words is None:
                self._unicode_words = words_of(self.code_points(), True)
            return self._unicode_words
        if self._words is None:
            self._words = words_of(self.code_points())
        return self._words


RANGE = "range"  # a settings field's metadata key: its `pretrainkit.arguments.Bounded` (`steps.ranged`)


@dataclass(frozen=True)
class Removal:
    filter: str  # "<step>.<rule>"
    value: object  # what the document measured (rounded), or what it held
    threshold: object  # the setting it failed


def ratio(part: float, whole: float) -> float:
    """part / whole, 0 for an empty whole (a document with no lines or words has no such fraction)."""
    return part / whole if whole else 0.0


def shown(value: float) -> float:
    """A measured fraction as a removed row shows it: 4 decimals are enough to see the threshold's side."""
    return round(value, 4)


def below(step: str, rule: str, value: float, least: float | None) -> Removal | None:
    """A removal when `value` is below the least allowed (`least` None: the rule is off)."""
    if least is not None and value < least:
        return Removal(f"{step}.{rule}", shown(value) if isinstance(value, float) else value, least)
    return None


def above(step: str, rule: str, value: float, most: float | None) -> Removal | None:
    """A removal when `value` is above the most allowed (`most` None: the rule is off)."""
    if most is not None and value > most:
        return Removal(f"{step}.{rule}", shown(value) if isinstance(value, float) else value, most)
    return None
