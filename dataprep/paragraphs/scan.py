"""Paragraph dedup's scan stage: per read task, an entry per paragraph, in a file bucketed by hash.

    counts = scan_part(ScanJob(index, task, "text", "id", work_dir))
    runs = bucket_runs(work_dir, task_index, first_bucket, end_bucket)   # what a resolve job reads

An entry is three uint64: the paragraph's hash (`pretrainkit.dataprep.paragraphs.lines`), its
document's key (the read task's index << 32 | the document's ordinal among the task's documents,
so keys follow corpus order) and the line's index in its text. A job writes `scan-NNNNN.bin` a
chunk of about `CHUNK_ENTRIES` entries at a time, each chunk's entries grouped by bucket (the
hash's top `BUCKET_BITS` bits) and, within a bucket, in corpus order; `scan-NNNNN.bounds` says
where each chunk's buckets start (int64 [chunks, BUCKETS + 1]), so that a resolve job reads the
runs of its buckets from every file by positioned reads, in corpus order for each hash.

Before a chunk is written, the rule (`pretrainkit.dataprep.paragraphs.rule`) is applied to it
alone: the copies it finds in later documents of the chunk are removed whatever comes before, so
they go straight to `local-NNNNN.bin` (uint64 `ordinal << 32 | line`, for the write stage), and of
each paragraph only the chunk's first document's entries go on. So boilerplate in every document
puts one document's entries per chunk into its partition, not one per document. The rejected rows
go to `rejected-NNNNN.jsonl`; `scan-NNNNN.json` (the job's counts), written last, marks the job
done. A worker holds one batch of texts (`BATCH_BYTES`) and one chunk of entries.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.paragraphs.lines import paragraphs
from pretrainkit.dataprep.paragraphs.rule import later_copies
from pretrainkit.dataprep.readers import Document, ReadTask, read_task, reason_kind
from pretrainkit.files import atomic_write, write_text_atomic

BUCKET_BITS = 12
BUCKETS = 1 << BUCKET_BITS  # the most partitions a run can cut its entries into
ENTRY_BYTES = 24
CHUNK_ENTRIES = 1 << 18  # 6 MB of entries
BATCH_BYTES = 1 << 20  # of text per compiled call
MAX_DOCS_PER_TASK = 1 << 32  # the ordinal's bits in a document key
_LOW32 = np.uint64(0xFFFFFFFF)


@dataclass(frozen=True)
class ScanJob:
    index: int
    task: ReadTask
    text_field: str
    id_field: str
    work_dir: str

    def path(self, suffix: str) -> Path:
        return scan_path(self.work_dir, self.index, suffix)


def scan_path(work_dir: str | Path, index: int, suffix: str) -> Path:
    """`scan-NNNNN.bin` / `.bounds` / `.json`; `rejected-NNNNN.jsonl`, `local-NNNNN.bin` for suffix
    "rejected", "local"."""
    if suffix == "rejected":
        return Path(work_dir) / f"rejected-{index:05d}.jsonl"
    if suffix == "local":
        return Path(work_dir) / f"local-{index:05d}.bin"
    return Path(work_dir) / f"scan-{index:05d}.{suffix}"


def removal_keys(entries: np.ndarray) -> np.ndarray:
    """uint64 `ordinal << 32 | line` of entries (their document's ordinal within its read task)."""
    return ((entries[:, 1] & _LOW32) << np.uint64(32)) | entries[:, 2]


def scan_part(job: ScanJob) -> dict:
    """Scan one read task (see the module docstring); returns (and records, last) its counts."""
    done = job.path("json")
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    counts: Counter = Counter()
    reasons: Counter = Counter()
    texts: list[str] = []
    pending: list[np.ndarray] = []  # the chunk's entries, batch by batch
    chunk_bounds: list[np.ndarray] = []
    with contextlib.ExitStack() as stack:
        # Not fsynced: a rerun rescans any job whose done file (written last) is missing.
        entries_file = stack.enter_context(atomic_write(job.path("bin"), durable=False))
        local = stack.enter_context(atomic_write(job.path("local"), durable=False))
        rejected = stack.enter_context(atomic_write(job.path("rejected"), durable=False))

        def hash_batch() -> None:
            found = paragraphs(texts)
            first = (job.index << 32) + counts["docs"]
            batch = np.empty((len(found.hashes), 3), np.uint64)
            batch[:, 0] = found.hashes
            batch[:, 1] = found.docs.astype(np.uint64) + np.uint64(first)
            batch[:, 2] = found.lines
            pending.append(batch)
            counts["docs"] += len(texts)
            counts["text_bytes"] += int(found.text_bytes.sum())
            counts["entries"] += len(batch)
            texts.clear()

        def write_chunk() -> None:
            entries = np.concatenate(pending)
            pending.clear()
            gone = later_copies(entries)
            local.write(removal_keys(entries[gone]).tobytes())
            counts["local_removed"] += int(gone.sum())
            entries = entries[~gone]
            buckets = (entries[:, 0] >> np.uint64(64 - BUCKET_BITS)).astype(np.uint16)
            order = np.argsort(buckets, kind="stable")  # a radix sort: corpus order kept within a bucket
            entries_file.write(np.ascontiguousarray(entries[order]).tobytes())
            bounds = np.zeros(BUCKETS + 1, np.int64)
            np.cumsum(np.bincount(buckets, minlength=BUCKETS), out=bounds[1:])
            written = chunk_bounds[-1][-1] if chunk_bounds else 0
            chunk_bounds.append(written + bounds)

        batch_bytes = 0
        for item in read_task(job.task, job.text_field, job.id_field, records=False):
            if type(item) is not Document:
                rejected.write(json.dumps(item.to_json(), ensure_ascii=False).encode("utf-8") + b"\n")
                counts["rejected"] += 1
                reasons[reason_kind(item.reason)] += 1
                continue
            texts.append(item.text)
            batch_bytes += len(item.text)
            if batch_bytes >= BATCH_BYTES:
                hash_batch()
                batch_bytes = 0
                if sum(len(p) for p in pending) >= CHUNK_ENTRIES:
                    write_chunk()
        if texts:
            hash_batch()
        if pending:
            write_chunk()
    if counts["docs"] >= MAX_DOCS_PER_TASK:
        raise RuntimeError(f"{job.task.file.path}: {counts['docs']:,} documents in one read task")
    bounds = np.stack(chunk_bounds) if chunk_bounds else np.zeros((0, BUCKETS + 1), np.int64)
    with atomic_write(job.path("bounds"), durable=False) as f:
        f.write(bounds.tobytes())
    result = {k: counts[k] for k in ("docs", "rejected", "entries", "local_removed", "text_bytes")}
    result["rejected_reasons"] = dict(reasons)
    write_text_atomic(done, json.dumps(result))
    return result


def bucket_runs(work_dir: str | Path, index: int, first_bucket: int, end_bucket: int) -> list[tuple[int, int]]:
    """(first entry, end) in task `index`'s entry file of buckets [first_bucket, end_bucket), per chunk."""
    bounds = np.fromfile(scan_path(work_dir, index, "bounds"), dtype=np.int64).reshape(-1, BUCKETS + 1)
    return [(int(lo), int(hi)) for lo, hi in zip(bounds[:, first_bucket], bounds[:, end_bucket]) if hi > lo]


def read_entries(work_dir: str | Path, index: int, runs: list[tuple[int, int]]) -> np.ndarray:
    """The entries of `runs` of task `index`'s file, in order, as uint64 [n, 3]."""
    entries = np.empty((sum(hi - lo for lo, hi in runs), 3), np.uint64)
    at = 0
    with open(scan_path(work_dir, index, "bin"), "rb") as f:
        for lo, hi in runs:
            f.seek(lo * ENTRY_BYTES)
            if f.readinto(memoryview(entries[at : at + hi - lo]).cast("B")) != (hi - lo) * ENTRY_BYTES:
                raise RuntimeError(f"{f.name}: shorter than its bounds say")
            at += hi - lo
    return entries
