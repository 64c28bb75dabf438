"""Benchmark: page chrome in `ptk extract`'s text, per extractor, on real documentation sites built by
different generators: the share of pages free of chrome, the share whose content's first paragraph is
kept, and the speed, every extractor on the same pages in the same run.

    python -m bench.chrome [--per-site 400]

Sites (Debian packages and the Rust toolchain's docs on this machine; a site that is missing is left
out with a note, and the run fails when fewer than three are there):
- docbook: PostgreSQL 15's manual (`postgresql-doc-15`, DocBook XSL). Content: the body's `div` that
  is no navigation; chrome: `div.navheader` and `div.navfooter` (the "Prev Up Home Next" tables, the
  chapter line).
- sphinx: Python 3.11's docs (`python3.11-doc`, Sphinx with python-docs-theme). Content:
  `div[role=main]`; chrome: the related-links bars (breadcrumbs, "index modules next previous"), the
  sidebar, the mobile menu with its search box and theme picker, the footer.
- mdbook: the Rust books (the book, the reference, rust-by-example, the nomicon, cargo, ...). Content:
  `main`; chrome: the chapter sidebar, the menu bar with the theme picker, the keyboard-help popup.
- doxygen: Doxygen's manual (`doxygen-doc`, built by Doxygen). Content: `div.header` and
  `div.contents`; chrome: `#top` (project title, tabs, search box), the side tree, the footer.
- texinfo: libffi's manual (`libffi8`, makeinfo). Content: the body without its navigation;
  chrome: `div.header` / `div.nav-panel` ("Next: ..., Previous: ..., Up: ... [Index]").

Mechanically, for each page and extractor:
- chrome line: a line of the extracted text (its leading list bullet aside) that holds a letter or
  digit, is not in the content element's text (whitespace removed from both; the chrome elements
  inside it removed), and either is in the text of one of the page's chrome elements (their text
  nodes joined, whitespace removed) or matches the generator's known chrome lines (`Site.known`: a
  line the extractor mangled, such as Texinfo's "Next: , Previous: , Up: Types [Index]" without its
  link texts). Text found in the content counts as content: a title the navigation repeats is not
  chrome.
- chrome-free: a page whose text has no chrome line.
- first paragraph kept: the letters and digits of the content's first `<p>` that has any (and is not
  inside a `<nav>`: a page's own table of contents), in order, are in those of the extracted text.
  Pages whose content has no such `<p>` are counted apart and left out of that share.
Speed: pages per second, one process, parsing included, the extractors taking turns page by page.
Prints a table and writes bench/results/chrome.json.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import lxml.html

from bench.extract import spread
from bench.results import write_result
from pretrainkit.dataprep.extract.charset import decode_html
from pretrainkit.dataprep.extract.html import EXTRACTORS, main_text

RUST_DOCS = "/root/.rustup/toolchains/*/share/doc/rust/html"
ALNUM = re.compile(r"\w")
WORD = re.compile(r"\w+")
BULLET = re.compile(r"^\s*•\s*")
UTF8 = lxml.html.HTMLParser(encoding="utf-8")


@dataclass(frozen=True)
class Site:
    name: str
    generator: str
    pattern: str  # a glob of the pages
    marker: str  # what a page of this layout holds
    content: str  # XPath of the content elements
    chrome: tuple[str, ...]  # XPaths of the chrome elements
    known: str  # a regex of lines the generator's chrome writes (matched against each stripped line)


SITES = (
    Site(
        "docbook",
        "DocBook XSL (PostgreSQL 15 manual)",
        "/usr/share/doc/postgresql-doc-15/html/*.html",
        'summary="Navigation header"',
        "/html/body/div[not(contains(@class, 'nav'))]",
        ("//div[@class='navheader']", "//div[@class='navfooter']"),
        r"Prev\s+(Up|Home|Next)\b|.*\t\s*Home\s*\t",  # the tables' rows, their cells joined by tabs
    ),
    Site(
        "sphinx",
        "Sphinx (Python 3.11 docs)",
        "/usr/share/doc/python3.11/html/**/*.html",
        'role="main"',
        "//div[@role='main']",
        (
            "//div[@class='related']",
            "//div[contains(@class, 'sphinxsidebar')]",
            "//div[@class='footer']",
            "//div[@class='mobile-nav']",
            "//div[@class='inline-search']",
            "//div[@role='note' and @aria-label='source link']",
        ),
        r"(Navigation|Table of Contents|Previous topic|Next topic|This Page|Theme|Quick search|index|modules)$",
    ),
    Site(
        "mdbook",
        "mdBook (the Rust books)",
        f"{RUST_DOCS}/*/**/*.html",
        'id="mdbook-content"',
        "//div[@id='mdbook-content']//main",
        (
            "//nav[@id='mdbook-sidebar']",
            "//div[@id='mdbook-menu-bar']",
            "//div[@id='mdbook-help-container']",
        ),
        r"Keyboard shortcuts$|Press .* (help|in the book|between chapters)$",
    ),
    Site(
        "doxygen",
        "Doxygen (Doxygen manual)",
        "/usr/share/doc/doxygen/html/*.html",
        "Generated by Doxygen",
        "//div[@id='doc-content']/div[div[@class='header'] or div[@class='contents']]",
        ("//div[@id='top']", "//div[@id='side-nav']", "//div[@id='nav-path']", "//address[@class='footer']"),
        r"Generated (on|by) ",
    ),
    Site(
        "texinfo",
        "Texinfo makeinfo (libffi manual)",
        "/usr/share/doc/libffi8/html/*.html",
        'content="makeinfo',
        "/html/body",
        ("//div[@class='header']", "//div[contains(@class, 'nav-panel')]"),
        r"(Next|Previous|Up): ",
    ),
)


def squeezed(text: str) -> str:
    return re.sub(r"\s+", "", text)


def words(el) -> str:
    """An element's letters and digits, in order (punctuation an extractor may drop, such as DocBook's
    curly quotes, aside)."""
    return "".join(WORD.findall(" ".join(el.itertext())))


def joined(el) -> str:
    """An element's text nodes, whitespace removed (a table's cells do not run into each other)."""
    return squeezed(" ".join(el.itertext()))


@dataclass
class Page:
    path: str
    html: str
    content: str  # the content's text, whitespace removed
    chrome: list[str]  # each chrome element's text, whitespace removed
    first_paragraph: str | None  # its letters and digits


def load_page(path: str, site: Site) -> Page | None:
    html, _ = decode_html(Path(path).read_bytes(), None)
    tree = lxml.html.fromstring(html.encode(), parser=UTF8)  # bytes: a page may begin with an XML declaration
    chrome_elements = [el for xpath in site.chrome for el in tree.xpath(xpath)]
    chrome = [joined(el) for el in chrome_elements]
    for el in chrome_elements:  # what is left of the content is the content
        el.drop_tree()
    content = tree.xpath(site.content)
    if not content:
        return None
    paragraphs = (
        words(p) for el in content for p in el.iter("p") if not any(a.tag == "nav" for a in p.iterancestors())
    )
    first = next((p for p in paragraphs if p), None)
    return Page(path, html, "".join(joined(el) for el in content), chrome, first)


def sample(site: Site, per_site: int) -> list[Page]:
    """Up to `per_site` pages of the site (`spread`) that have a content element."""
    chosen = [load_page(p, site) for p in spread(site.pattern, site.marker, per_site)]
    return [p for p in chosen if p is not None]


def chrome_lines(page: Page, known: re.Pattern, text: str) -> list[str]:
    found = []
    for line in text.splitlines():
        bare = squeezed(BULLET.sub("", line))
        if not ALNUM.search(bare) or bare in page.content:
            continue
        if any(bare in region for region in page.chrome) or known.match(line.strip()):
            found.append(line.strip())
    return found


def measure(pages: list[Page], known: re.Pattern) -> dict:
    seconds = dict.fromkeys(EXTRACTORS, 0.0)
    texts: dict[str, list[str]] = {name: [] for name in EXTRACTORS}
    for page in pages:
        for name in EXTRACTORS:
            began = time.perf_counter()
            texts[name].append(main_text(page.html, name))
            seconds[name] += time.perf_counter() - began
    with_paragraph = [i for i, p in enumerate(pages) if p.first_paragraph]
    out = {}
    for name in EXTRACTORS:
        leaks = [chrome_lines(p, known, t) for p, t in zip(pages, texts[name])]
        kept = [i for i in with_paragraph if pages[i].first_paragraph in "".join(WORD.findall(texts[name][i]))]
        chromed = [i for i, lines in enumerate(leaks) if lines]
        out[name] = {
            "pages": len(pages),
            "chrome_free": round(1 - len(chromed) / len(pages), 4),
            "pages_with_chrome": len(chromed),
            "pages_with_a_paragraph": len(with_paragraph),
            "first_paragraph_kept": round(len(kept) / max(1, len(with_paragraph)), 4),
            "first_paragraph_lost": len(with_paragraph) - len(kept),
            "empty_pages": sum(1 for t in texts[name] if not t),
            "seconds": round(seconds[name], 3),
            "pages_per_s": round(len(pages) / seconds[name], 1),
            "chrome_examples": sorted({line for lines in leaks for line in lines}, key=len, reverse=True)[:8],
            "pages_with_chrome_examples": [pages[i].path for i in chromed[:5]],
            "first_paragraph_lost_examples": [pages[i].path for i in with_paragraph if i not in kept][:5],
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-site", type=int, default=400, help="pages per site (default %(default)s)")
    args = ap.parse_args()
    result: dict = {"sites": {}}
    for site in SITES:
        pages = sample(site, args.per_site)
        if not pages:
            print(f"bench/chrome.py: note: no {site.name} pages at {site.pattern}: left out", file=sys.stderr)
            continue
        result["sites"][site.name] = {"generator": site.generator} | measure(pages, re.compile(site.known))
    if len(result["sites"]) < 3:
        sys.exit(f"bench/chrome.py: only {len(result['sites'])} sites found; install the packages the docstring names")
    print(f"{'site':<8} {'extractor':<12} {'pages':>5} {'chrome-free':>11} {'1st para kept':>13} {'pages/s':>8}")
    for name, site in result["sites"].items():
        for extractor in EXTRACTORS:
            m = site[extractor]
            print(
                f"{name:<8} {extractor:<12} {m['pages']:>5} {m['chrome_free']:>11.1%} "
                f"{m['first_paragraph_kept']:>13.1%} {m['pages_per_s']:>8.1f}"
            )
    total = {e: sum(s[e]["pages"] for s in result["sites"].values()) for e in EXTRACTORS}
    seconds = {e: sum(s[e]["seconds"] for s in result["sites"].values()) for e in EXTRACTORS}
    result["pages_per_s"] = {e: round(total[e] / seconds[e], 1) for e in EXTRACTORS}
    print("all pages: " + ", ".join(f"{e} {v:.1f} pages/s" for e, v in result["pages_per_s"].items()))
    write_result("chrome", result)


if __name__ == "__main__":
    main()
