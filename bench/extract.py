"""Benchmark: main-content extraction, resiliparse (what `ptk extract` uses) against trafilatura, on the
same real pages, for speed and quality; and `ptk extract`'s default, nochrome (resiliparse after the
page's marked chrome is left out: bench/chrome.py measures that on more sites).

    python -m bench.extract [--per-set 120]

Pages: documentation HTML on this machine whose layout says which part is the content, so that
quality can be told without a human judge:
- mdbook: the Rust books (the book, cargo, reference, nomicon, rust-by-example, ...): content is
  `<main>`; chrome is the chapter sidebar, the theme picker, the keyboard-help popup, the menu bar.
- rustdoc: the std/core/alloc API pages: content is `#main-content`; chrome is the sidebar and
  the search toolbar.
- npm: npm's command docs: content is `#_content`; chrome is the logo bar, banner and edit footer.
Every page is decoded once, and both libraries get the same string.

Quality, per library and page set:
- kept: the characters of the content's blocks (paragraphs, headings, list items, table cells,
  code blocks) found in the extracted text (whitespace collapsed), over all of them;
- code kept: the same for `<pre>` code blocks alone;
- leaked: the characters of extracted lines that are text of the chrome and nowhere in the
  content, over all extracted characters; and the share of pages with any such line.
Speed: pages per second, parsing included, one process. Prints the ratio (resiliparse over
trafilatura) and writes bench/results/extract.json.

Also the WARC reader: every page above as a response record of one WARC.gz (warcio writes it, a gzip
member per record), read whole (each record's block in memory) by `ptk extract`'s reader
(`pretrainkit.dataprep.extract.warc`) against fastwarc and warcio, in MB/s of the file.

trafilatura runs as FineWeb ran it (datatrove's extractor: favor_precision, no comments,
deduplicate); resiliparse and nochrome as `ptk extract --extractor NAME` runs them
(`pretrainkit.dataprep.extract.html`).
"""

from __future__ import annotations

import argparse
import glob
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import lxml.html
import trafilatura
from fastwarc.warc import ArchiveIterator as FastwarcIterator
from warcio.archiveiterator import ArchiveIterator as WarcioIterator

from bench.results import write_result
from fixtures.warc import response, write_warc
from pretrainkit.dataprep.extract.charset import decode_html
from pretrainkit.dataprep.extract.html import main_text
from pretrainkit.dataprep.extract.warc import WarcRecord, read_warc

BLOCKS = ("p", "h1", "h2", "h3", "h4", "h5", "h6", "li", "dt", "dd", "td", "th", "pre")
LEAVES = ("a", "button", "li", "span", "p", "h1", "h2", "h3", "h4", "h5", "h6", "kbd", "label", "div")
RUST_DOCS = "/root/.rustup/toolchains/*/share/doc/rust/html"
NPM_DOCS = "/usr/lib/node_modules/npm/docs/output"


@dataclass(frozen=True)
class PageSet:
    name: str
    pattern: str  # a glob of the pages
    marker: str  # what a page of this layout holds
    content: str  # XPath of the content element
    chrome: tuple[str, ...]  # XPaths of the chrome elements


PAGE_SETS = (
    PageSet(
        "mdbook",
        f"{RUST_DOCS}/*/**/*.html",
        'id="mdbook-content"',
        "//div[@id='mdbook-content']//main",
        (
            "//nav[@id='mdbook-sidebar']",
            "//ul[@id='mdbook-theme-list']",
            "//div[@id='mdbook-help-container']",
            "//div[@id='mdbook-menu-bar']",
        ),
    ),
    PageSet(
        "rustdoc",
        f"{RUST_DOCS}/std/**/*.html",
        'id="main-content"',
        "//section[@id='main-content']",
        ("//nav[contains(@class, 'sidebar')]", "//rustdoc-topbar", "//rustdoc-search", "//rustdoc-toolbar"),
    ),
    PageSet(
        "npm",
        f"{NPM_DOCS}/**/*.html",
        'id="_content"',
        "//div[@id='_content']",
        ("//div[@id='logobar']", "//div[@id='banner']", "//footer[@id='edit']"),
    ),
)


