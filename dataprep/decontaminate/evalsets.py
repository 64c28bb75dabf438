"""Evaluation sets read into items: the text to test against, and what names the item.

    for item in read_eval_file("mmlu.jsonl", fields=("question", "choices"), id_field="id"):
        item.text, item.eval_id, item.line

Formats, by suffix (any letter case):
- `.jsonl`, `.jsonl.gz`, `.jsonl.zst`: one JSON object per line (blank lines are no items);
- `.parquet`: one row per item;
- `.txt`: one item per non-blank line (a list of questions or passages; a whole document as one
  item is a JSONL record).
The item's text is its `fields`, in the order given, joined by newlines: each a string or a list of
strings (a question's choices, joined by newlines too); a dotted name reaches into an object, so
`--eval-field question --eval-field choices.text` reads ARC's question and the texts of its
choices. Its id is the `id_field` (a string or integer), else `FILE:LINE` (FILE as given, LINE the
line or Parquet row, from 1). Anything else is a one-line `UserError` naming file, line and field:
an eval set is small and must be read whole, so no item is ever dropped unsaid.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson

from pretrainkit.dataprep.readers import BOM, SUFFIXES, file_lines, input_format, json_kind
from pretrainkit.errors import UserError, quoted
from pretrainkit.remote.staging import shown


@dataclass(frozen=True)
class EvalItem:
    eval_id: str
    line: int
    text: str


def check_eval_file(path: str) -> None:
    """A UserError unless `path` is a readable file of an evaluation set format."""
    if Path(path).is_dir():
        raise UserError(f"{path}: a directory; --eval takes evaluation set files")
    if input_format(Path(path).name) is None:
        raise UserError(f"{path}: unsupported evaluation set format (expected {', '.join(SUFFIXES)})")
    if not Path(path).is_file():
        raise UserError(f"{path}: no such evaluation set file")
    if not os.access(path, os.R_OK):
        raise UserError(f"{path}: evaluation set file is not readable")


def read_eval_file(path: str, fields: tuple[str, ...], id_field: str) -> Iterator[EvalItem]:
    check_eval_file(path)
    fmt = input_format(Path(path).name)
    if fmt == ".txt":
        yield from _text_items(path)
    elif fmt == ".parquet":
        yield from _parquet_items(path, fields, id_field)
    else:
        yield from _jsonl_items(path, fields, id_field)


def _decoded(path: str, number: int, line: bytes) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{path}:{number}: invalid UTF-8 at byte {e.start}") from None


def _text_items(path: str) -> Iterator[EvalItem]:
    try:
        data = Path(path).read_bytes()
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror or e}") from None
    for number, line in enumerate(data.removeprefix(BOM).split(b"\n"), 1):
        text = _decoded(path, number, line).rstrip("\r")
        if text.strip():
            yield EvalItem(f"{shown(path)}:{number}", number, text)  # a fetched file by its URL


def _jsonl_items(path: str, fields: tuple[str, ...], id_field: str) -> Iterator[EvalItem]:
    for number, line in enumerate(file_lines(path), 1):
        if not line.strip():
            continue
        try:
            obj = orjson.loads(line)
        except orjson.JSONDecodeError:
            try:
                obj = json.loads(_decoded(path, number, line))
            except json.JSONDecodeError as e:
                raise UserError(f"{path}:{number}: malformed JSON: {e.msg} at column {e.colno}") from None
        if not isinstance(obj, dict):
            raise UserError(f"{path}:{number}: record is a JSON {type(obj).__name__}, not an object")
        yield _item(obj, path, number, fields, id_field)


def _parquet_items(path: str, fields: tuple[str, ...], id_field: str) -> Iterator[EvalItem]:
    import pyarrow.parquet as pq

    try:
        pf = pq.ParquetFile(path)
        row = 0
        for batch in pf.iter_batches(batch_size=4096):
            for obj in batch.to_pylist():
                row += 1
                yield _item(obj, path, row, fields, id_field)
    except UserError:
        raise
    except Exception as e:  # pyarrow raises several unrelated types for unreadable files
        raise UserError(f"{path}: not a readable Parquet file: {e}") from None


def _item(obj: dict, path: str, number: int, fields: tuple[str, ...], id_field: str) -> EvalItem:
    texts = [_field_text(obj, path, number, field) for field in fields]
    eval_id = obj.get(id_field)
    if eval_id is None or eval_id == "":
        eval_id = f"{shown(path)}:{number}"
    elif isinstance(eval_id, bool) or not isinstance(eval_id, (str, int)):
        raise UserError(
            f"{path}:{number}: id field '{id_field}' is a {type(eval_id).__name__}, not a string or integer"
        )
    return EvalItem(str(eval_id), number, "\n".join(texts))


def _field_text(obj: dict, path: str, number: int, field: str) -> str:
    """The field's text: a string, or a list of strings joined by newlines; a dotted name reaches into objects."""
    value: object = obj
    for key in [field] if field in obj else field.split("."):
        if not isinstance(value, dict) or key not in value:
            names = ", ".join(quoted(k, 40) for k in list(obj)[:8]) or "none"
            raise UserError(f"{path}:{number}: no field '{field}' (fields: {names}); choose it with --eval-field")
        value = value[key]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(value)
    if not isinstance(value, str):
        raise UserError(f"{path}:{number}: field '{field}' is {json_kind(value)}, not a string or list of strings")
    return value
