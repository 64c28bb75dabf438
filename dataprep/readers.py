"""Streaming readers for raw corpora: every input record becomes a `Document` or a `Rejected` row.

    files = discover_inputs(["corpus/", "extra.jsonl.zst"])
    for task in plan_read_tasks(files):
        for item in read_task(task, text_field="text", id_field="id"):
            ...  # Document(id, text, line, raw) or Rejected(source, line, reason)

Formats: `.jsonl`, `.jsonl.gz`, `.jsonl.zst`, `.parquet` (one record per row) and `.txt` (one
document per file), and directories of these (searched recursively, in sorted order). Nothing is
held in memory beyond one record (one row group for Parquet). A record without an id gets
`"<path relative to the input root>:<line>"`. Large uncompressed `.jsonl` files are split into
byte ranges on line boundaries (`ReadTask`), so that several processes can share one file while
the order of documents stays the input order.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, Union

import zstandard

from pretrainkit.errors import UserError

SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet", ".txt")
SPLIT_BYTES = 16 << 20  # uncompressed .jsonl files larger than this are read as several tasks


@dataclass(frozen=True)
class InputFile:
    path: str  # as opened
    rel: str  # relative to the input root given on the command line; used in ids and rejections
    size: int

    @property
    def format(self) -> str:
        return next(s for s in SUFFIXES if self.path.endswith(s))


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
    record: bytes  # the record as one JSON line (original bytes where the record had an id)


@dataclass
class Rejected:
    source: str
    line: int
    reason: str

    def to_json(self) -> dict:
        return {"source": self.source, "line": self.line, "reason": self.reason}


Item = Union[Document, Rejected]


def discover_inputs(paths: list[str]) -> list[InputFile]:
    """Expand files and directories into supported input files, in a stable order."""
    if not paths:
        raise UserError("no input given")
    found: list[InputFile] = []
    for given in paths:
        p = Path(given)
        if p.is_dir():
            files = sorted(f for f in p.rglob("*") if f.is_file() and f.name.endswith(SUFFIXES))
            if not files:
                raise UserError(f"{given}: directory holds no input files ({', '.join(SUFFIXES)})")
            found += [InputFile(str(f), f.relative_to(p).as_posix(), f.stat().st_size) for f in files]
        elif p.is_file():
            if not p.name.endswith(SUFFIXES):
                raise UserError(f"{given}: unsupported input format (expected {', '.join(SUFFIXES)})")
            found.append(InputFile(str(p), p.name, p.stat().st_size))
        else:
            raise UserError(f"{given}: no such file or directory")
    for f in found:
        if not os.access(f.path, os.R_OK):
            raise UserError(f"{f.path}: file is not readable")
    return found


def refuse_inputs_inside(files: list[InputFile], out_dir: Path) -> None:
    """An output directory must not hold inputs: a rerun would read the run's own outputs as input."""
    out = out_dir.resolve()
    for f in files:
        if out in Path(f.path).resolve().parents:
            raise UserError(f"{f.path}: input lies inside the output directory {out_dir}; choose another -o")


def plan_read_tasks(files: list[InputFile], split_bytes: int = SPLIT_BYTES) -> list[ReadTask]:
    """Cut the inputs into read tasks; the list depends only on the files, never on worker counts."""
    tasks: list[ReadTask] = []
    for f in files:
        if f.format == ".jsonl" and f.size > split_bytes:
            tasks += _split_jsonl(f, split_bytes)
        else:
            tasks.append(ReadTask(f))
    return tasks


def _split_jsonl(f: InputFile, split_bytes: int) -> list[ReadTask]:
    tasks: list[ReadTask] = []
    start, line = 0, 1
    with _open_or_fail(f.path) as fh:
        while start < f.size:
            fh.seek(start)
            chunk = fh.read(split_bytes)
            end = start + len(chunk)
            if end < f.size:
                tail = fh.readline()  # finish the line the chunk cut through
                chunk += tail
                end += len(tail)
            tasks.append(ReadTask(f, start, end, line))
            line += chunk.count(b"\n")
            start = end
    return tasks


def _open_or_fail(path: str) -> BinaryIO:
    try:
        return open(path, "rb")
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None


