"""Dedup's write stage: a read task's kept records, copied unchanged, in input order.

    kept = write_kept(WriteJob(index, task, records_path, verbatim_path, out_dir), keep, lines)

A record that is its input line verbatim (`Document.verbatim`: an uncompressed `.jsonl` line, the
common case) is copied from the input file itself, found by its line number (the index part's
`.lines`); every other record from the scan's record file, which holds only those, in order. So
the scan never writes a second copy of a corpus whose lines are already records. The documents
are taken in runs of the same source; each source is read a block at a time, numpy finds a
block's newlines and `pretrainkit.dataprep.kernels.pieces.copy_kept` copies the kept lines, so no record is held
whole: one that spans blocks is written a block's piece at a time.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import zstandard

from pretrainkit.dataprep.compressed_parts import COMPRESSION_LEVEL
from pretrainkit.dataprep.kernels.pieces import copy_kept
from pretrainkit.dataprep.readers import ReadTask
from pretrainkit.files import atomic_write
from pretrainkit.stage_layout import KEPT_SUFFIX, part_name

BLOCK_BYTES = 1 << 20


@dataclass(frozen=True)
class WriteJob:
    index: int
    task: ReadTask
    records_path: str  # the records that are not verbatim, one line each
    verbatim_path: str  # uint8 per document: 1 where the record is its input line
    out_dir: str


class _Lines:
    """The lines of a file from a byte offset on, taken in order: each either copied or passed over."""

    def __init__(self, f: BinaryIO, start: int, name: str):
        f.seek(start)
        self.f, self.name = f, name
        self.data = np.empty(0, np.uint8)
        self.ends = np.empty(0, np.int64)  # where each complete line of `data` ends
        self.at = 0  # the next byte of `data` to take
        self.next_end = 0  # the first entry of `ends` past `at`
        self.scratch = np.empty(BLOCK_BYTES, np.uint8)

    def take(self, flags: np.ndarray, out) -> None:
        """The next len(flags) lines: line i written to `out` (with its line feed) where flags[i]."""
        i = 0
        while i < len(flags):
            if self.at == len(self.data):
                block = self.f.read(BLOCK_BYTES)
                if not block:
                    raise RuntimeError(f"{self.name}: ends {len(flags) - i} lines before the index part's documents do")
                self.data = np.frombuffer(block, np.uint8)
                self.ends = np.flatnonzero(self.data == ord("\n")) + 1
                self.at = self.next_end = 0
            n = min(len(self.ends) - self.next_end, len(flags) - i)
            if n == 0:  # line i goes on in the next block: this block's piece of it
                if flags[i]:
                    out.write(self.data[self.at :])
                self.at = len(self.data)
                continue
            ends = self.ends[self.next_end : self.next_end + n]
            piece = self.data[self.at : ends[-1]]
            wanted = flags[i : i + n]
            out.write(piece if wanted.all() else self.scratch[: copy_kept(piece, ends - self.at, wanted, self.scratch)])
            self.at, self.next_end, i = int(ends[-1]), self.next_end + n, i + n

    def at_end(self) -> bool:
        return self.at == len(self.data) and not self.f.read(1)


def write_kept(job: WriteJob, keep: np.ndarray, lines: np.ndarray) -> int:
    """Write the task's records whose `keep` flag (bool, one per document of the index part) is set;
    `lines`: each document's input line (the part's `.lines`). Returns their count."""
    docs = len(keep)
    verbatim = np.fromfile(job.verbatim_path, dtype=np.uint8).astype(bool)
    if len(verbatim) != docs or len(lines) != docs:
        raise RuntimeError(
            f"{job.verbatim_path}: {len(verbatim)} flags and {len(lines)} lines for the index part's {docs} documents"
        )
    runs = [0, *(np.flatnonzero(verbatim[1:] != verbatim[:-1]) + 1).tolist(), docs] if docs else []
    with open(job.records_path, "rb") as records_file, open(job.task.file.path, "rb") as input_file:
        records = _Lines(records_file, 0, job.records_path)
        source = _Lines(input_file, job.task.start, job.task.file.path)
        next_line = job.task.first_line  # the input line `source` reads next
        with atomic_write(Path(job.out_dir) / f"{part_name(job.index)}{KEPT_SUFFIX}") as raw:
            # written as it is: its pieces are views of one reused buffer, and a megabyte or more at a time
            with zstandard.ZstdCompressor(level=COMPRESSION_LEVEL).stream_writer(raw, closefd=False) as out:
                for lo, hi in zip(runs, runs[1:]):
                    if not verbatim[lo]:
                        records.take(keep[lo:hi], out)
                        continue
                    # the run's lines, and the lines between them that are no document (rejected, blank)
                    wanted = np.zeros(lines[hi - 1] + 1 - next_line, dtype=bool)
                    wanted[lines[lo:hi] - next_line] = keep[lo:hi]
                    source.take(wanted, out)
                    next_line = int(lines[hi - 1]) + 1
            if not records.at_end():  # before the rename: no output part from a mismatched record file
                raise RuntimeError(
                    f"{job.records_path}: more records than the index part's documents that are not verbatim"
                )
    return int(keep.sum())
