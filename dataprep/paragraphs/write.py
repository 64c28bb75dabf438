"""Paragraph dedup's write stage: per read task, its documents without their removed paragraphs.

    job = WriteJob(index, task, "text", "id", min_length, languages, out_dir, work_dir, resolve_dir, partitions)
    counts = write_part(job)

A job reads its task's removed paragraphs, those the scan found alone and those of every resolve
partition, a window of `WINDOW_DOCS` documents at a time
(`pretrainkit.dataprep.paragraphs.removals`: 8 bytes each), reads the task's records again and
writes, in input order, each kept record into `part-NNNNN.jsonl.zst`: a document that lost no
paragraph as its input record, one that did with its text field replaced by the lines left (joined
by "\\n" as they stood) and every other field as `ptk filter` writes a changed record
(`pretrainkit.dataprep.filter.records`). A document that lost a paragraph and whose text is
left shorter than `min_length` characters (stripped: `ptk filter`'s `min_length` step measures it
so) is removed instead, its row in `removed-NNNNN.jsonl` naming `paragraphs.min_length`, the length
left and the threshold. One long enough has its language identified again on the text left
(`pretrainkit.dataprep.paragraphs.relabel`): its `lang` label replaced, and where `languages` is
given, removed as `paragraphs.languages` when in none of them. `write-NNNNN.json` (the counts),
written last, marks the job done.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.compressed_parts import compressed_part
from pretrainkit.dataprep.filter.length import MinLength, MinLengthSettings
from pretrainkit.dataprep.filter.records import kept_record, removed_row
from pretrainkit.dataprep.filter.rules import Doc, Removal
from pretrainkit.dataprep.paragraphs.relabel import LANGUAGES_REASON, Relabel
from pretrainkit.dataprep.paragraphs.removals import VALUE_BYTES, Removals, Window
from pretrainkit.dataprep.paragraphs.resolve import task_runs
from pretrainkit.dataprep.paragraphs.scan import scan_path
from pretrainkit.dataprep.readers import Document, ReadTask, read_task
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.stage_layout import KEPT_SUFFIX, part_name

WINDOW_DOCS = 1 << 16  # documents whose removals a job holds at a time
MIN_LENGTH_REASON = "paragraphs.min_length"
REASONS = (MIN_LENGTH_REASON, LANGUAGES_REASON)


@dataclass(frozen=True)
class WriteJob:
    index: int
    task: ReadTask
    text_field: str
    id_field: str
    min_length: int
    languages: list[str] | None
    out_dir: str
    work_dir: str
    resolve_dir: str
    partitions: int

    def path(self, kind: str) -> Path:
        return Path(self.work_dir) / f"{kind}-{self.index:05d}.{'json' if kind == 'write' else 'jsonl'}"


def write_part(job: WriteJob) -> dict:
    """Write one read task's kept records and removed rows (see the module docstring)."""
    done = job.path("write")
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    local = scan_path(job.work_dir, job.index, "local")
    removals = Removals(
        [(str(local), 0, local.stat().st_size // VALUE_BYTES), *task_runs(job.resolve_dir, job.partitions, job.index)]
    )
    window, window_end = Window(np.empty(0, np.uint64)), 0
    min_length = MinLength(MinLengthSettings(min_chars=job.min_length))
    relabel = Relabel(job.languages)
    counts: Counter = Counter()
    with contextlib.ExitStack() as stack:
        removed_rows = stack.enter_context(atomic_write(job.path("removed"), durable=False))
        raw = stack.enter_context(atomic_write(Path(job.out_dir) / f"{part_name(job.index)}{KEPT_SUFFIX}"))
        kept = stack.enter_context(compressed_part(raw))
        documents = (i for i in read_task(job.task, job.text_field, job.id_field) if type(i) is Document)
        for ordinal, item in enumerate(documents):  # the rejected rows are the scan's
            size = len(item.text.encode("utf-8", "surrogatepass"))
            counts["docs"] += 1
            counts["text_bytes"] += size
            record, left = item.record, size
            if ordinal == window_end:
                _check_applied(window, None, job)
                window_end += WINDOW_DOCS
                window = removals.upto(window_end)
            lines = window.lines_of(ordinal)
            if lines:
                doc = Doc(_without(item.text, lines, item))
                counts["paragraphs_removed"] += len(lines)
                counts["docs_changed"] += 1
                short = min_length.check(doc)
                if short is None:
                    removal = relabel.check(item, doc)  # the language of the text left
                else:
                    removal = Removal(MIN_LENGTH_REASON, short.value, short.threshold)
                if removal is not None:
                    removed_rows.write(removed_row(item, removal, doc))
                    counts[f"removed {removal.filter}"] += 1
                    counts[f"removed_bytes {removal.filter}"] += size
                    continue
                record, left = kept_record(item, doc, job.text_field), len(doc.text.encode("utf-8", "surrogatepass"))
            kept.write(record + b"\n")
            counts["kept"] += 1
            counts["kept_input_bytes"] += size
            counts["output_bytes"] += left
        _check_applied(window, removals, job)  # before the part is published
    result = {
        **{
            k: counts[k]
            for k in (
                "docs",
                "kept",
                "text_bytes",
                "kept_input_bytes",
                "output_bytes",
                "paragraphs_removed",
                "docs_changed",
            )
        },
        "removed": {reason: [counts[f"removed {reason}"], counts[f"removed_bytes {reason}"]] for reason in REASONS},
        "relabelled": relabel.relabelled,
    }
    write_text_atomic(done, json.dumps(result))
    return result


def _check_applied(window: Window, removals: Removals | None, job: WriteJob) -> None:
    """A removal of a document the job did not read means the input is not what the scan read."""
    if window.unread or (removals is not None and removals.left):
        raise RuntimeError(f"{job.task.file.path}: removed paragraphs of documents not read (the input changed?)")


def _without(text: str, lines: list[int], document: Document) -> str:
    """`text` without its lines of these indices (ascending), the rest joined as they stood."""
    kept = text.split("\n")
    if lines[-1] >= len(kept):
        raise RuntimeError(f"{document.source}:{document.line}: no line {lines[-1]} to remove (the input changed?)")
    gone = set(lines)
    return "\n".join(line for i, line in enumerate(kept) if i not in gone)
