"""Page chrome left out of `ptk extract`'s text (`--extractor nochrome`, the default) by the page's own
markup, on pages written in the layout of five documentation generators (fixtures/doc_pages.py), and
kept by `--extractor resiliparse`; `ptk prepare` takes the same setting. (The figures on the real
sites: bench/chrome.py, docs/extract.md.)"""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from fixtures.doc_pages import DOC_PAGES, FIRST, SECOND, TITLE
from fixtures.stage_parts import kept_records
from pretrainkit.cli import main
from pretrainkit.dataprep.extract import chrome
from pretrainkit.dataprep.extract.html import main_text
from pretrainkit.dataprep.extract.pipeline import ExtractOptions
from pretrainkit.dataprep.prepare.pipeline_file import read_pipeline
from pretrainkit.errors import UserError

PROSE = f"<h2>{TITLE}</h2><p>{FIRST}</p><p>{SECOND}</p>"


def page(body: str) -> str:
    return f"<html><head><title>t</title></head><body>{body}</body></html>"


@pytest.mark.parametrize("generator", sorted(DOC_PAGES))
def test_each_generators_chrome_is_left_out_and_its_content_kept(generator):
    doc = DOC_PAGES[generator]
    text = main_text(doc.html)
    lines = text.splitlines()
    assert [line for line in doc.content if line not in lines] == []
    assert [c for c in doc.chrome if c in text] == []


def test_resiliparse_alone_keeps_the_chrome_of_docbook_mdbook_and_texinfo():
    kept = {g: [c for c in d.chrome if c in main_text(d.html, "resiliparse")] for g, d in DOC_PAGES.items()}
    assert kept == {
        "docbook": ["Prev", "Home", "Chapter 4. Kitchen Appliances", "4.3. Toasters"],
        "sphinx": [],
        "mdbook": ["Keyboard shortcuts", "this help", "The Household Book"],
        "doxygen": [],
        "texinfo": ["Next:", "Previous:", "Kitchen Appliances", "Index"],
    }


def test_a_page_without_chrome_gives_what_resiliparse_gives():
    for html in (
        page(PROSE),
        page(f"<article><header><h1>{TITLE}</h1></header><p>{FIRST}</p><footer><p>{SECOND}</p></footer></article>"),
        page(f"<div id='content'>{PROSE}<ul><li><a href='a'>one</a></li><li>two</li></ul></div>"),
        page(f"<table><tr><td>{FIRST}</td><td><a href='x'>x</a></td></tr></table><p>{SECOND}</p>"),
    ):
        assert main_text(html) == main_text(html, "resiliparse")


def test_only_the_main_content_is_kept_where_the_page_marks_one_that_holds_text():
    aside = "<div id='help'><h2>Keyboard shortcuts</h2><p>Press ? to show this help</p></div>"
    assert main_text(page(f"{aside}<main>{PROSE}</main>")) == main_text(page(PROSE))
    assert main_text(page(f"{aside}<div role='main'>{PROSE}</div>")) == main_text(page(PROSE))
    assert "Press ? to show this help" in main_text(page(f"{aside}<main>{PROSE}</main>"), "resiliparse")
    # an empty <main> (a page its scripts fill) marks nothing: the page's text is kept
    assert main_text(page(f"<main> </main><div>{PROSE}</div>")) == main_text(page(PROSE))


def test_navigation_by_element_role_name_and_links_is_left_out():
    for chrome_html in (
        "<nav><p>Home · Guides · Kettles</p></nav>",
        "<div role='navigation'><p>Home · Guides · Kettles</p></div>",
        "<div role='dialog'><p>We use cookies to improve this site.</p></div>",
        "<ul role='menu'><li>Light</li><li>Dark</li></ul>",
        "<header><p>The Household Manual, second edition</p></header>",
        "<div class='navbar top'><p>Home · Guides · Kettles</p></div>",
        "<div class='page breadcrumbs'><p>Home · Guides · Kettles</p></div>",
        "<p aria-hidden='true'>Press ? to show this help</p>",
        "<p>Next: <a href='t.html' rel='next'>Toasters</a></p>",
        "<p>Next: <a href='t.html'>Toasters</a>, Previous: <a href='p.html'>Pots</a>, "
        "Up: <a href='k.html'>Kitchen</a></p>",
    ):
        assert main_text(page(chrome_html + PROSE)) == main_text(page(PROSE)), chrome_html


