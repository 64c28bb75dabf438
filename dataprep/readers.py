"""Streaming readers for raw corpora: every input record becomes a `Document` or a `Rejected` row.

    files = discover_inputs(["corpus/", "extra.jsonl.zst"])
    for task in plan_read_tasks(files):
        for item in read_task(task, text_field="text", id_field="id"):
            ...  # Document(id, text, line, raw) or Rejected(source, line, reason)

Formats: `.jsonl`, `.jsonl.gz`, `.jsonl.zst`, `.parquet` (one record per row) and `.txt` (one
document per file), in any letter case, and directories of these (searched recursively, in sorted
order, hidden files and directories skipped, every other file named in one note on stderr but an
output folder's marker and lock, `pretrainkit.output_folders`, which are no one's data). A
directory that is a finished `ptk dedup` output contributes only its kept records
(`part-*.jsonl.zst`), never its duplicates, rejections or index. Nothing is held in memory beyond
one record (one row group for Parquet). A UTF-8 byte-order mark at the start of a file is skipped.

Provenance: `InputFile.rel` is the path relative to the common directory of all the inputs given
(the directory itself when one directory is given), so it is unique within a run; a record without
an id (or with a null or empty one) gets `"<rel>:<line>"`. `Document.record` is the input line's
bytes, without its line terminator and BOM; a generated id is inserted into it as the first key,
leaving every other byte as it was; `Document.verbatim` says the record is its line of an
uncompressed `.jsonl` file exactly, so that a copy of it can be read back from the input.
`Document.url` is the record's `url` field, where it is a string; `described(document)` is what the
row of a removed document shows of it (its url and its text's first HEAD_CHARS characters). Large
uncompressed `.jsonl` files are split into byte ranges on line boundaries (`ReadTask`), so that
several processes can share one file while the order of documents stays the input order.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import gzip
import json
import os
import re
import sys
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import orjson
import zstandard

from pretrainkit.errors import UserError, shortened
from pretrainkit.output_folders import DECONTAMINATE, SPLIT, own_name, owner
from pretrainkit.stage_layout import KEPT_GLOB, STATS_NAME, WORK_NAME

SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet", ".txt")
SPLIT_BYTES = 16 << 20  # uncompressed .jsonl files larger than this are read as several tasks
BOM = b"\xef\xbb\xbf"
URL_FIELD = "url"  # a record's address, shown in the rows of removed documents
HEAD_CHARS = 200  # characters of a removed document's text its row shows


@dataclass(frozen=True)
class InputFile:
    path: str  # as opened
    rel: str  # relative to the input root given on the command line; used in ids and rejections
    size: int

    @property
    def format(self) -> str:
        return input_format(self.path)


@dataclass(frozen=True)
class ReadTask:
    """A contiguous piece of the input: a whole file, or a line-aligned byte range of a `.jsonl`."""

    file: InputFile
    start: int = 0
    end: int | None = None  # exclusive; None = to the end of the file
    first_line: int = 1

    @property
    def nbytes(self) -> int:
        return (self.end if self.end is not None else self.file.size) - self.start


@dataclass
class Document:
    id: str
    text: str
    source: str
    line: int
    record: bytes  # the record as one JSON line (original bytes where the record had an id); b"" if not asked for
    verbatim: bool = (
        False  # record is its uncompressed .jsonl line's bytes before the "\n": a copy can come from the input
    )
    url: str | None = None  # the record's `url` field where it is a string (`ptk extract` writes one)


@dataclass
class Rejected:
    source: str
    line: int
    reason: str
    id: str | None = None  # when the record had one (a later stage rejecting a parsed document)

    def to_json(self) -> dict:
        row = {"source": self.source, "line": self.line, "reason": self.reason}
        return row if self.id is None else {"id": self.id, **row}


Item = Document | Rejected


def reason_kind(reason: str) -> str:
    """A rejection reason without its position, for counting reasons."""
    return re.sub(r" at (column|byte) \d+", "", reason)


def inputs_named(inputs: Sequence[str]) -> str:
    """A run's inputs as an error names them: the first, and how many more."""
    return inputs[0] if len(inputs) == 1 else f"{inputs[0]} and {len(inputs) - 1} more inputs"


