"""The WARC reader on files warcio wrote, cut at every byte (every third of an uncompressed file): the
records before the cut, whole, and one row at the offset of the record the cut falls in; never a record
dropped without a word."""

from __future__ import annotations

import gzip
import time
from pathlib import Path

import pytest

from fixtures.warc import (
    content_length,
    gzip_members,
    raw_response,
    response,
    rust_book_pages,
    with_content_length,
    write_warc,
)
from pretrainkit.dataprep.extract.warc import Unreadable, WarcRecord, read_warc


@pytest.fixture(scope="module")
def small_pages() -> list[tuple[str, bytes]]:
    """Three real pages' heads (a few hundred bytes each: a cut at every byte stays quick)."""
    return [(url, html[:250]) for url, html in rust_book_pages(3)]


@pytest.mark.parametrize("compress", [True, False], ids=["warc.gz", "warc"])
def test_a_cut_at_any_byte_keeps_the_records_before_it_and_says_where_it_is(small_pages, tmp_path, compress):
    whole = tmp_path / "whole.warc"
    placed = write_warc(whole, [response(url, html) for url, html in small_pages], compress=compress)
    data = whole.read_bytes()
    offsets = [offset for _, offset in placed]
    full = list(read_warc(str(whole)))
    assert [r.offset for r in full] == offsets and all(isinstance(r, WarcRecord) for r in full)
    assert [r.headers["warc-record-id"] for r in full] == [record_id for record_id, _ in placed]
    cut_file = tmp_path / "cut.warc"
    for cut in range(1, len(data), 1 if compress else 3):
        cut_file.write_bytes(data[:cut])
        items = list(read_warc(str(cut_file)))
        kept = [i for i in items if isinstance(i, WarcRecord)]
        assert kept == full[: len(kept)], cut  # whole records, in order
        rows = [i for i in items if isinstance(i, Unreadable)]
        # a cut between two gzip members, or (uncompressed) in the blank lines after a record's block,
        # leaves a valid file: nothing to report
        between = {
            end - blank: i for i, end in enumerate([*offsets[1:], len(data)]) for blank in range(1 if compress else 5)
        }
        if cut in between:
            assert len(kept) == between[cut] + 1 and not rows, cut
            continue
        assert len(rows) == 1 and items[-1] is rows[0], (cut, items)
        assert rows[0].offset in offsets and rows[0].offset <= cut, (cut, rows)
        assert rows[0].reason.endswith("; the rest of the file cannot be read"), rows


def test_a_record_without_headers_is_a_row_and_the_next_gzip_member_is_read(small_pages, tmp_path):
    path = tmp_path / "crawl.warc.gz"
    placed = write_warc(path, [response(url, html) for url, html in small_pages])
    bad = gzip.compress(b"WARC/1.0\r\n\r\n<html>no headers</html>\r\n\r\n")
    path.write_bytes(bad + path.read_bytes())
    items = list(read_warc(str(path)))
    assert items[0] == Unreadable(0, "not a WARC record: a record without headers")
    assert [i.offset for i in items[1:]] == [offset + len(bad) for _, offset in placed]


def test_in_an_uncompressed_file_the_rest_after_a_broken_record_is_said_to_be_lost(tmp_path):
    path = tmp_path / "broken.warc"
    path.write_bytes(b"WARC/1.0\r\nWARC-Type: response\r\nContent-Length: ten\r\n\r\n0123456789\r\n\r\n")
    assert list(read_warc(str(path))) == [
        Unreadable(0, "not a WARC record: no valid Content-Length (got 'ten'); the rest of the file cannot be read")
    ]


def test_an_empty_file_is_one_row(tmp_path: Path):
    (tmp_path / "empty.warc.gz").write_bytes(b"")
    assert list(read_warc(str(tmp_path / "empty.warc.gz"))) == [Unreadable(0, "empty file: no WARC records")]


def test_a_block_too_long_to_hold_is_passed_over_and_the_next_record_read(small_pages, tmp_path, monkeypatch):
    from pretrainkit.dataprep.extract import warc

    path = tmp_path / "crawl.warc.gz"
    placed = write_warc(path, [response(url, html) for url, html in small_pages])
    monkeypatch.setattr(warc, "MAX_BLOCK_BYTES", len(small_pages[0][1]))  # the HTTP headers make each longer
    items = list(read_warc(str(path)))
    assert [(i.offset, i.block) for i in items[1:]] == [(offset, None) for _, offset in placed[1:]]
    assert items[0].block == b"software: pretrainkit tests\r\n"


def test_an_uncompressed_file_named_warc_gz_is_read_whole_by_its_first_part(small_pages, tmp_path):
    path = tmp_path / "plain.warc.gz"
    placed = write_warc(path, [response(url, html) for url, html in small_pages], compress=False)
    size = path.stat().st_size
    parts = [
        list(read_warc(str(path), start, start + 500 if start + 500 < size else None)) for start in range(0, size, 500)
    ]
    assert [r.offset for r in parts[0]] == [offset for _, offset in placed] and not any(parts[1:])


