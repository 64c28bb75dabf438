"""How the filters cut a text into lines and paragraphs, and count what repeats (words:
`pretrainkit.dataprep.filter.kernels.scan_words`).

    paragraphs(text), lines(text)
    duplicates(items)      # (elements seen before, their characters)
"""

from __future__ import annotations


def paragraphs(text: str) -> list[str]:
    """Paragraphs: pieces between blank lines (two or more line feeds), of the stripped text: what
    `re.split(r"\\n{2,}", text.strip())` gives, by `str.split` (several times faster)."""
    pieces = [p.lstrip("\n") for p in text.strip().split("\n\n")]
    return [p for p in pieces if p] or [""]


def lines(text: str) -> list[str]:
    """Lines: pieces between line feeds; blank lines are no lines."""
    return list(filter(None, text.split("\n")))


def duplicates(items: list[str]) -> tuple[int, int]:
    """(elements equal to an earlier one, their characters): a repeat counts each time, the first occurrence never."""
    # every element but each distinct one's first occurrence is a repeat: counted by the set, in C,
    # rather than by a Python loop over the elements (most of the repetition filters' time)
    distinct = set(items)
    return len(items) - len(distinct), sum(map(len, items)) - sum(map(len, distinct))
