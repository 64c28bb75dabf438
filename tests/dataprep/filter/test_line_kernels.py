"""The compiled line counts (`line_kernels`) give what the Python expressions they stand for give, on
real texts and on random texts made of the characters where the two could part: every line end
`str.splitlines` knows, "\\r\\n", runs of line feeds, blanks of other scripts, periods and ellipses,
bullets (marks that begin with a blank or hold a line feed among them), repeated pieces."""

from __future__ import annotations

import random
import re

import pytest

from pretrainkit.dataprep.filter.fineweb import TERMINAL_PUNCTUATION
from pretrainkit.dataprep.filter.kernels import code_points
from pretrainkit.dataprep.filter.line_kernels import bullet_marks, fineweb_lines, line_marks, repeated_lines


def repeats(items: list[str]) -> tuple[int, int]:
    """(elements equal to an earlier one, their characters)."""
    seen, count, chars = set(), 0, 0
    for item in items:
        if item in seen:
            count += 1
            chars += len(item)
        seen.add(item)
    return count, chars


def expected_repeated_lines(text: str) -> tuple:
    paragraphs = [p for p in re.split(r"\n{2,}", text.strip()) if p] or [""]
    lines = [line for line in text.split("\n") if line]
    return (len(paragraphs), *repeats(paragraphs), len(lines), *repeats(lines))


def expected_line_marks(text: str, bullets: list[str]) -> tuple:
    marks = "|".join(re.escape(b) for b in bullets)
    bulleted = len(re.findall(rf"^[^\S\n]*(?:{marks})", text, re.M)) if bullets else 0
    ellipsis_lines = len(re.findall(r"(?:\.\.\.|…)[^\S\n]*$", text, re.M))
    return len(text.splitlines()), bulleted, ellipsis_lines, text.count("#"), text.count("...") + text.count("…")


def expected_fineweb_lines(text: str, short: int) -> tuple:
    lines = [line for line in text.split("\n") if line.strip()]
    ending = sum(1 for line in lines if line.rstrip().endswith(tuple(TERMINAL_PUNCTUATION)))
    shorter = sum(1 for line in lines if len(line) <= short)
    return len(lines), ending, shorter, repeats(lines)[1], len(text) - text.count("\n")


PIECES = [
    *"\n\n\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029",
    "\r\n",
    *"  \t\xa0\u3000\u2003",
    *"...…#•-*",
    *"。!?؟।",
    "word",
    "Word",
    "déjà",
    "x",
    "the same line",
    "1.2.3",
    "\ud800",  # a lone surrogate: a code point like any other
]
BULLETS = [["•", "-"], [], ["*"], [" -", "•"], ["-\n", "\n"], ["...", "…"]]


def random_texts(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(PIECES, k=rng.randint(0, 60))) for _ in range(count)]


def check(text: str) -> None:
    cps = code_points(text)
    assert tuple(vars(repeated_lines(cps)).values()) == expected_repeated_lines(text), repr(text)
    for bullets in BULLETS:
        assert tuple(vars(line_marks(cps, bullet_marks(bullets))).values()) == expected_line_marks(text, bullets), (
            text,
            bullets,
        )
    for short in (1, 5, 30):
        terminal = code_points(TERMINAL_PUNCTUATION)
        assert tuple(vars(fineweb_lines(cps, short, terminal)).values()) == expected_fineweb_lines(text, short), (
            repr(text),
            short,
        )


@pytest.mark.parametrize(
    "text",
    ["", " ", "\n", "\n\n", "a", "a\n\n\nb", "a\n\n\n\n\nb\n\na", "\r\n", "a\r\n\r\nb", "....", "......", "- a\n\n- a"],
)
def test_edge_texts(text):
    check(text)


def test_random_texts_of_the_characters_where_the_counts_could_part():
    for text in random_texts(3000):
        check(text)


def test_real_texts(reuters_docs, license_docs):
    for _, text in reuters_docs[:400] + license_docs[:60]:
        check(text)
