"""How the filters cut a text into words, lines and paragraphs, and count what repeats.

    words(text)            # ["U.S.", "don't", "well-known", "3.14", ...]: runs of letters or digits
    duplicates(items)      # (elements seen before, their characters)

Words: runs of word characters (letters, digits, `_`), with inner apostrophes, hyphens and periods
kept inside (`don't`, `well-known`, `U.S`, `3.14`); punctuation and symbols are no words. The
filters' published definitions say "word" without saying how words are found; this is close to what
a word tokenizer keeps (datatrove uses spaCy's, then drops its punctuation tokens for counts and
lengths), at the speed of one regular-expression scan in C.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

_WORD = re.compile(r"\w+(?:['’.\-]\w+)*")
_PARAGRAPH_BREAK = re.compile(r"\n{2,}")
_LINE_BREAKS = re.compile(r"\n+")


def words(text: str) -> list[str]:
    return _WORD.findall(text)


def paragraphs(text: str) -> list[str]:
    """Paragraphs: pieces between blank lines (two or more line feeds), of the stripped text."""
    return _PARAGRAPH_BREAK.split(text.strip())


def lines(text: str) -> list[str]:
    """Lines: pieces between runs of line feeds (blank lines are no lines)."""
    return _LINE_BREAKS.split(text)


def duplicates(items: Iterable[str]) -> tuple[int, int]:
    """(elements equal to an earlier one, their characters): a repeat counts each time, the first occurrence never."""
    seen: set[str] = set()
    count = chars = 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        else:
            seen.add(item)
    return count, chars
