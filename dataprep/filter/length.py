"""The minimum length: a document shorter than `min_chars` characters (of its text as the steps
before left it), or of fewer than `min_words` words, is removed.

    MinLength(MinLengthSettings(min_chars=200)).check(doc)
"""

from __future__ import annotations

from dataclasses import dataclass

from pretrainkit.dataprep.filter.rules import Doc, Removal, below

# The most a per-document count in a setting may be (characters, words, lines: a filters file's, and
# `ptk dedup --paragraphs --min-length`): far past any document, and within what the kernels compare.
MOST_CHARS = 10**9


@dataclass(frozen=True)
class MinLengthSettings:
    min_chars: int | None = 1
    min_words: int | None = None


class MinLength:
    name = "min_length"

    def __init__(self, settings: MinLengthSettings):
        self.s = settings

    def check(self, doc: Doc) -> Removal | None:
        removal = below(self.name, "min_chars", len(doc.text.strip()), self.s.min_chars)
        if removal is None and self.s.min_words is not None:
            removal = below(self.name, "min_words", doc.words().count, self.s.min_words)
        return removal