def nothing_usable(inputs: list[str], reasons: Counter, listed_in: str | os.PathLike | None = None) -> UserError:
    """The error for a run whose every record was rejected (or that read none), naming the most common reasons."""
    where = inputs_named(inputs)
    total = sum(reasons.values())
    if total == 0:
        return UserError(f"{where}: no records in the inputs; nothing to write")
    top = "; ".join(f"{reason}: {n:,}" for reason, n in reasons.most_common(3))
    others = f"; {len(reasons) - 3} other reasons" if len(reasons) > 3 else ""
    listed = f" (each listed in {listed_in})" if listed_in else ""
    return UserError(f"{where}: all {total:,} records were rejected, most often {top}{others}{listed}")


def input_format(name: str, suffixes: Sequence[str] = SUFFIXES) -> str | None:
    """The input suffix `name` ends with, in any letter case (None: not an input file)."""
    lower = name.lower()
    return next((s for s in suffixes if lower.endswith(s)), None)


def discover_inputs(paths: list[str], suffixes: Sequence[str] = SUFFIXES) -> list[InputFile]:
    """Expand files and directories into supported input files (those ending in one of `suffixes`:
    `ptk extract` reads WARC and HTML), in a stable order, each named relative to the common
    directory of the inputs (see the module docstring)."""
    if not paths:
        raise UserError("no input given")
    chosen: list[Path] = []
    anchors: list[str] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            chosen += _scan_directory(p, given, suffixes)
            anchors.append(os.path.abspath(p))
        elif p.is_file():
            if input_format(p.name, suffixes) is None:
                raise UserError(f"{given}: unsupported input format (expected {', '.join(suffixes)})")
            chosen.append(p)
            anchors.append(os.path.dirname(os.path.abspath(p)))
        else:
            raise UserError(f"{given}: no such file or directory")
    root = os.path.commonpath(anchors)
    seen: dict[str, Path] = {}
    found: list[InputFile] = []
    for f in chosen:
        real = os.path.realpath(f)
        if real in seen:
            raise UserError(f"{f}: given twice (also as {seen[real]}); each input file may be read once per run")
        seen[real] = f
        if _broken_link(f):
            raise UserError(f"{f}: broken symbolic link (to {os.readlink(f)})")
        if not os.access(f, os.R_OK):
            raise UserError(f"{f}: file is not readable")
        rel = Path(os.path.relpath(os.path.abspath(f), root)).as_posix()
        found.append(InputFile(str(f), rel, f.stat().st_size))
    return found


def _broken_link(p: Path) -> bool:
    return p.is_symlink() and not p.exists()


def _scan_directory(d: Path, given: str, suffixes: Sequence[str]) -> list[Path]:
    """The input files under `d` (hidden ones skipped; a dedup output inside gives its kept parts
    only), with one note on stderr naming what was left out."""
    # A link to nothing is listed too: among the ignored files, or refused as an input (never dropped unsaid).
    # The output folders' own marker and lock are no one's data: neither read nor named.
    every = sorted(f for f in d.rglob("*") if (f.is_file() or _broken_link(f)) and not own_name(f.name))
    rels = {f: f.relative_to(d).as_posix() for f in every}
    outputs = dedup_outputs_in(list(rels.values()))
    dedup_outputs = {d / rel for rel in outputs}
    unread = set(unread_in_dedup_outputs(list(rels.values()), outputs))
    for f in every:
        if f.name != STATS_NAME or f.parent in dedup_outputs:
            continue
        kind = owner(f.parent)  # reads the folder's marker
        if kind == DECONTAMINATE.name:
            raise UserError(
                f"{f.parent}: a `ptk decontaminate --report-only` output: it lists the contaminated documents "
                f"({f.parent / 'contaminated.jsonl'}) and keeps none; give the corpus it read instead"
            )
        if kind == SPLIT.name:  # its buckets are corpora of their own: which ones is the user's choice
            raise UserError(
                f"{f.parent}: a `ptk split` output: give the bucket folders to read ({f.parent / 'bucket-00'}, ...)"
            )
    for f in every:
        if f.parent.name == WORK_NAME and f.parent.parent not in dedup_outputs:
            raise UserError(
                f"{f.parent.parent}: an unfinished `ptk dedup` output (no {STATS_NAME}); rerun that dedup to finish it"
            )

    def taken(f: Path) -> bool:
        if rels[f] in unread:
            return False
        if any(o in f.parents for o in dedup_outputs):
            return True  # a dedup output's kept part
        return input_format(f.name, suffixes) is not None and not any(
            part.startswith(".") for part in Path(rels[f]).parts
        )

    files = [f for f in every if taken(f)]
    ignored = [rels[f] for f in every if not taken(f)]
    if ignored:
        note_ignored(given, ignored, suffixes, len(dedup_outputs))
    if not files:
        raise UserError(f"{given}: directory holds no input files ({', '.join(suffixes)})")
    return files