def collapse(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


@dataclass
class Page:
    path: str
    html: str
    blocks: list[tuple[str, bool]]  # content block texts, collapsed, each with whether it is code
    content: str  # all the content's text, collapsed
    chrome: set[str]  # chrome leaf texts, collapsed, that are nowhere in the content


def load_page(path: str, pages: PageSet) -> Page | None:
    html, _ = decode_html(Path(path).read_bytes(), None)
    tree = lxml.html.fromstring(html)
    found = tree.xpath(pages.content)
    if not found:
        return None
    main = found[0]
    blocks = []
    for el in main.iter(*BLOCKS):
        if el.tag != "pre" and any(d.tag in BLOCKS for d in el.iterdescendants()):
            continue  # its leaf blocks are counted instead
        if text := collapse(el.text_content()):
            blocks.append((text, el.tag == "pre" or any(a.tag == "pre" for a in el.iterancestors())))
    content = collapse(main.text_content())
    chrome = {
        text
        for xpath in pages.chrome
        for region in tree.xpath(xpath)
        for el in region.iter(*LEAVES)
        if (text := collapse(el.text_content())) and text not in content
    }
    return Page(path, html, blocks, content, chrome) if blocks else None


def spread(pattern: str, marker: str, n: int) -> list[str]:
    """Up to `n` of the files `pattern` finds that hold `marker`, spread evenly over their sorted list
    (the same files every run)."""
    paths = sorted(p for p in glob.glob(pattern, recursive=True) if marker in Path(p).read_text("utf-8", "replace"))
    return paths[:: max(1, len(paths) // n)][:n]


def sample(pages: PageSet, per_set: int) -> list[Page]:
    """Up to `per_set` pages of the set (`spread`) whose layout holds content."""
    chosen = [load_page(p, pages) for p in spread(pages.pattern, pages.marker, per_set)]
    return [p for p in chosen if p is not None]


def trafilatura_text(html: str) -> str:
    return trafilatura.extract(html, favor_precision=True, include_comments=False, deduplicate=True) or ""


EXTRACTORS = {
    "resiliparse": partial(main_text, extractor="resiliparse"),
    "nochrome": partial(main_text, extractor="nochrome"),
    "trafilatura": trafilatura_text,
}


def quality(page: Page, text: str) -> dict:
    flat = collapse(text)
    kept = sum(len(b) for b, _ in page.blocks if b in flat)
    code = [b for b, is_code in page.blocks if is_code]
    leaked = [line for line in (collapse(x) for x in text.splitlines()) if line in page.chrome]
    return {
        "content_chars": sum(len(b) for b, _ in page.blocks),
        "kept_chars": kept,
        "code_chars": sum(map(len, code)),
        "code_kept_chars": sum(len(b) for b in code if b in flat),
        "leaked_chars": sum(map(len, leaked)),
        "text_chars": len(flat),
        "leaked_lines": leaked,
    }


def measure(pages: list[Page], extract) -> dict:
    began = time.perf_counter()
    texts = [extract(p.html) for p in pages]
    seconds = time.perf_counter() - began
    q = [quality(p, t) for p, t in zip(pages, texts)]

    def share(part: str, whole: str) -> float:
        return round(sum(x[part] for x in q) / max(1, sum(x[whole] for x in q)), 4)

    leaky = [x for x in q if x["leaked_lines"]]
    examples = sorted({line for x in leaky for line in x["leaked_lines"]}, key=len, reverse=True)[:5]
    return {
        "pages": len(pages),
        "seconds": round(seconds, 3),
        "pages_per_s": round(len(pages) / seconds, 1),
        "kept": share("kept_chars", "content_chars"),
        "code_kept": share("code_kept_chars", "code_chars"),
        "leaked": share("leaked_chars", "text_chars"),
        "pages_with_chrome": round(len(leaky) / max(1, len(pages)), 4),
        "empty_pages": sum(1 for x in q if x["text_chars"] == 0),
        "leaked_examples": examples,
    }


def ours(path: str) -> int:
    return sum(len(r.block) for r in read_warc(path) if isinstance(r, WarcRecord))


def fastwarc(path: str) -> int:
    with open(path, "rb") as fh:
        return sum(len(r.reader.read()) for r in FastwarcIterator(fh, parse_http=False))


def warcio(path: str) -> int:
    with open(path, "rb") as fh:
        return sum(len(r.raw_stream.read()) for r in WarcioIterator(fh, no_record_parse=True))


def measure_readers(pages: list[Page], repeat: int = 3) -> dict:
    """MB/s of a WARC.gz of `pages`, best of `repeat` runs of each reader, in turn."""
    with tempfile.TemporaryDirectory(prefix="ptk-bench-extract-") as tmp:
        path = Path(tmp) / "pages.warc.gz"
        write_warc(path, [response(f"https://docs/{i}", p.html.encode()) for i, p in enumerate(pages)])
        mb = path.stat().st_size / 1e6
        best = {}
        blocks = set()
        for _ in range(repeat):
            for name, read in (("ours", ours), ("fastwarc", fastwarc), ("warcio", warcio)):
                began = time.perf_counter()
                blocks.add(read(str(path)))
                best[name] = min(best.get(name, float("inf")), time.perf_counter() - began)
        assert len(blocks) == 1, f"the readers disagree on the blocks' bytes: {blocks}"
    return {"file_mb": round(mb, 2), "records": len(pages) + 1} | {
        f"{name}_mb_per_s": round(mb / seconds, 1) for name, seconds in best.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-set", type=int, default=120, help="pages per page set (default %(default)s)")
    args = ap.parse_args()
    result: dict = {"sets": {}}
    every: list[Page] = []
    for pages in PAGE_SETS:
        chosen = sample(pages, args.per_set)
        if not chosen:
            sys.exit(f"bench/extract.py: no {pages.name} pages at {pages.pattern}")
        every += chosen
        result["sets"][pages.name] = {name: measure(chosen, fn) for name, fn in EXTRACTORS.items()}
    print(
        f"{'set':<8} {'library':<12} {'pages':>5} {'pages/s':>8} {'kept':>6} {'code':>6} {'leaked':>7} {'w/chrome':>8}"
    )
    for set_name, by_lib in result["sets"].items():
        for lib, m in by_lib.items():
            print(
                f"{set_name:<8} {lib:<12} {m['pages']:>5} {m['pages_per_s']:>8.1f} {m['kept']:>6.1%} "
                f"{m['code_kept']:>6.1%} {m['leaked']:>7.2%} {m['pages_with_chrome']:>8.1%}"
            )
    pages = sum(by_lib["resiliparse"]["pages"] for by_lib in result["sets"].values())
    seconds = {lib: sum(by_lib[lib]["seconds"] for by_lib in result["sets"].values()) for lib in EXTRACTORS}
    result["speed_ratio"] = round(seconds["trafilatura"] / seconds["resiliparse"], 2)
    print(
        f"all {pages} pages: resiliparse {pages / seconds['resiliparse']:.1f} pages/s, trafilatura "
        f"{pages / seconds['trafilatura']:.1f} pages/s: resiliparse {result['speed_ratio']:.1f}x faster; "
        f"nochrome {pages / seconds['nochrome']:.1f} pages/s"
    )
    result["warc_reader"] = r = measure_readers(every)
    print(
        f"WARC.gz of {r['records']} records, {r['file_mb']} MB: ptk extract's reader {r['ours_mb_per_s']} MB/s, "
        f"fastwarc {r['fastwarc_mb_per_s']} MB/s, warcio {r['warcio_mb_per_s']} MB/s: "
        f"{r['ours_mb_per_s'] / r['fastwarc_mb_per_s']:.2f}x fastwarc"
    )
    write_result("extract", result)


if __name__ == "__main__":
    main()
