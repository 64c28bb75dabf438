"""The main content of an HTML page as plain text (resiliparse; bench/extract.py says why this one).

    text = main_text(html)   # "" when the page has none

Resiliparse's `extract_plain_text` with `main_content=True` drops what its heuristics call page
chrome (navigation, menus, headers and footers, cookie and share boxes, forms, scripts and styles)
and keeps headings, paragraphs, lists (with their bullets), tables and code blocks with their line
breaks. Alt texts and link targets are left out: they are not the page's prose.
"""

from __future__ import annotations

from resiliparse.extract.html2text import extract_plain_text
from resiliparse.parse.html import HTMLTree


def main_text(html: str) -> str:
    tree = HTMLTree.parse(html)
    return extract_plain_text(tree, main_content=True, alt_texts=False, links=False, form_fields=False).strip()