def dedup_outputs_in(rels: Sequence[str]) -> set[str]:
    """The folders (relative, "" for the top) among the files `rels` (posix paths relative to a folder
    given as input) that are `ptk dedup` outputs: a stats.json beside kept parts. Only their kept
    parts are read (`_scan_directory`), and a bucket's copy fetches no more (`fetched_input_files`)."""
    with_stats = {rel.rpartition("/")[0] for rel in rels if rel.rpartition("/")[2] == STATS_NAME}
    with_kept = {rel.rpartition("/")[0] for rel in rels if fnmatch.fnmatch(rel.rpartition("/")[2], KEPT_GLOB)}
    return with_stats & with_kept


def unread_in_dedup_outputs(rels: Sequence[str], outputs: set[str]) -> list[str]:
    """Those of `rels` that lie in one of the dedup `outputs` (`dedup_outputs_in(rels)`) and are not its
    kept parts: never read as input."""

    def unread(rel: str) -> bool:
        folder, _, name = rel.rpartition("/")
        if folder in outputs and fnmatch.fnmatch(name, KEPT_GLOB):
            return False
        parts = rel.split("/")
        return any("/".join(parts[:i]) in outputs for i in range(len(parts)))

    return [rel for rel in rels if unread(rel)]


def note_ignored(given: str, ignored: list[str], suffixes: Sequence[str], ptk_outputs: int) -> None:
    """One note on stderr naming the files of the input folder `given` that are not read."""
    kept_only = (
        f"; of the ptk output{'s' if ptk_outputs > 1 else ''} in it, only the kept records" if ptk_outputs else ""
    )
    print(
        f"ptk: note: {given}: ignored {len(ignored)} file{'s' if len(ignored) != 1 else ''} (hidden, or not "
        f"{'/'.join(suffixes)}{kept_only}): {grouped_names(ignored)}",
        file=sys.stderr,
    )


def fetched_input_files(url: str, files: dict[str, int]) -> dict[str, int]:
    """Of the files (relative path: size) of an input folder in a bucket, those to fetch: of its dedup
    outputs only the kept parts (the only files a reader takes from them; their index, lists and stats
    stay in the bucket), with a note on stderr naming the rest (`UrlArguments.select_inputs`)."""
    outputs = dedup_outputs_in(list(files))
    unread = unread_in_dedup_outputs(list(files), outputs)
    if not unread:
        return files
    named = [rel for rel in unread if not own_name(rel.rsplit("/", 1)[-1])]  # markers: no one's data
    print(
        f"ptk: note: {url}: not fetched {len(named)} file{'s' if len(named) != 1 else ''} of the ptk dedup "
        f"output{'s' if len(outputs) > 1 else ''} in it, of which only the kept records are read: "
        f"{grouped_names(named)}",
        file=sys.stderr,
    )
    skipped = set(unread)
    return {rel: size for rel, size in files.items() if rel not in skipped}