def read_task(task: ReadTask, text_field: str = "text", id_field: str = "id") -> Iterator[Item]:
    """Yield every record of the task in order, as a Document or a Rejected row."""
    fmt = task.file.format
    if fmt == ".txt":
        yield from _read_txt(task.file)
    elif fmt == ".parquet":
        yield from _read_parquet(task.file, text_field, id_field)
    else:
        yield from _read_jsonl(task, text_field, id_field)


def _read_txt(f: InputFile) -> Iterator[Item]:
    with _open_or_fail(f.path) as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        yield Rejected(f.rel, 1, f"invalid UTF-8 at byte {e.start}")
        return
    if not text or text.isspace():
        yield Rejected(f.rel, 1, "empty text")
        return
    doc_id = f"{f.rel}:1"
    record = json.dumps({"id": doc_id, "text": text}, ensure_ascii=False).encode("utf-8")
    yield Document(doc_id, text, f.rel, 1, record)


def _jsonl_lines(task: ReadTask) -> Iterator[bytes]:
    """Raw lines of the task; a broken compressed stream raises `_Truncated` after the good lines."""
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
                yield line
            return
        try:
            if fmt == ".jsonl.gz":
                yield from gzip.GzipFile(fileobj=fh, mode="rb")
            else:
                yield from _split_lines(_zstd_chunks(fh))
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
    rest = b""
    for chunk in chunks:
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line + b"\n"
    if rest:
        yield rest


def _read_jsonl(task: ReadTask, text_field: str, id_field: str) -> Iterator[Item]:
    source = task.file.rel
    line_no = task.first_line - 1
    try:
        for raw in _jsonl_lines(task):
            line_no += 1
            yield _parse_json_line(raw, source, line_no, text_field, id_field)
    except _Truncated as e:
        yield Rejected(source, line_no + 1, f"truncated or corrupt compressed stream ({e}); rest of file unreadable")


def _parse_json_line(raw: bytes, source: str, line_no: int, text_field: str, id_field: str) -> Item:
    raw = raw.rstrip(b"\r\n")
    if not raw or raw.isspace():
        return Rejected(source, line_no, "blank line")
    try:
        s = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return Rejected(source, line_no, f"invalid UTF-8 at byte {e.start}")
    try:
        obj = json.loads(s)
    except json.JSONDecodeError as e:
        return Rejected(source, line_no, f"malformed JSON: {e.msg} at column {e.colno}")
    if not isinstance(obj, dict):
        return Rejected(source, line_no, f"record is a JSON {type(obj).__name__}, not an object")
    return _document_from_object(obj, raw, source, line_no, text_field, id_field)


def _document_from_object(
    obj: dict, raw: bytes | None, source: str, line_no: int, text_field: str, id_field: str
) -> Item:
    text = obj.get(text_field)
    if text is None:
        return Rejected(source, line_no, f"missing text field '{text_field}'")
    if not isinstance(text, str):
        return Rejected(source, line_no, f"text field '{text_field}' is a {type(text).__name__}, not a string")
    if not text or text.isspace():  # isspace stops at the first other character; strip() copies
        return Rejected(source, line_no, "empty text")
    doc_id = obj.get(id_field)
    if doc_id is None or doc_id == "":
        doc_id = f"{source}:{line_no}"
        obj = {id_field: doc_id, **obj}
        raw = None
    elif isinstance(doc_id, (str, int)) and not isinstance(doc_id, bool):
        doc_id = str(doc_id)
    else:
        return Rejected(source, line_no, f"id field '{id_field}' is a {type(doc_id).__name__}, not a string or integer")
    if raw is None:
        raw = json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
    return Document(doc_id, text, source, line_no, raw)


def _read_parquet(f: InputFile, text_field: str, id_field: str) -> Iterator[Item]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(f.path)
    except Exception as e:  # pyarrow raises several unrelated types for unreadable files
        raise UserError(f"{f.path}: not a readable Parquet file: {e}") from None
    if text_field not in pf.schema_arrow.names:
        raise UserError(f"{f.path}: Parquet file has no column '{text_field}' (columns: {', '.join(pf.schema_arrow.names)})")
    row = 0
    for batch in pf.iter_batches(batch_size=4096):
        for obj in batch.to_pylist():
            row += 1
            yield _document_from_object(obj, None, f.rel, row, text_field, id_field)
