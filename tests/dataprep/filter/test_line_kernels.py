"""The compiled line work (`line_kernels`) gives what the Python expressions it stands for give, on
real texts and on random texts made of the characters where the two could part: every line end
`str.splitlines` knows, "\\r\\n", runs of line feeds, blanks of other scripts, periods and ellipses,
bullets (marks that begin with a blank or hold a line feed among them), repeated pieces; for C4, its
citation marks (digits of other scripts), its phrases in any letter case, closing quotes, long words."""

from __future__ import annotations

import random
import re

import pytest

from pretrainkit.dataprep.filter.c4 import C4, C4Settings
from pretrainkit.dataprep.filter.c4_kernel import POLICY_PHRASES
from pretrainkit.dataprep.filter.fineweb import TERMINAL_PUNCTUATION
from pretrainkit.dataprep.filter.kernels import code_points
from pretrainkit.dataprep.filter.line_kernels import fineweb_lines, joined_code_points, line_marks, repeated_lines
from pretrainkit.dataprep.filter.rules import Doc


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


def random_texts(pieces: list[str], count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return ["".join(rng.choices(pieces, k=rng.randint(0, 60))) for _ in range(count)]


def check_counts(text: str) -> None:
    cps = code_points(text)
    assert tuple(vars(repeated_lines(cps)).values()) == expected_repeated_lines(text), repr(text)
    for bullets in BULLETS:
        assert tuple(vars(line_marks(cps, joined_code_points(bullets))).values()) == expected_line_marks(
            text, bullets
        ), (
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
    check_counts(text)


# ---- C4 (the step's Python definition, line by line as TFDS's clean_page does it) ----

CITATION = re.compile(r"\[\d*\]|\[edit\]|\[citation needed\]")
SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=[^\S\n]+\S)")


def expected_c4(text: str, s: C4Settings):
    """(the removal's filter and value, or None; the text left), as C4's rules define them in Python."""
    lower_page = text.lower()
    lorem = s.lorem_ipsum and "lorem ipsum" in lower_page
    javascript = s.drop_javascript_lines and "javascript" in lower_page
    curly = s.curly_bracket and "{" in text
    policy = s.drop_policy_lines and any(p in lower_page for p in POLICY_PHRASES)
    kept = []
    for line in text.splitlines():
        line = line.strip()
        if s.max_word_length is not None and any(len(w) > s.max_word_length for w in line.split()):
            continue
        if s.remove_citations:
            line = CITATION.sub("", line)
        if s.require_terminal_punctuation and not (
            line.endswith((".", "?", "!", '"', "'")) and not line.endswith("...")
        ):
            continue
        if s.min_words_per_line is not None and len(line.split()) < s.min_words_per_line:
            continue
        lower = line.lower()
        if lorem and "lorem ipsum" in lower:
            return ("c4.lorem_ipsum", "lorem ipsum"), None
        if javascript and "javascript" in lower:
            continue
        if curly and "{" in line:
            return ("c4.curly_bracket", "{"), None
        if policy and any(p in lower for p in POLICY_PHRASES):
            continue
        kept.append(line)
    joined = "\n".join(kept)
    if s.min_sentences is not None:
        sentences = len(kept) + len(SENTENCE_END.findall(joined))
        if sentences < s.min_sentences:
            return ("c4.min_sentences", sentences), None
    return None, joined.strip()


C4_SETTINGS = [
    C4Settings(),
    C4Settings(require_terminal_punctuation=False),  # as FineWeb ran it
    C4Settings(min_words_per_line=None, min_sentences=None),
    C4Settings(max_word_length=6, min_words_per_line=1, min_sentences=2),
    C4Settings(remove_citations=False, min_sentences=0, min_words_per_line=0, require_terminal_punctuation=False),
]
C4_PIECES = [
    *"\n\n\r\x0b\x85\u2028  \t\xa0\u3000",
    "\r\n",
    *".?!\"'”’)]…{",
    "[1]",
    "[12",
    "[٣]",  # an Arabic-Indic digit: \d
    "[]",
    "[edit]",
    "[citation needed]",
    "[[2]]",
    "lorem ipsum",
    "Lorem Ipsum",
    "lorem[3] ipsum",
    "JavaScript",
    "JAVASCRİPT",
    "Terms of Use",
    "use cookies",
    "COO\u212aIE POLICY",  # the Kelvin sign, whose lower case is "k"
    "word",
    "longwordlonger",
    "Mr.",
    "e.g.",
    "the end. ",
    "ΣΑΣ",
]


def check_c4(text: str) -> None:
    for settings in C4_SETTINGS:
        doc = Doc(text)
        removal = C4(settings).check(doc)
        found = (None if removal is None else (removal.filter, removal.value)), (doc.text if removal is None else None)
        assert found == expected_c4(text, settings), (text, settings)
        if removal is None:  # the code points the kernel leaves for the next steps are those of the text left
            assert doc.code_points().tolist() == code_points(doc.text).tolist(), (text, settings)


# ---- both, on random and real texts ----


@pytest.mark.parametrize("check, pieces", [(check_counts, PIECES), (check_c4, C4_PIECES)], ids=["counts", "c4"])
def test_random_texts_of_the_characters_where_the_two_could_part(check, pieces):
    for text in random_texts(pieces, 3000):
        check(text)


@pytest.mark.parametrize("check", [check_counts, check_c4], ids=["counts", "c4"])
def test_real_texts(check, reuters_docs, license_docs):
    for _, text in reuters_docs[:300] + license_docs[:60]:
        check(text)