def grouped_names(rels: list[str], most: int = 6) -> str:
    """`a.csv, index/ (12 files), ...`: files at the top by name, each top directory once, with its count."""
    groups: dict[str, list[str]] = {}
    for rel in rels:
        head, sep, _ = rel.partition("/")
        groups.setdefault(head + sep, []).append(rel)
    names = [f"{group} ({len(members)} files)" if len(members) > 1 else members[0] for group, members in groups.items()]
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def refuse_overlap(paths: Sequence[str], out_dir: Path) -> None:
    """An output directory and its inputs must not hold one another: an input inside OUT (a file found,
    or a path given) and OUT inside an input folder would both have a rerun read the run's own outputs
    as input. Said before anything is written, on the first run."""
    out = Path(out_dir).resolve()
    for path in paths:
        resolved = Path(path).resolve()
        if resolved == out or out in resolved.parents:
            raise UserError(f"{path}: input lies inside the output directory {out_dir}; choose another -o")
        if resolved in out.parents and Path(path).is_dir():
            raise UserError(f"{out_dir}: output lies inside the input folder {path}; choose another -o")


def plan_read_tasks(files: list[InputFile], split_bytes: int = SPLIT_BYTES, runner=None) -> list[ReadTask]:
    """Cut the inputs into read tasks; the list depends only on the files, never on worker counts.
    A split file's lines are counted to number each range's first line: by `runner`'s workers
    (a `pretrainkit.dataprep.executors` runner), a range per job, when one is given."""
    tasks: list[ReadTask] = []
    for f in files:
        if f.format == ".jsonl" and f.size > split_bytes:
            tasks += _split_jsonl(f, split_bytes)
        else:
            tasks.append(ReadTask(f))
    counted = [t for t in tasks if t.end is not None and t.end < t.file.size]  # ranges that a later one follows
    lines = (
        runner.run(count_lines, counted, "plan", weights=[t.nbytes for t in counted], unit="B")
        if runner
        else map(count_lines, counted)
    )
    after = dict(zip(((t.file.path, t.end) for t in counted), lines))
    numbered: list[ReadTask] = []
    for t in tasks:
        first_line = numbered[-1].first_line + after[(t.file.path, t.start)] if t.start else 1
        numbered.append(dataclasses.replace(t, first_line=first_line))
    return numbered


def _split_jsonl(f: InputFile, split_bytes: int) -> list[ReadTask]:
    """Line-aligned byte ranges of about `split_bytes` (their first lines not yet numbered)."""
    tasks: list[ReadTask] = []
    start = 0
    with _open_or_fail(f.path) as fh:
        while start < f.size:
            fh.seek(start + split_bytes)
            end = min(f.size, start + split_bytes + len(fh.readline()))  # finish the line the cut goes through
            tasks.append(ReadTask(f, start, end))
            start = end
    return tasks


def count_lines(task: ReadTask) -> int:
    """Line ends in the task's byte range, read a block at a time (numpy compares a block ~6x faster
    than `bytearray.count`)."""
    lines, left = 0, task.nbytes
    block = bytearray(1 << 20)
    view = np.frombuffer(block, np.uint8)
    with _open_or_fail(task.file.path) as fh:
        fh.seek(task.start)
        while left > 0 and (n := fh.readinto(block)):
            lines += int(np.count_nonzero(view[: min(n, left)] == ord("\n")))
            left -= n
    return lines


