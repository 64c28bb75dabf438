"""Readers: every format, ids, and every kind of bad record ends as a rejected row, never dropped."""

from __future__ import annotations

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.readers import Document, Rejected, discover_inputs, plan_read_tasks, read_task
from pretrainkit.errors import UserError


def read_all(paths, **kw):
    items = []
    for task in plan_read_tasks(discover_inputs([str(p) for p in paths]), **kw):
        items += list(read_task(task))
    return items


def test_formats_and_ids(tmp_path):
    rows = [{"id": "a", "text": "alpha"}, {"text": "beta"}, {"id": 7, "text": "gamma"}]
    lines = "".join(json.dumps(r) + "\n" for r in rows).encode()
    d = tmp_path / "in"
    (d / "sub").mkdir(parents=True)
    (d / "x.jsonl").write_bytes(lines)
    (d / "sub" / "y.jsonl.gz").write_bytes(gzip.compress(lines))
    (d / "z.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    pq.write_table(pa.table({"text": ["p0", "p1"], "meta": [1, 2]}), d / "w.parquet")
    (d / "v.txt").write_text("a whole file\nis one document\n")
    (d / "ignored.csv").write_text("not an input")
    items = read_all([d])
    assert all(isinstance(i, Document) for i in items)
    ids = [i.id for i in items]
    # sorted discovery: sub/y.jsonl.gz, v.txt, w.parquet, x.jsonl, z.jsonl.zst
    assert ids == [
        "a",
        "sub/y.jsonl.gz:2",
        "7",
        "v.txt:1",
        "w.parquet:1",
        "w.parquet:2",
        "a",
        "x.jsonl:2",
        "7",
        "a",
        "z.jsonl.zst:2",
        "7",
    ]
    assert items[3].text == "a whole file\nis one document\n"
    # a record that had its id is passed through byte for byte; one without gets the id added
    assert items[0].record == json.dumps(rows[0]).encode()
    assert json.loads(items[1].record) == {"id": "sub/y.jsonl.gz:2", "text": "beta"}
    assert json.loads(items[4].record) == {"id": "w.parquet:1", "text": "p0", "meta": 1}


def test_bad_records_are_rejected_with_reasons(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(
        b'{"text": "fine"}\n'
        b"{not json\n"
        b'{"text": "\xff\xfe broken utf8"}\n'
        b'{"title": "no text"}\n'
        b'{"text": 42}\n'
        b'{"text": "   "}\n'
        b"[1, 2]\n"
        b"\n"
        b'{"text": "also fine", "id": {"nested": 1}}\n'
        b'{"text": "a lone \\ud800 surrogate"}\n'
        b'{"text": "lone surrogate id", "id": "x\\udfff"}\n'
        b'{"text": "a pair \\ud83d\\ude00 is fine", "meta": "\\udfff", "id": null}\n'
        + b'{"text": "deep", "meta": '
        + b"[" * 100_000
        + b"]" * 100_000
        + b"}\n"
    )
    items = read_all([p])
    assert [type(i).__name__ for i in items] == ["Document"] + ["Rejected"] * 10 + ["Document", "Rejected"]
    reasons = [i.reason for i in items if type(i) is Rejected]
    assert reasons[0].startswith("malformed JSON")
    assert reasons[1].startswith("invalid UTF-8")
    assert reasons[2] == "missing text field 'text' (fields: title)"
    assert "not a string" in reasons[3]
    assert reasons[4] == "empty text"
    assert "not an object" in reasons[5]
    assert reasons[6] == "blank line"
    assert "id field" in reasons[7]
    assert reasons[8] == "invalid Unicode: field 'text' holds the lone surrogate \\ud800"
    assert reasons[9] == "invalid Unicode: field 'id' holds the lone surrogate \\udfff"
    assert (
        items[-2].text == "a pair \U0001f600 is fine"
    )  # a pair is one character; another field's lone one is kept, escaped
    assert json.loads(items[-2].record) == {"id": "bad.jsonl:12", "text": "a pair \U0001f600 is fine", "meta": "\udfff"}
    assert reasons[10] == "malformed JSON: arrays or objects nested too deep to read"
    assert [i.line for i in items] == list(range(1, 14))


@pytest.mark.parametrize("suffix", [".jsonl.gz", ".jsonl.zst"])
def test_truncated_compressed_file_keeps_good_records_and_rejects_the_rest(tmp_path, suffix):
    lines = "".join(json.dumps({"text": f"document number {i} " * 20}) + "\n" for i in range(2000)).encode()
    data = gzip.compress(lines) if suffix.endswith("gz") else zstandard.ZstdCompressor().compress(lines)
    p = tmp_path / f"cut{suffix}"
    p.write_bytes(data[: len(data) // 2])
    items = read_all([p])
    docs = [i for i in items if isinstance(i, Document)]
    rejected = [i for i in items if isinstance(i, Rejected)]
    assert 0 < len(docs) < 2000
    assert rejected and "truncated or corrupt" in rejected[-1].reason
    assert rejected[-1].line == len(items)  # numbered right after the last line read


@pytest.mark.parametrize("workers", [None, 1, 2])  # lines counted here, or by a runner's jobs
def test_large_jsonl_is_split_on_line_boundaries_with_true_line_numbers(tmp_path, workers):
    for name, rows in (("big.jsonl", 3000), ("more.jsonl", 1700)):
        (tmp_path / name).write_text(
            "".join(json.dumps({"text": f"row {i} " + "x" * (i % 50)}) + "\n" for i in range(rows))
        )
    files = discover_inputs([str(tmp_path / "big.jsonl"), str(tmp_path / "more.jsonl")])
    if workers is None:
        tasks = plan_read_tasks(files, split_bytes=10_000)
    else:
        with LocalRunner(workers) as runner:
            tasks = plan_read_tasks(files, split_bytes=10_000, runner=runner)
    assert len(tasks) > 10 and all(t.nbytes <= 10_000 + 100 for t in tasks)
    items = [i for t in tasks for i in read_task(t)]
    assert [i.id for i in items] == [f"big.jsonl:{n}" for n in range(1, 3001)] + [
        f"more.jsonl:{n}" for n in range(1, 1701)
    ]
    assert [i.text.split()[1] for i in items] == [str(n) for n in range(3000)] + [str(n) for n in range(1700)]


def test_missing_and_unreadable_inputs_are_clear_errors(tmp_path):
    with pytest.raises(UserError, match="no such file"):
        discover_inputs([str(tmp_path / "nope.jsonl")])
    (tmp_path / "x.csv").write_text("a")
    with pytest.raises(UserError, match="unsupported input format"):
        discover_inputs([str(tmp_path / "x.csv")])
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(UserError, match="no input files"):
        discover_inputs([str(empty)])
    gone = tmp_path / "gone.jsonl"
    gone.write_text('{"text": "x"}\n')
    tasks = plan_read_tasks(discover_inputs([str(gone)]))
    gone.unlink()  # unreadable by the time it is read (root can read a chmod 000 file, so not that)
    with pytest.raises(UserError, match="gone.jsonl: cannot read"):
        list(read_task(tasks[0]))


def test_generated_ids_are_unique_across_input_arguments(tmp_path):
    """Two inputs with the same file name get ids relative to their common root (issue 13 item 1)."""
    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "data.jsonl").write_text('{"text": "one"}\n{"text": "two"}\n')
    items = read_all([tmp_path / "x" / "data.jsonl", tmp_path / "y" / "data.jsonl"])
    assert [i.id for i in items] == ["x/data.jsonl:1", "x/data.jsonl:2", "y/data.jsonl:1", "y/data.jsonl:2"]
    assert [i.source for i in items] == ["x/data.jsonl"] * 2 + ["y/data.jsonl"] * 2
    items = read_all([tmp_path / "x", tmp_path / "y"])  # two directories: the same
    assert [i.id for i in items][::2] == ["x/data.jsonl:1", "y/data.jsonl:1"]
    assert [i.id for i in read_all([tmp_path / "x"])] == ["data.jsonl:1", "data.jsonl:2"]  # one root: relative to it


def test_the_same_file_given_twice_is_an_error(tmp_path):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.jsonl").write_text('{"text": "one"}\n')
    with pytest.raises(UserError, match="a.jsonl: given twice"):
        discover_inputs([str(tmp_path / "d"), str(tmp_path / "d" / "a.jsonl")])


@pytest.mark.parametrize("empty", ["null", '""'])
def test_a_null_or_empty_id_is_replaced_in_the_record_too(tmp_path, empty):
    p = tmp_path / "a.jsonl"
    p.write_text(f'{{"id": {empty}, "text": "one"}}\n')
    (doc,) = read_all([p])
    assert doc.id == "a.jsonl:1"
    assert json.loads(doc.record) == {"id": "a.jsonl:1", "text": "one"}


def test_records_are_kept_byte_for_byte_and_a_missing_id_is_inserted_as_text(tmp_path):
    """Only the line terminator is normalized (CRLF -> LF, a last line gets one); the record's own
    bytes, escapes and number spellings included, are kept; a generated id is inserted as the first key."""
    p = tmp_path / "a.jsonl"
    with_id = b'{"id":"k","text":"caf\\u00e9","n":1.0e5}'
    without = b'  {"text": "caf\\u00e9",   "n": 1.0e5}'
    p.write_bytes(with_id + b"\r\n" + without + b"\r\n")
    first, second = read_all([p])
    assert first.record == with_id
    assert second.record == b'  {"id": "a.jsonl:2", "text": "caf\\u00e9",   "n": 1.0e5}'
    assert json.loads(second.record) == {"id": "a.jsonl:2", "text": "café", "n": 1.0e5}


@pytest.mark.parametrize("suffix", [".jsonl", ".jsonl.gz", ".jsonl.zst", ".txt"])
def test_a_utf8_bom_at_the_start_of_a_file_is_skipped(tmp_path, suffix):
    body = b'{"id": "a", "text": "first"}\n{"id": "b", "text": "second"}\n' if suffix != ".txt" else b"whole file"
    data = b"\xef\xbb\xbf" + body
    if suffix == ".jsonl.gz":
        data = gzip.compress(data)
    elif suffix == ".jsonl.zst":
        data = zstandard.ZstdCompressor().compress(data)
    (tmp_path / f"f{suffix}").write_bytes(data)
    items = read_all([tmp_path / f"f{suffix}"])
    assert all(isinstance(i, Document) for i in items)
    if suffix == ".txt":
        assert items[0].text == "whole file"
    else:
        assert [i.id for i in items] == ["a", "b"] and items[0].record == b'{"id": "a", "text": "first"}'


def test_directory_scan_skips_hidden_accepts_upper_case_and_says_what_it_ignored(tmp_path, capsys):
    d = tmp_path / "corpus"
    (d / ".cache").mkdir(parents=True)
    (d / ".cache" / "old.jsonl").write_text('{"text": "stale"}\n')
    (d / ".hidden.jsonl").write_text('{"text": "stale"}\n')
    (d / "UPPER.JSONL").write_text('{"text": "kept"}\n')
    (d / "Notes.TXT").write_text("kept too")
    (d / "notes.csv").write_text("a,b")
    files = discover_inputs([str(d)])
    assert [f.rel for f in files] == ["Notes.TXT", "UPPER.JSONL"]
    assert [i.text for i in read_all([d])] == ["kept too", "kept"]
    err = capsys.readouterr().err
    assert err.count("\n") == 2  # one line per scan (read_all scanned again)
    line = err.splitlines()[0]
    assert (
        f"{d}: ignored 3 files" in line
        and "notes.csv" in line
        and ".cache/old.jsonl" in line
        and ".hidden.jsonl" in line
    )


def test_fast_json_path_reads_every_line_as_json_does(tmp_path, monkeypatch):
    """Lines orjson reads differently from json (integers over 64 bits, NaN, lone surrogates) or
    rejects with other words give exactly the Document or Rejected row json gives."""
    from pretrainkit.dataprep import readers

    lines = [
        b'{"id": 123456789012345678901234567890, "text": "big integer id"}',
        b'{"id": 5, "text": "x", "n": 123456789012345678901234567890}',
        b'{"id": null, "text": "re-serialized", "big": 123456789012345678901234567890}',
        b'{"id": "nan", "text": "not a number", "v": NaN}',
        b'{"id": "sur", "text": "lone \\ud800 surrogate"}',
        b'{"text": 123456789012345678901234567890}',
        b'{"id": true, "text": "bool id"}',
        b'{"id": "", "text": "empty id"}',
        b'{"id": "crlf", "text": "windows line"}\r',
        b'{"id": "dup", "text": "first", "text": "last wins"}',
        b"[1, 2]",
        b'{"id": "bad", "text": "unterminated',
        b'\xff{"id": "u"}',
        b"   ",
        b'{"id": "ok", "text": "caf\xc3\xa9 \\u00e9\\ud83d\\ude00"}',
    ]
    path = tmp_path / "tricky.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    fast = read_all([path])
    monkeypatch.setattr(
        readers.orjson, "loads", lambda raw: (_ for _ in ()).throw(readers.orjson.JSONDecodeError("off", "", 0))
    )
    with_json = read_all([path])
    assert fast == with_json
    assert len(fast) == len(lines)
    assert fast[0].id == "123456789012345678901234567890" and fast[2].record.endswith(
        b"123456789012345678901234567890}"
    )
    assert isinstance(fast[3], Document) and fast[8].record == lines[8][:-1] and fast[9].text == "last wins"


def test_a_record_is_verbatim_only_when_it_is_its_uncompressed_line_exactly(tmp_path):
    """The dedup write stage copies verbatim records from the input: a CRLF line, the BOM line, the
    last line without a line feed, a generated id and a compressed file are never verbatim; an
    integer id is kept as it was, so its line is."""
    lines = [
        b'\xef\xbb\xbf{"id": "bom", "text": "one"}\n',
        b'{"id": "plain", "text": "two"}\n',
        b'{"text": "no id"}\n',
        b'{"id": "crlf", "text": "three"}\r\n',
        b"\n",
        b'{"id": 7, "text": "int id"}\n',
        b'{"id": "last", "text": "end"}',
    ]
    (tmp_path / "a.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(lines[1]))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines[1].replace(b"plain", b"z")))
    docs = [d for d in read_all([tmp_path]) if isinstance(d, Document)]
    verbatim = {(d.source, d.id): d.verbatim for d in docs}
    assert verbatim == {
        ("a.jsonl", "bom"): False,
        ("a.jsonl", "plain"): True,
        ("a.jsonl", "a.jsonl:3"): False,
        ("a.jsonl", "crlf"): False,
        ("a.jsonl", "7"): True,
        ("a.jsonl", "last"): False,
        ("b.jsonl.gz", "plain"): False,
        ("c.jsonl.zst", "z"): False,
    }
    assert all(d.record == lines[d.line - 1].rstrip(b"\n") for d in docs if d.verbatim)
    task = plan_read_tasks(discover_inputs([str(tmp_path / "a.jsonl")]))[0]
    assert not any(
        d.verbatim for d in read_task(task, records=False) if isinstance(d, Document)
    )  # no record, nothing to copy


def test_a_broken_symbolic_link_in_a_directory_is_an_error_or_named_as_ignored(tmp_path, capsys):
    d = tmp_path / "corpus"
    d.mkdir()
    (d / "kept.jsonl").write_text('{"text": "kept"}\n')
    (d / ".#kept.jsonl").symlink_to("root@host.1234")  # an editor's lock: hidden, so ignored, and said so
    (d / "README").symlink_to("../README.md")  # no input format: ignored, and said so
    assert [f.rel for f in discover_inputs([str(d)])] == ["kept.jsonl"]
    line = capsys.readouterr().err.strip()
    assert f"{d}: ignored 2 files" in line and ".#kept.jsonl" in line and "README" in line
    (d / "part-2.jsonl").symlink_to(tmp_path / "moved-away.jsonl")  # an input, unreadable as any other
    with pytest.raises(UserError) as e:
        discover_inputs([str(d)])
    assert str(e.value) == f"{d / 'part-2.jsonl'}: broken symbolic link (to {tmp_path / 'moved-away.jsonl'})"


def test_a_json_error_reads_once_at_its_column(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_bytes(b'{"text": "a tab\tin it"}\n{"text": "unterminated\n')
    control, unterminated = (i.reason for i in read_all([p]))
    # json words it "Invalid control character at" (Python 3.11) or "... '\\t' at" (3.13), then the position
    assert control.startswith("malformed JSON: Invalid control character") and control.endswith(" at column 16")
    assert unterminated == "malformed JSON: Unterminated string starting at column 10"
    assert "at at" not in control + unterminated


def test_an_error_quotes_at_most_200_characters_of_a_value_from_the_data(tmp_path, capsys):
    from pretrainkit.cli import main

    huge = "k" * 2_000_000
    p = tmp_path / "keys.jsonl"
    p.write_text(json.dumps({huge: "no text field", "title": "t"}) + "\n")
    (reason,) = [i.reason for i in read_all([p])]
    assert reason == f"missing text field 'text' (fields: {'k' * 200}…(2000000 chars), title)"
    assert main(["tokenizer", "train", str(p), "-o", str(tmp_path / "tok.json"), "--vocab-size", "300"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"ptk: error: {p}: all 1 records were rejected") and len(line) < len(str(p)) + 400, line
    pq.write_table(pa.table({huge: ["x"]}), tmp_path / "cols.parquet")
    with pytest.raises(UserError) as e:
        read_all([tmp_path / "cols.parquet"])
    assert (
        str(e.value)
        == f"{tmp_path / 'cols.parquet'}: Parquet file has no column 'text' (columns: {'k' * 200}…(2000000 chars))"
    )


def test_a_null_or_non_string_text_is_rejected_saying_what_it_is(tmp_path):
    """`{"text": null}` was rejected as "missing text field 'text'" (issue 49 item 14): a text that is
    there but null, or not a string, is said to be what it is; only an absent field is missing."""
    p = tmp_path / "kinds.jsonl"
    values = [None, 5, 2.5, True, ["a", "b"], {"a": 1}]
    p.write_text("".join(json.dumps({"id": i, "text": v}) + "\n" for i, v in enumerate(values)) + '{"id": 9}\n')
    assert [i.reason for i in read_all([p])] == [
        "text field 'text' is null, not a string",
        "text field 'text' is a number, not a string",
        "text field 'text' is a number, not a string",
        "text field 'text' is a boolean, not a string",
        "text field 'text' is an array, not a string",
        "text field 'text' is an object, not a string",
        "missing text field 'text' (fields: id)",
    ]
    pq.write_table(pa.table({"text": ["fine", None]}), tmp_path / "rows.parquet")  # a Parquet null alike
    assert [i.reason if type(i) is Rejected else i.text for i in read_all([tmp_path / "rows.parquet"])] == [
        "fine",
        "text field 'text' is null, not a string",
    ]