@pytest.mark.parametrize("compress", [True, False], ids=["warc.gz", "warc"])
@pytest.mark.parametrize("lie", ["99999999999999999999", "+100", "-10", "²"])
def test_a_wrong_content_length_is_a_row_and_the_records_after_it_are_read(small_pages, tmp_path, compress, lie):
    """Too long, it swallowed the next record (its headers in the page) or, past the file, every later
    one; too short, it left the reader in the block; '²' (isdigit() but no int) ended the run."""
    path = tmp_path / "crawl.warc"
    placed = write_warc(path, [response(url, html) for url, html in small_pages])
    records = gzip_members(path.read_bytes())
    wrong = lie if lie[0] not in "+-" else str(content_length(records[1]) + int(lie))
    records[1] = with_content_length(records[1], wrong)
    if compress:
        path.write_bytes(b"".join(gzip.compress(r) for r in records))
    else:
        path.write_bytes(b"".join(records))
    offsets = [0]
    for r in records[:-1]:
        offsets.append(offsets[-1] + len(gzip.compress(r) if compress else r))
    items = list(read_warc(str(path)))
    assert [type(i) for i in items] == [WarcRecord, Unreadable, WarcRecord, WarcRecord], items
    assert [i.offset for i in items] == offsets
    assert items[1].reason.startswith(f"{'not a WARC record: no valid' if lie == '²' else 'wrong'} Content-Length")
    assert [i.headers["warc-record-id"] for i in items[2:]] == [record_id for record_id, _ in placed[2:]]
    assert all(b"WARC/" not in i.block for i in items[2:])


def test_a_block_never_runs_into_the_next_records_gzip_member(small_pages, tmp_path):
    path = tmp_path / "crawl.warc.gz"
    write_warc(path, [response(url, html) for url, html in small_pages])
    records = gzip_members(path.read_bytes())
    wrong = content_length(records[2]) + 300  # in the next member
    records[2] = with_content_length(records[2], str(wrong))
    path.write_bytes(b"".join(gzip.compress(r) for r in records))
    items = list(read_warc(str(path)))
    next_offset = sum(len(gzip.compress(r)) for r in records[:3])
    assert items[2].reason == f"wrong Content-Length ({wrong}): its block runs into the record at byte {next_offset}"
    assert [type(i) for i in items] == [WarcRecord, WarcRecord, Unreadable, WarcRecord]


def test_blank_lines_between_records_are_passed_over_a_buffer_at_a_time(small_pages, tmp_path):
    """8 MB of line feeds in one gzip member took 8 s of CPU a line at a time."""
    path = tmp_path / "crawl.warc.gz"
    placed = write_warc(path, [response(url, html) for url, html in small_pages])
    records = gzip_members(path.read_bytes())
    flood = gzip.compress(b"\n" * (8 << 20) + b" \t\r\n" * 1000)
    path.write_bytes(b"".join(gzip.compress(r) + flood for r in records))
    began = time.process_time()
    items = list(read_warc(str(path)))
    assert time.process_time() - began < 1.0
    assert [i.headers["warc-record-id"] for i in items] == [record_id for record_id, _ in placed]


def test_a_line_over_64_kib_between_records_is_a_row_and_the_next_member_is_read(small_pages, tmp_path):
    path = tmp_path / "crawl.warc.gz"
    placed = write_warc(path, [response(url, html) for url, html in small_pages])
    records = gzip_members(path.read_bytes())
    junk = gzip.compress(b"x" * (70 << 10))
    path.write_bytes(b"".join(gzip.compress(r) for r in records[:2]) + junk + gzip.compress(records[2]))
    items = list(read_warc(str(path)))
    assert items[2] == Unreadable(placed[2][1], "not a WARC record: a WARC header line longer than 64 KiB")
    assert [type(i) for i in items] == [WarcRecord, WarcRecord, Unreadable, WarcRecord]


def bytes_read() -> int:
    """What this process has read from files so far (Linux)."""
    return int(next(line for line in Path("/proc/self/io").read_text().splitlines() if line.startswith("rchar:"))[7:])


def test_records_each_claiming_the_rest_of_an_uncompressed_file_cost_a_bounded_read_each(tmp_path):
    """Each lie is found where its block would end, not by reading the block: else the file is read about
    once per record (2,000 records of 430 bytes: 860 MB)."""
    record = with_content_length(raw_response("https://example.com/", b"HTTP/1.1 200 OK\r\n\r\n" + b"x" * 200), "0" * 7)
    head, count = len(record.partition(b"\r\n\r\n")[0]) + 4, 2000
    end = (count - 1) * len(record) + head + 100  # inside the last record's block: no record may end there
    path = tmp_path / "lies.warc"
    path.write_bytes(b"".join(with_content_length(record, f"{end - i * len(record) - head:07}") for i in range(count)))
    before = bytes_read()
    items = list(read_warc(str(path)))
    assert bytes_read() - before < count * (128 << 10)
    assert [i.offset for i in items] == [i * len(record) for i in range(count)]
    assert all(i.reason.startswith("wrong Content-Length") for i in items)