def _open_or_fail(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None


def in_batches(items: Iterable[Item], max_docs: int, max_chars: int) -> Iterator[list[Item]]:
    """`items` (a task's, in order) a list at a time, each closed once it holds `max_docs` documents
    or `max_chars` characters of their texts; a Rejected row stays in its place and counts for neither."""
    batch: list[Item] = []
    docs = chars = 0
    for item in items:
        batch.append(item)
        if type(item) is Document:
            docs += 1
            chars += len(item.text)
            if docs >= max_docs or chars >= max_chars:
                yield batch
                batch, docs, chars = [], 0, 0
    if batch:
        yield batch


def read_task(task: ReadTask, text_field: str = "text", id_field: str = "id", records: bool = True) -> Iterator[Item]:
    """Yield every record of the task in order, as a Document or a Rejected row. `records=False`:
    every `Document.record` is b"" (for readers that need the text only: a large document's line
    is then freed once its text is parsed)."""
    fmt = task.file.format
    if fmt == ".txt":
        yield from _read_txt(task.file, records)
    elif fmt == ".parquet":
        yield from _read_parquet(task.file, text_field, id_field, records)
    else:
        yield from _read_jsonl(task, text_field, id_field, records)


def _read_txt(f: InputFile, records: bool) -> Iterator[Item]:
    with _open_or_fail(f.path) as fh:
        data = fh.read()
    if data.startswith(BOM):
        data = data[len(BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        yield Rejected(f.rel, 1, f"invalid UTF-8 at byte {e.start}")
        return
    if not text or text.isspace():
        yield Rejected(f.rel, 1, "empty text")
        return
    doc_id = f"{f.rel}:1"
    record = json.dumps({"id": doc_id, "text": text}, ensure_ascii=False).encode("utf-8") if records else b""
    yield Document(doc_id, text, f.rel, 1, record)


def _jsonl_lines(task: ReadTask) -> Iterator[tuple[bytes, bool]]:
    """Raw lines of the task without their line feeds, each with whether it is exactly the bytes
    before a "\n" of an uncompressed file (no CR, not the last line without one); a broken
    compressed stream raises `_Truncated` after the good lines. While suspended, no generator here
    keeps a line it yielded (`held.pop()`): the consumer alone decides how long a large record lives."""
    fmt = task.file.format
    fh = _open_or_fail(task.file.path)
    try:
        if fmt == ".jsonl":
            fh.seek(task.start)
            remaining = task.nbytes
            for line in fh:
                if remaining <= 0:
                    break
                remaining -= len(line)
                held = [line.rstrip(b"\r\n")]
                exact = len(held[0]) + 1 == len(line) and line[-1:] == b"\n"
                del line
                yield held.pop(), exact
            return
        try:
            if fmt == ".jsonl.gz":
                for line in gzip.GzipFile(fileobj=fh, mode="rb"):
                    held = [line.rstrip(b"\r\n")]
                    del line
                    yield held.pop(), False
            else:
                for line in _split_lines(_zstd_chunks(fh)):
                    held = [line]
                    del line
                    yield held.pop(), False
        except (EOFError, OSError, zlib.error, zstandard.ZstdError) as e:
            raise _Truncated(str(e) or type(e).__name__) from None
    finally:
        fh.close()


class _Truncated(Exception):
    pass


def _zstd_chunks(fh: BinaryIO) -> Iterator[bytes]:
    """Decompressed data of every frame; a last frame that never ends raises `_Truncated`
    (zstandard's stream reader would silently stop there)."""
    dctx = zstandard.ZstdDecompressor()
    obj, pending = dctx.decompressobj(), False
    while chunk := fh.read(1 << 20):
        while chunk:
            pending = True
            if out := obj.decompress(chunk):
                yield out
            chunk = b""
            if obj.eof:
                chunk, obj, pending = obj.unused_data, dctx.decompressobj(), False
    if pending:
        raise _Truncated("zstd frame ends early")


def _split_lines(chunks: Iterator[bytes]) -> Iterator[bytes]:
    """Lines without their line feed; a line longer than a chunk is joined once, not per chunk."""
    pending: list[bytes] = []
    for chunk in chunks:
        lines = chunk.split(b"\n")
        del chunk
        if len(lines) > 1:
            lines[0] = b"".join([*pending, lines[0]])
            pending = []
        tail = lines.pop()
        lines.reverse()
        while lines:
            yield lines.pop()
        pending.append(tail)
    if rest := b"".join(pending):
        yield rest


def _read_jsonl(task: ReadTask, text_field: str, id_field: str, records: bool) -> Iterator[Item]:
    source = task.file.rel
    line_no = task.first_line - 1
    try:
        for raw, exact in _jsonl_lines(task):
            line_no += 1
            if line_no == 1 and raw.startswith(BOM):
                raw, exact = raw[len(BOM) :], False
            item = _parse_json_line(raw, source, line_no, text_field, id_field, records)
            if (
                exact and type(item) is Document and item.record is raw
            ):  # the parsers keep the line's own object when unchanged
                item.verbatim = True
            del raw  # not kept while suspended (see _jsonl_lines)
            yield item
    except _Truncated as e:
        yield Rejected(source, line_no + 1, f"truncated or corrupt compressed stream ({e}); rest of file unreadable")


def _parse_json_line(raw: bytes, source: str, line_no: int, text_field: str, id_field: str, records: bool) -> Item:
    """orjson parses the common record (a string text and a string, integer or absent id) several
    times faster than json, into the same object; every other line is json's to accept, reject
    and word (orjson differs on NaN, lone surrogates, and integers over 64 bits, which it reads
    as floats)."""
    raw = raw.rstrip(b"\r\n")
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        obj = None
    if type(obj) is dict and type(text := obj.get(text_field)) is str:
        doc_id = obj.get(id_field, _ABSENT)
        if type(doc_id) is str and doc_id and text and not text.isspace():  # the commonest record: its line as it is
            return Document(doc_id, text, source, line_no, raw if records else b"", url=_url(obj))
        if type(doc_id) is str and doc_id or type(doc_id) is int or doc_id is _ABSENT:
            return _document_from_object(obj, raw, source, line_no, text_field, id_field, records)
    return _parse_json_line_with_json(raw, source, line_no, text_field, id_field, records)


_ABSENT = object()


def _parse_json_line_with_json(
    raw: bytes, source: str, line_no: int, text_field: str, id_field: str, records: bool
) -> Item:
    if not raw or raw.isspace():
        return Rejected(source, line_no, "blank line")
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Rejected(source, line_no, f"invalid UTF-8 at byte {e.start}")
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as e:
        # some of json's messages end in "at", meant to be followed by the position
        return Rejected(source, line_no, f"malformed JSON: {e.msg.removesuffix(' at')} at column {e.colno}")
    except RecursionError:
        return Rejected(source, line_no, "malformed JSON: arrays or objects nested too deep to read")
    if not isinstance(obj, dict):
        return Rejected(source, line_no, f"record is a JSON {type(obj).__name__}, not an object")
    for field in (text_field, id_field):  # json, unlike orjson, accepts an escaped lone surrogate ("\ud800")
        if isinstance(value := obj.get(field), str) and (code := _lone_surrogate(value)) is not None:
            return Rejected(source, line_no, f"invalid Unicode: field '{field}' holds the lone surrogate \\u{code:04x}")
    return _document_from_object(obj, raw, source, line_no, text_field, id_field, records)


def json_kind(value: object) -> str:
    """What a record's value is, as JSON names it: null, a number, an array... (a Parquet row's
    values are the same Python types)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    kinds = {list: "an array", dict: "an object"}
    return kinds.get(type(value), f"a {type(value).__name__}")


def _names(names: list[str], shown: int = 8) -> str:
    """The first `shown` field or column names of a record, each shortened (the data's, of any length)."""
    return ", ".join(shortened(n) for n in names[:shown]) + (", ..." if len(names) > shown else "")


def _lone_surrogate(value: str) -> int | None:
    """The first code point of `value` that UTF-8 cannot encode (a surrogate without its pair)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as e:
        return ord(value[e.start])
    return None


def _document_from_object(
    obj: dict, raw: bytes | None, source: str, line_no: int, text_field: str, id_field: str, records: bool
) -> Item:
    text = obj.get(text_field, _ABSENT)
    if text is _ABSENT:
        return Rejected(source, line_no, f"missing text field '{text_field}' (fields: {_names(list(obj)) or 'none'})")
    if not isinstance(text, str):  # its kind, not its value: reasons are counted as they are worded
        return Rejected(source, line_no, f"text field '{text_field}' is {json_kind(text)}, not a string")
    if not text or text.isspace():  # isspace stops at the first other character; strip() copies
        return Rejected(source, line_no, "empty text")
    doc_id = obj.get(id_field)
    generated = doc_id is None or doc_id == ""
    if generated:
        doc_id = f"{source}:{line_no}"
    elif isinstance(doc_id, (str, int)) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    else:
        return Rejected(source, line_no, f"id field '{id_field}' is a {type(doc_id).__name__}, not a string or integer")
    record = _record(obj, raw, id_field, doc_id, generated) if records else b""
    return Document(doc_id, text, source, line_no, record, url=_url(obj))


def _url(obj: dict) -> str | None:
    url = obj.get(URL_FIELD)
    return url if type(url) is str else None


def described(document: Document) -> dict:
    """What a removed document's row shows of it, so that a rule can be judged without joining files:
    its `url` (where the record has one) and `text_head`, the first HEAD_CHARS characters of its text
    as the stage read it (before the stage changed it)."""
    url = writable_url(document)
    return {**({"url": url} if url is not None else {}), "text_head": document.text[:HEAD_CHARS]}


def writable_url(document: Document) -> str | None:
    """The document's url where it has one that UTF-8 can write (json reads an escaped lone surrogate
    in a field other than the text and id; an output cannot hold it), else None."""
    return document.url if document.url is not None and _lone_surrogate(document.url) is None else None


def _record(obj: dict, raw: bytes | None, id_field: str, doc_id: str, generated: bool) -> bytes:
    """The record as one JSON line that holds its id: the original bytes (`raw`, None for a Parquet
    row) where they do, with a generated id inserted or put in place of a null or empty one."""
    if generated:
        if raw is not None and id_field not in obj:  # insert the id, every other byte unchanged
            brace = raw.index(b"{") + 1  # the line parsed as an object: only whitespace comes before it
            field = json.dumps({id_field: doc_id}, ensure_ascii=False)[1:-1].encode("utf-8")
            return raw[:brace] + field + b", " + raw[brace:]
        # a null or empty id is replaced where it stands (the record is re-serialized)
        obj = {id_field: doc_id, **obj} if id_field not in obj else {**obj, id_field: doc_id}
        raw = None
    if raw is not None:
        return raw
    try:
        return json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
    except (
        UnicodeEncodeError
    ):  # a lone surrogate in another field (json read it from an escape): written back as the escape
        return json.dumps(obj, default=str).encode("utf-8")


def _read_parquet(f: InputFile, text_field: str, id_field: str, records: bool) -> Iterator[Item]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f.path)
    except Exception as e:  # pyarrow raises several unrelated types for unreadable files
        raise UserError(f"{f.path}: not a readable Parquet file: {e}") from None
    if text_field not in pf.schema_arrow.names:
        raise UserError(
            f"{f.path}: Parquet file has no column '{text_field}' (columns: {_names(pf.schema_arrow.names)})"
        )
    row = 0
    for batch in pf.iter_batches(batch_size=4096):
        for obj in batch.to_pylist():
            row += 1
            yield _document_from_object(obj, None, f.rel, row, text_field, id_field, records)


def file_lines(path: str) -> Iterator[bytes]:
    """Every line of a whole `.jsonl`, `.jsonl.gz` or `.jsonl.zst` file, without its line end and
    the first without a BOM (for small files read whole, such as evaluation sets); a broken
    compressed stream is a UserError naming the file, after the good lines."""
    f = InputFile(path, path, os.path.getsize(path))
    try:
        for number, (raw, _) in enumerate(_jsonl_lines(ReadTask(f)), 1):
            yield raw[len(BOM) :] if number == 1 and raw.startswith(BOM) else raw
    except _Truncated as e:
        raise UserError(f"{path}: truncated or corrupt compressed stream ({e})") from None
