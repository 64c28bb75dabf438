"""The rows a filter job writes: a kept record with what the steps changed and added, a removed
document's row.

    line = kept_record(document, doc, "text")    # the input record's bytes where nothing changed
    line = removed_row(document, removal, doc)   # {"id", "source", "line", "filter", "value", "threshold",
                                                 #  ..., "url", "text_head"}
    fields = record_object(document)             # the input record as a dict

A kept record whose text the steps changed (C4's dropped lines, PII redaction) or to which they
added fields (`lang`, `lang_score`, `pii`) is parsed again and written compactly by orjson, its
other fields as they were; json takes the few records orjson cannot read or write (NaN, integers
over 64 bits, lone surrogates), in its own spacing, so a record's bytes depend on the record only.
"""

from __future__ import annotations

import json

import orjson

from pretrainkit.dataprep.filter.rules import Doc, Removal
from pretrainkit.dataprep.readers import Document, described


def kept_record(document: Document, doc: Doc, text_field: str) -> bytes:
    if doc.text == document.text and not doc.fields:
        return document.record
    obj = record_object(document)
    if doc.text != document.text:
        obj[text_field] = doc.text
    obj.update(doc.fields)
    try:
        return orjson.dumps(obj)
    except TypeError:
        return json.dumps(obj, ensure_ascii=False).encode("utf-8", "backslashreplace")


def record_object(document: Document) -> dict:
    """The document's input record, parsed (by json where orjson cannot read it)."""
    try:
        return orjson.loads(document.record)
    except orjson.JSONDecodeError:
        return json.loads(document.record)


def removed_row(document: Document, removal: Removal, doc: Doc) -> bytes:
    row = {
        "id": document.id,
        "source": document.source,
        "line": document.line,
        "filter": removal.filter,
        "value": removal.value,
        "threshold": removal.threshold,
    }
    if "lang" in doc.fields:  # the language found, where a language step ran before the removal
        row["lang"], row["lang_score"] = doc.fields["lang"], doc.fields["lang_score"]
    row |= described(document)  # url and text_head: the text as it entered the stage
    return orjson.dumps(row) + b"\n"
