"""Dedup's write stage: a read task's kept records, copied unchanged from the scan's record file.

    kept = write_kept(WriteJob(index, records_path, out_dir, removed_path, first, docs, index_base))

The record file holds one record per line. It is read a block at a time; numpy finds the block's
newlines and `dataprep.dedup.pieces.copy_kept` the kept records' bytes, so no record is held
whole: one that spans blocks is written a block's piece at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import zstandard

from dataprep.dedup.index import part_name
from dataprep.dedup.pieces import copy_kept
from pretrainkit.files import atomic_write

BLOCK_BYTES = 1 << 20
COMPRESSION_LEVEL = 3


@dataclass(frozen=True)
class WriteJob:
    index: int
    records_path: str
    out_dir: str
    removed_path: str
    first: int  # position of the task's first document in the removed flags
    docs: int
    index_base: str


def write_kept(job: WriteJob) -> int:
    """Write the task's kept records and its index part's kept flags; returns the kept count."""
    keep = np.fromfile(job.removed_path, dtype=np.uint8, count=job.docs, offset=job.first) == 0
    record = 0  # the record the next byte read belongs to
    copied = np.empty(BLOCK_BYTES, np.uint8)
    with open(job.records_path, "rb") as records:
        with atomic_write(Path(job.out_dir) / f"{part_name(job.index)}.jsonl.zst") as raw:
            with zstandard.ZstdCompressor(level=COMPRESSION_LEVEL).stream_writer(raw, closefd=False) as out:
                while block := records.read(BLOCK_BYTES):
                    data = np.frombuffer(block, np.uint8)
                    ends = np.flatnonzero(data == ord("\n")) + 1
                    pieces = len(ends) + (len(ends) == 0 or ends[-1] < len(data))  # the last: a record's start, or none
                    flags = keep[record : record + pieces]
                    if len(flags) < pieces:
                        raise RuntimeError(f"{job.records_path}: more records than the index part's {job.docs}")
                    out.write(block if flags.all() else copied[: copy_kept(data, ends, flags, copied)])
                    record += len(ends)
    if record != job.docs:
        raise RuntimeError(f"{job.records_path}: {record} records, the index part has {job.docs}")
    with atomic_write(f"{job.index_base}.kept", durable=False) as f:
        f.write(keep.astype(np.uint8).tobytes())
    return int(keep.sum())
