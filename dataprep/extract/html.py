"""The main content of an HTML page as plain text (resiliparse; bench/extract.py says why this one).

    text = main_text(html)                  # "" when the page has none
    text = main_text(html, "resiliparse")   # resiliparse's pass alone, the page's marked chrome kept

Resiliparse's `extract_plain_text` with `main_content=True` drops what its heuristics call page
chrome (navigation, menus, headers and footers, cookie and share boxes, forms, scripts and styles)
and keeps headings, paragraphs, lists (with their bullets), tables and code blocks with their line
breaks. Alt texts and link targets are left out: they are not the page's prose. Its heuristics
keep much of a documentation page's chrome (DocBook's "Prev Up Home Next" tables, mdBook's
keyboard-help popup, Texinfo's "Next: ..., Up: ..." lines), so the `nochrome` extractor (the
default) first leaves out what the page's own markup says is chrome (`chrome.py`) and `resiliparse`
runs the pass alone (docs/extract.md#page-chrome measures both).

Its main-content pass takes time that grows with the page's elements times their depth (100k nested
`<div>` took 378 s of CPU, 20k took 12.5 s; 80k paragraphs 505 deep, 4.8 s; parsing any of them,
milliseconds). So a page may nest its elements no deeper than `MAX_DEPTH`, and no deeper than
`MAX_WORK` over its number of tags: one that does is `TooDeep`, found after parsing by a CSS selector
of that many child steps (lexbor's C code: at most `MAX_WORK` steps, a few milliseconds), and no page
takes the extractor much more than `MAX_WORK` element-levels (about a second of CPU) either. That
also bounds how long a SIGTERM waits for the page under way in a run's own process (`--workers 1`):
no Python signal handler runs inside resiliparse's C code.
"""

from __future__ import annotations

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

from pretrainkit.dataprep.extract.chrome import chrome_selectors

MAX_WORK = 10_000_000  # tags times depth: ~1.2 s of the main-content pass (1 MiB of 30,000 tags may nest 333 deep)
MAX_DEPTH = 512  # Chromium's HTML parser nests no deeper (kMaximumHTMLParserDOMTreeDepth): deeper is no real page
# `--extractor`: resiliparse's main-content pass alone, or after leaving out the page's chrome (chrome.py)
EXTRACTORS = ("nochrome", "resiliparse")
DEFAULT_EXTRACTOR = "nochrome"


class TooDeep(Exception):
    """An element nested deeper than `depth_limit` allows (the message says how deep that is)."""


def depth_limit(tags: int) -> int:
    """How deep a page of `tags` tags may nest its elements."""
    return min(MAX_DEPTH, MAX_WORK // max(tags, 1))


def main_text(html: str, extractor: str = DEFAULT_EXTRACTOR) -> str:
    tree = HTMLTree.parse(html)
    tags = html.count("<")  # at least as many as elements: the implied html, head and body aside
    limit = depth_limit(tags)
    # an element with `limit` elements above it (no page of fewer tags has one)
    if tags > limit and tree.document.query_selector(">".join(["*"] * (limit + 1))) is not None:
        raise TooDeep(f"HTML nested too deep (deeper than {limit} elements, the most for a page of {tags:,} tags)")
    skip = chrome_selectors(tree) if extractor == "nochrome" else None
    return extract_plain_text(
        tree, main_content=True, alt_texts=False, links=False, form_fields=False, skip_elements=skip
    ).strip()
