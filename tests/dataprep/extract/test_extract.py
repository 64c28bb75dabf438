"""`ptk extract` on WARC files written by warcio from the Rust book's real pages, and on HTML files:
what is a page, what its text holds and leaves out, charsets, bad input, and the same bytes on any
number of workers. (kill -9, SIGTERM, a full disk and a held folder: tests/faults -k extract.)"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import zstandard

from fixtures.warc import Record, man_prose, request, response, rust_book_pages, write_warc
from pretrainkit.cli import main
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.extract.pipeline import run_extract
from pretrainkit.dataprep.readers import Document, discover_inputs, plan_read_tasks, read_task
from pretrainkit.output_folders import EXTRACT, output_folder

LIBFFI_HTML = Path("/usr/share/doc/libffi8/html")


def extract(inputs: list[Path], out: Path, workers: int = 1) -> dict:
    with output_folder(out, EXTRACT), LocalRunner(workers) as runner:
        return run_extract([str(p) for p in inputs], out, runner)


def records(out: Path) -> list[dict]:
    rows = []
    for part in sorted(out.glob("part-*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes())
        rows += [json.loads(line) for line in data.splitlines()]
    return rows


def rejected(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def book() -> list[tuple[str, bytes]]:
    return rust_book_pages(6)


@pytest.fixture(scope="module")
def crawl(tmp_path_factory, book) -> tuple[Path, list[tuple[str, int]]]:
    """A Common Crawl-like WARC.gz: a request before each response, and responses that are no pages."""
    url, html = book[0]
    records: list[Record] = []
    for u, h in book:
        records += [request(u), response(u, h)]
    records += [
        response(url + "?old", b"", "301 Moved Permanently", ""),
        response(url + "?gone", b"<html><body><p>Not found</p></body></html>", "404 Not Found"),
        response(url + "?busy", b"<html><body><p>Try later</p></body></html>", "503 Service Unavailable"),
        response("https://doc.rust-lang.org/favicon.png", b"\x89PNG\r\n\x1a\n", content_type="image/png"),
        Record("metadata", url, b"fetchTimeMs: 12\r\n"),
    ]
    path = tmp_path_factory.mktemp("crawl") / "crawl.warc.gz"
    return path, write_warc(path, records)


def test_only_2xx_html_responses_are_pages_and_every_record_is_counted(crawl, book, tmp_path):
    path, placed = crawl
    stats = extract([path], tmp_path / "out")
    got = records(tmp_path / "out")
    responses = placed[2 : 2 * len(book) + 1 : 2]  # warcinfo, then request/response pairs
    assert [r["id"] for r in got] == [record_id for record_id, _ in responses]
    assert [r["url"] for r in got] == [u for u, _ in book]
    assert all(r["date"].startswith("20") and r["date"].endswith("Z") for r in got)
    assert stats["skipped"] == {
        "client error (4xx)": 1,
        "metadata record": 1,
        "not HTML": 1,
        "redirect (3xx)": 1,
        "request record": len(book),
        "server error (5xx)": 1,
        "warcinfo record": 1,
    }
    assert stats["records"] == len(placed) == stats["kept"] + sum(stats["skipped"].values())
    assert stats["kept"] == len(book) and rejected(tmp_path / "out") == []
    assert json.loads((tmp_path / "out" / "stats.json").read_text()) == stats


def test_the_text_is_the_chapter_without_the_chrome(crawl, tmp_path):
    extract([crawl[0]], tmp_path / "out")
    text = next(r["text"] for r in records(tmp_path / "out") if r["url"].endswith("ch01-01-installation.html"))
    assert "Installation" in text.splitlines()  # the chapter's heading, a line of its own
    assert "The first step is to install Rust. We’ll download Rust through rustup" in text  # a paragraph
    assert "$ curl --proto '=https' --tlsv1.2" in text  # a code block
    for chrome in ("Coal", "Navy", "Ayu"):  # the theme picker
        assert chrome not in text.split()
    assert "1.1. Installation" not in text and "Foreword" not in text  # the sidebar's chapter list
    assert "path_to_root" not in text and "playground" not in text  # the scripts


def test_the_output_is_an_input_of_the_readers_dedup_and_tokenize_use(crawl, tmp_path):
    extract([crawl[0]], tmp_path / "out")
    docs = [
        item
        for task in plan_read_tasks(discover_inputs([str(tmp_path / "out")]))
        for item in read_task(task)
        if isinstance(item, Document)
    ]
    assert [(d.id, d.text) for d in docs] == [(r["id"], r["text"]) for r in records(tmp_path / "out")]


def test_html_files_are_pages_named_by_their_path(tmp_path):
    assert LIBFFI_HTML.is_dir(), f"{LIBFFI_HTML} is missing (the libffi8 package's docs)"
    stats = extract([LIBFFI_HTML], tmp_path / "out")
    names = sorted(p.name for p in LIBFFI_HTML.glob("*.html"))
    got = records(tmp_path / "out")
    assert [r["id"] for r in got] == names and stats["kept"] == len(names)
    assert all(r["url"] is None and r["date"] is None for r in got)
    structures = next(r["text"] for r in got if r["id"] == "Structures.html")
    assert "ffi_type" in structures and "Next:" not in structures.splitlines()[-1]


def test_charsets_from_the_header_the_meta_tag_or_detection_and_invalid_bytes_counted(tmp_path):
    german = man_prose("/usr/share/man/de/man1/apropos.1.gz")
    japanese = man_prose("/usr/share/man/ja/man1/chage.1.gz")

    def page(lines: list[str], head: str = "") -> str:
        return (
            f"<html><head>{head}<title>t</title></head><body><article><h1>Handbuch</h1>"
            + "".join(f"<p>{line}</p>" for line in lines)
            + "</article></body></html>"
        )

    bad_utf8 = page(german).encode("utf-8").replace("ü".encode(), b"\xfc", 1)  # one latin-1 byte in UTF-8
    path = tmp_path / "charsets.warc"
    write_warc(
        path,
        [
            response("https://a/latin1", page(german).encode("latin-1"), content_type="text/html; charset=ISO-8859-1"),
            response(
                "https://a/sjis",
                page(japanese, '<meta charset="shift_jis">').encode("shift_jis"),
                content_type="text/html",
            ),
            response("https://a/bad", bad_utf8),
        ],
        compress=False,
    )
    (tmp_path / "pages").mkdir()
    (tmp_path / "pages" / "undeclared.html").write_bytes(page(german * 3).encode("latin-1"))
    stats = extract([path, tmp_path / "pages"], tmp_path / "out")
    texts = {r["url"] or r["id"]: r["text"] for r in records(tmp_path / "out")}
    assert all(line in texts["https://a/latin1"] for line in german)
    assert all(line in texts["https://a/sjis"] for line in japanese)
    assert all(line in texts["pages/undeclared.html"] for line in german)
    assert "\ufffd" in texts["https://a/bad"] and german[1] in texts["https://a/bad"]
    assert (stats["invalid_byte_pages"], stats["invalid_byte_sequences"]) == (1, 1)


def test_bad_input_is_a_rejected_row_naming_file_and_offset_and_the_rest_is_kept(crawl, book, tmp_path):
    whole, placed = crawl
    inputs = tmp_path / "in"
    inputs.mkdir()
    last_id, last_offset = placed[2 * len(book)]  # the last page's response
    cut = whole.read_bytes()[: last_offset + 300]  # inside the last page's gzip member
    (inputs / "cut.warc.gz").write_bytes(cut)
    headerless = gzip.compress(b"WARC/1.0\r\n\r\n<html><p>no headers</p></html>\r\n\r\n")
    (inputs / "headerless.warc.gz").write_bytes(headerless + whole.read_bytes())
    (inputs / "empty.warc.gz").write_bytes(b"")
    (inputs / "empty.html").write_bytes(b"")
    (inputs / "scripts-only.html").write_bytes(b"<html><body><script>var x = 1;</script></body></html>")
    stats = extract([inputs], tmp_path / "out")
    rows = {(r["source"], r.get("offset")): r for r in rejected(tmp_path / "out")}
    assert rows[("cut.warc.gz", last_offset)]["reason"] == (
        "record cut short (inside its headers): the file ends inside a gzip member; the rest of the file cannot be read"
    )
    assert rows[("headerless.warc.gz", 0)]["reason"] == "not a WARC record: a record without headers"
    assert rows[("empty.warc.gz", 0)]["reason"] == "empty file: no WARC records"
    assert rows[("empty.html", None)] == {"id": "empty.html", "source": "empty.html", "reason": "empty file"}
    assert rows[("scripts-only.html", None)]["reason"] == "no extractable text"
    assert len(rows) == 5
    ids = [r["id"] for r in records(tmp_path / "out")]
    page_ids = [record_id for record_id, _ in placed[2 : 2 * len(book) + 1 : 2]]
    assert ids == page_ids[:-1] + page_ids  # the cut file's pages before the cut, then the whole crawl's
    assert stats["rejected"] == {
        "empty file": 2,
        "no extractable text": 1,
        "not a WARC record": 1,
        "record cut short": 1,
    }
    assert stats["records"] == stats["kept"] + sum(stats["skipped"].values()) + sum(stats["rejected"].values())
    assert last_id not in ids[: len(book) - 1]


def test_inputs_without_a_page_are_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty.warc").write_bytes(b"")
    assert main(["extract", str(tmp_path / "empty.warc"), "-o", str(tmp_path / "out"), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.splitlines() == [err] and "empty.warc: no page with text in the inputs (1 records: 0 skipped" in err


def test_any_number_of_workers_gives_the_same_bytes(crawl, tmp_path):
    inputs = tmp_path / "in"
    inputs.mkdir()
    for i in range(3):
        (inputs / f"crawl-{i}.warc.gz").write_bytes(crawl[0].read_bytes())
    (inputs / "docs").symlink_to(LIBFFI_HTML)
    one = extract([inputs / "docs", *sorted(inputs.glob("*.warc.gz"))], tmp_path / "one", workers=1)
    two = extract([inputs / "docs", *sorted(inputs.glob("*.warc.gz"))], tmp_path / "two", workers=2)
    assert one == two and snapshot(tmp_path / "one") == snapshot(tmp_path / "two")
    assert len(list((tmp_path / "one").glob("part-*.jsonl.zst"))) == 4  # a job per WARC, one for the small HTML files


def test_payloads_stored_as_sent_are_decoded_and_a_broken_one_is_rejected(book, tmp_path):
    url, html = book[1]
    chunked = b"".join(
        b"%x\r\n%s\r\n" % (len(html[i : i + 5000]), html[i : i + 5000]) for i in range(0, len(html), 5000)
    )
    path = tmp_path / "as-sent.warc.gz"
    placed = write_warc(
        path,
        [
            Record(
                "response",
                url,
                gzip.compress(html),
                "200 OK",
                (("Content-Type", "text/html"), ("Content-Encoding", "gzip")),
            ),
            Record("response", url + "?c", chunked + b"0\r\n\r\n", "200 OK", (("Transfer-Encoding", "chunked"),)),
            Record(
                "response",
                url + "?bad",
                b"not gzip",
                "200 OK",
                (("Content-Type", "text/html"), ("Content-Encoding", "gzip")),
            ),
            Record("revisit", url, b""),
        ],
    )
    stats = extract([path], tmp_path / "out")
    texts = [r["text"] for r in records(tmp_path / "out")]
    plain = extract_plain(html)
    assert texts == [plain, plain]  # the chunked page has no Content-Type: its payload begins like HTML
    [row] = rejected(tmp_path / "out")
    assert (row["id"], row["offset"]) == placed[3] and row["reason"].startswith("payload cannot be decoded: ")
    assert stats["skipped"] == {"revisit record": 1, "warcinfo record": 1}


def extract_plain(html: bytes) -> str:
    from pretrainkit.dataprep.extract.html import main_text

    return main_text(html.decode("utf-8"))


def test_a_big_warc_gz_read_by_several_jobs_gives_what_one_job_gives(crawl, book, tmp_path, monkeypatch):
    from pretrainkit.dataprep.extract import pipeline

    whole, placed = crawl
    data = bytearray(whole.read_bytes())
    corrupt_offset = placed[6][1]  # the third page's response
    data[corrupt_offset + 200] ^= 0xFF
    damaged = tmp_path / "damaged.warc.gz"
    damaged.write_bytes(bytes(data))
    one = extract([whole, damaged], tmp_path / "one")
    monkeypatch.setattr(pipeline, "WARC_JOB_BYTES", 30_000)  # the crawl is ~4 jobs
    many = extract([whole, damaged], tmp_path / "many", workers=2)
    assert len(list((tmp_path / "many").glob("part-*"))) > 2 * len(list((tmp_path / "one").glob("part-*"))) == 4
    assert records(tmp_path / "many") == records(tmp_path / "one") and many == one
    assert rejected(tmp_path / "many") == rejected(tmp_path / "one")
    [row] = rejected(tmp_path / "one")
    assert row["source"].endswith("/damaged.warc.gz") and row["offset"] == corrupt_offset
    assert "corrupt gzip data" in row["reason"]
    assert row["reason"].endswith("; reading goes on at the next gzip member that starts a record, if any")
    assert one["kept"] == 2 * len(book) - 1  # the corrupt member's page alone is lost
