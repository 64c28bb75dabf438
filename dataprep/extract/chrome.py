"""A page's chrome, found by its own markup: CSS selectors of the elements `ptk extract --extractor
nochrome` leaves out before resiliparse's main-content pass.

    skip = chrome_selectors(tree)   # tree: a parsed page (resiliparse's HTMLTree)

Nothing here knows a site. The rules are what HTML and ARIA say an element is, and the naming and
link conventions documentation generators share (DocBook, Sphinx, mdBook, Doxygen, Texinfo, javadoc...):
- the main content: where a page marks it (`<main>`, `role="main"`) and it holds text, everything
  outside it (not one of its ancestors) is chrome: mdBook's keyboard-help popup and menu-bar title,
  Sphinx's related-links bars and sidebar, which resiliparse's heuristics keep;
- navigation by element or role: `<nav>`, and the landmark and widget roles no prose has (navigation,
  banner, contentinfo, search, menu, menubar, toolbar, dialog, alertdialog): theme pickers, help
  dialogs, cookie boxes; a page-level `<header>` or `<footer>` (one outside `<main>` and `<article>`);
- elements hidden from every reader (`aria-hidden="true"`, `hidden`);
- navigation by name: a class that begins with `nav` (DocBook's `navheader`/`navfooter` tables of
  "Prev Up Home Next", Texinfo's `nav-panel`, Doxygen's `navpath`, Bootstrap's `navbar`; not an id,
  which Sphinx makes from a section's heading), or a class or id that names breadcrumbs;
- navigation by its links: a paragraph, table row or list item holding a link to the next, previous
  or parent page (`rel="next"`, `prev`, `up`) or a link with a keyboard shortcut (`accesskey`), as
  DocBook's and Texinfo's "Next: ..., Previous: ..., Up: ..." lines are; and a paragraph that is
  mostly links: at least `LINKS` of them (its own children), their text at least `LINK_SHARE` of its
  characters, and no more than `MAX_WORDS` words in all, on a page of no more than `MAX_LINK_BLOCKS` paragraphs
  with `LINKS` links (Texinfo's same line at a page's end, which has no `rel`; a short content
  paragraph that only lists links goes too). This one only on a page that marks no main content.
"""

from __future__ import annotations

import re

from resiliparse.parse.html import DOMNode, HTMLTree

MAIN = "main:not([hidden]), [role=main]:not([hidden])"
# every element of the body that is neither a main content element, inside one, nor above one
OUTSIDE_MAIN = f"body :not({MAIN}, :is({MAIN}) *, :has({MAIN}))"
PAGE_PARTS = ":is(main, article, [role=main]) *"  # where a <header> or <footer> is a part of the content
NAVIGATION_LINKS = "a[rel~=next], a[rel~=prev], a[rel~=previous], a[rel~=up], a[accesskey]"
ROLES = ("navigation", "banner", "contentinfo", "search", "menu", "menubar", "toolbar", "dialog", "alertdialog")
CHROME = (
    "nav",
    *(f"[role={role}]" for role in ROLES),
    f"header:not({PAGE_PARTS})",
    f"footer:not({PAGE_PARTS})",
    "[aria-hidden=true]",
    "[hidden]",
    "[class^=nav]",
    "[class*=' nav']",
    "[class*=breadcrumb]",
    "[id*=breadcrumb]",
    f":is(p, tr, li):has({NAVIGATION_LINKS})",
)
MARK = "data-pretrainkit-chrome"  # set on a link block: resiliparse skips what a selector finds
LINKS, LINK_SHARE, MAX_WORDS = 3, 0.5, 30
MAX_LINK_BLOCKS = 40
LINK_BLOCKS = "p:has(> a ~ a ~ a)"  # the candidates, found in C: a paragraph with `LINKS` links of its own
_SPACE = re.compile(r"\s+")


def chrome_selectors(tree: HTMLTree) -> list[str]:
    """The selectors of `tree`'s chrome: `CHROME`, and what is outside its main content where it marks
    one that holds text."""
    main = tree.document.query_selector(MAIN)  # the first: a node list costs more the more it holds
    if main is not None and main.text.strip():
        return [OUTSIDE_MAIN, *CHROME]
    found = tree.document.query_selector_all(LINK_BLOCKS)
    # resiliparse's node lists take time that grows with the index to reach an item: a page of more
    # such paragraphs than this (a list of links, or one built to cost) is left to the selectors
    for block in found if len(found) <= MAX_LINK_BLOCKS else ():
        if _mostly_links(block):
            block[MARK] = ""
    return [*CHROME, f"[{MARK}]"]


def _mostly_links(block: DOMNode) -> bool:
    text = block.text
    if len(text.split()) > MAX_WORDS:
        return False
    links = [child for child in block.children if child.tag == "a"]
    linked = sum(len(_SPACE.sub("", a.text)) for a in links)
    return len(links) >= LINKS and linked >= LINK_SHARE * len(_SPACE.sub("", text))
