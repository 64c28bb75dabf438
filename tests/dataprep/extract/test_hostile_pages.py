"""Pages built to cost `ptk extract` without bound, or to be misread: a chunk size of -6, a gzip bomb,
deep nesting, a `<meta>` that declares UTF-16. Each is a rejected row (or read as a browser reads it),
counted in stats.json, and the pages beside it are kept."""

from __future__ import annotations

import codecs
import gzip
import json
import time
from pathlib import Path

from fixtures.warc import Record, response, rust_book_pages, write_warc
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.extract import html, pages
from pretrainkit.dataprep.extract.charset import decode_html
from pretrainkit.dataprep.extract.html import MAX_DEPTH, TooDeep, main_text
from pretrainkit.dataprep.extract.pipeline import run_extract
from pretrainkit.output_folders import EXTRACT, output_folder


def extract(inputs: list[Path], out: Path) -> dict:
    with output_folder(out, EXTRACT), LocalRunner(1) as runner:
        return run_extract([str(p) for p in inputs], out, runner)


def rejected(out: Path) -> dict[str, str]:
    rows = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    return {r["id"]: r["reason"] for r in rows}


def nested(depth: int) -> bytes:
    return b"<html><body>" + b"<div>" * depth + b"<p>Deep inside.</p>" + b"</div>" * depth + b"</body></html>"


def test_a_negative_chunk_size_a_gzip_bomb_and_deep_nesting_are_rejected_rows_counted(tmp_path, monkeypatch):
    """-6 read on for ever (2.9 GB in 4 s from a 1 KB record); a 3.4 KB gzip became 512 MB; 100k nested
    <div> took 378 s. The bomb here is just past a cap lowered for the test."""
    monkeypatch.setattr(pages, "MAX_DECODED_BYTES", 1 << 20)
    url, html = rust_book_pages(1)[0]
    gzipped = (("Content-Type", "text/html"), ("Content-Encoding", "gzip"))
    path = tmp_path / "hostile.warc.gz"
    placed = write_warc(
        path,
        [
            Record(
                "response",
                url + "?chunk",
                b"4\r\n<p>a\r\n-6\r\nxx\r\n0\r\n\r\n",
                "200 OK",
                (("Transfer-Encoding", "chunked"),),
            ),
            Record("response", url + "?bomb", gzip.compress(b" " * ((1 << 20) + 1)), "200 OK", gzipped),
            Record("response", url + "?fits", gzip.compress(html + b" " * ((1 << 20) - len(html))), "200 OK", gzipped),
            response(url + "?deep", nested(MAX_DEPTH)),
            response(url + "?shallow", nested(MAX_DEPTH - 10)),
        ],
    )
    began = time.process_time()
    stats = extract([path], tmp_path / "out")
    assert time.process_time() - began < 10
    ids = [record_id for record_id, _ in placed]
    assert rejected(tmp_path / "out") == {
        ids[1]: "payload cannot be decoded: chunk size b'-6' is not a hex number",
        ids[2]: "payload over 1 MiB once decoded (gzip content encoding)",
        ids[4]: "HTML nested too deep (deeper than 512 elements, the most for a page of 1,030 tags)",
    }
    assert stats["kept"] == 2 and stats["rejected"] == {
        "HTML nested too deep": 1,
        "payload cannot be decoded": 1,
        "payload over 1 MiB once decoded": 1,
    }


def test_the_depth_check_passes_every_page_up_to_the_cap_and_costs_little_beyond_it():
    assert main_text(nested(MAX_DEPTH - 3).decode()) == "Deep inside."  # html, body, the divs, p: MAX_DEPTH deep
    began = time.process_time()
    for depth in (MAX_DEPTH - 2, 100_000):
        try:
            main_text(nested(depth).decode())
            raise AssertionError(f"{depth} nested elements passed")
        except TooDeep:
            pass
    assert time.process_time() - began < 2  # 100k nested took 378 s


def test_a_page_may_nest_no_deeper_than_the_work_cap_over_its_tags(monkeypatch):
    """80k paragraphs 505 deep took 4.8 s: the time grows with the elements times their depth."""
    monkeypatch.setattr(html, "MAX_WORK", 100_000)

    def paragraphs(depth: int) -> str:  # 2,000 paragraphs: about 4,000 tags
        return "<html><body>" + "<div>" * depth + "<p>Words.</p>" * 2000 + "</div>" * depth + "</body></html>"

    assert main_text(paragraphs(10)) == "\n\n".join(["Words."] * 2000)
    try:
        main_text(paragraphs(30))
        raise AssertionError("30 deep passed")
    except TooDeep as e:
        assert str(e) == "HTML nested too deep (deeper than 24 elements, the most for a page of 4,064 tags)"


def test_a_meta_utf16_is_read_as_utf8_a_bom_still_wins_and_an_http_utf16_is_taken_as_declared():
    page = '<html><head><meta charset="{}"></head><body><p>Café crème</p></body></html>'
    for label in ("utf-16", "UTF-16LE", "utf-16be"):
        assert decode_html(page.format(label).encode("utf-8"), None) == (page.format(label), 0)
    with_bom = codecs.BOM_UTF16_BE + page.format("utf-16").encode("utf-16-be")
    assert decode_html(with_bom, None) == (page.format("utf-16"), 0)
    declared = page.format("utf-8").encode("utf-16-le")  # WHATWG: the transport layer's encoding is certain
    assert decode_html(declared, "utf-16") == (page.format("utf-8"), 0)
