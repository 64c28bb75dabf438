"""The main content of an HTML page as plain text (resiliparse; bench/extract.py says why this one).

    text = main_text(html)   # "" when the page has none

Resiliparse's `extract_plain_text` with `main_content=True` drops what its heuristics call page
chrome (navigation, menus, headers and footers, cookie and share boxes, forms, scripts and styles)
and keeps headings, paragraphs, lists (with their bullets), tables and code blocks with their line
breaks. Alt texts and link targets are left out: they are not the page's prose.

Its main-content pass takes time that grows with each element's depth (100k nested `<div>` took 378 s
of CPU, 20k took 12.5 s; parsing them, milliseconds): a page with an element nested deeper than
`MAX_DEPTH` is `TooDeep`, found by a CSS selector of `MAX_DEPTH` child steps from it (lexbor's C code; a
page with fewer tags is not searched), so a page costs at most about its size times `MAX_DEPTH`.
"""

from __future__ import annotations

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree

MAX_DEPTH = 512  # Chromium's HTML parser nests no deeper (kMaximumHTMLParserDOMTreeDepth): deeper is no real page


class TooDeep(Exception):
    """An element nested deeper than MAX_DEPTH (the message says so)."""


def main_text(html: str) -> str:
    tree = HTMLTree.parse(html)
    # an element with MAX_DEPTH elements above it (no page of fewer tags has one)
    if html.count("<") > MAX_DEPTH and tree.document.query_selector(">".join(["*"] * (MAX_DEPTH + 1))) is not None:
        raise TooDeep(f"HTML nested deeper than {MAX_DEPTH} elements")
    return extract_plain_text(tree, main_content=True, alt_texts=False, links=False, form_fields=False).strip()