def test_a_paragraph_with_links_and_prose_is_kept():
    prose = (
        "<p>Kettles came to the kitchen late: <a href='a'>copper</a> ones first, then <a href='b'>steel</a>, and "
        "the electric <a href='c'>jug</a> only in the last century, when homes had power to spare.</p>"
    )
    assert "the electric jug only in the last century" in main_text(page(prose + PROSE))
    long_list = "<p>" + ", ".join(f"<a href='{i}'>kettle number {i}</a>" for i in range(12)) + "</p>"
    assert "kettle number 11" in main_text(page(long_list + PROSE))  # more than MAX_WORDS: content


def test_many_link_paragraphs_are_left_to_the_selectors():
    """A page of more than MAX_LINK_BLOCKS of them is not looked at one by one (resiliparse's node lists
    take time that grows with the index)."""
    links = "<p><a href='a'>Pots</a>, <a href='b'>Pans</a>, <a href='c'>Kettles</a></p>"
    assert main_text(page(links * chrome.MAX_LINK_BLOCKS + PROSE)) == main_text(page(PROSE))
    many = page(links * (chrome.MAX_LINK_BLOCKS + 1) + PROSE)
    assert main_text(many) == main_text(many, "resiliparse")


def parts_text(out) -> list[str]:
    return [r["text"] for r in kept_records(out)]


def test_the_extractor_option_of_ptk_extract_and_its_record_in_stats(tmp_path, capsys):
    site = tmp_path / "site"
    site.mkdir()
    for name, doc in DOC_PAGES.items():
        (site / f"{name}.html").write_text(doc.html)
    assert main(["extract", str(site), "-o", str(tmp_path / "default")]) == 0
    assert main(["extract", str(site), "-o", str(tmp_path / "old"), "--extractor", "resiliparse"]) == 0
    default = json.loads((tmp_path / "default" / "stats.json").read_text())
    old = json.loads((tmp_path / "old" / "stats.json").read_text())
    assert default["extractor"] == f"nochrome, {old['extractor']}" and old["extractor"].startswith("resiliparse ")
    assert parts_text(tmp_path / "default") == [main_text(DOC_PAGES[n].html) for n in sorted(DOC_PAGES)]
    assert parts_text(tmp_path / "old") == [main_text(DOC_PAGES[n].html, "resiliparse") for n in sorted(DOC_PAGES)]
    # another extractor into the same folder is another plan: the run starts over, with that extractor's text
    assert main(["extract", str(site), "-o", str(tmp_path / "old")]) == 0
    assert parts_text(tmp_path / "old") == parts_text(tmp_path / "default")
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(["extract", str(site), "-o", str(tmp_path / "bad"), "--extractor", "trafilatura"])
    assert exit_.value.code == 2 and "invalid choice: 'trafilatura'" in capsys.readouterr().err


def test_a_pipeline_files_extract_stage_takes_the_extractor(tmp_path):
    path = tmp_path / "pipeline.yaml"
    path.write_text("stages:\n  - extract: {extractor: resiliparse}\n  - dedup\n")
    assert read_pipeline(path)[0].options == ExtractOptions("resiliparse")
    path.write_text("stages: [extract, dedup]\n")
    assert read_pipeline(path)[0].options == ExtractOptions("nochrome")
    path.write_text("stages:\n  - extract: {extractor: trafilatura}\n")
    [stage] = read_pipeline(path)
    with pytest.raises(UserError) as e:
        stage.checked()
    assert str(e.value) == (
        f"{path}: stages[0].extract: extractor: unknown extractor 'trafilatura' (known: nochrome, resiliparse)"
    )


def test_real_mdbook_pages_lose_their_chrome_and_keep_their_first_paragraph():
    """On pages nobody here wrote (the Rust books of the toolchain on this machine, built by mdBook),
    measured as `bench.chrome` measures: the default extractor leaves no chrome line on 95% of the pages
    and keeps the content's first paragraph on 95%; resiliparse alone keeps the chrome."""
    from bench.chrome import RUST_DOCS, SITES, measure, sample

    books = [site for site in SITES if site.name == "mdbook"]
    mdbook = dataclasses.replace(
        *books, pattern=f"{RUST_DOCS}/book/*.html"
    )  # the Rust book's pages only: fewer to read
    pages = sample(mdbook, 60)
    assert len(pages) == 60, f"the test needs the Rust books' HTML at {mdbook.pattern} (rustup's docs component)"
    figures = measure(pages, re.compile(mdbook.known))
    assert figures["nochrome"]["chrome_free"] >= 0.95, figures["nochrome"]["chrome_examples"]
    assert figures["nochrome"]["first_paragraph_kept"] >= 0.95, figures["nochrome"]["first_paragraph_lost_examples"]
    assert figures["resiliparse"]["chrome_free"] < 0.5  # what the measure finds without the chrome rules
