"""A read task's removed paragraphs for the write stage, a window of documents at a time.

    removals = Removals([(path, first, end), ...])   # sorted runs of uint64 `ordinal << 32 | line`
    window = removals.upto(65536)                    # those of documents 0 .. 65535
    window.lines_of(ordinal)                         # [] or that document's line indices, ascending

The runs are the scan's own (`local-NNNNN.bin`) and each resolve partition's part for the task
(`pretrainkit.dataprep.paragraphs.resolve.task_runs`), each sorted. A window is read from every
run up to its end (found by a binary search of positioned reads, and one read where a run ends
within the window, as a split task's all do), so a write job holds one window's removals, 8 bytes
each, whatever the size of its read task (a compressed input file is one).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

VALUE_BYTES = 8
_LOW32 = np.uint64(0xFFFFFFFF)


class Window:
    """The removals of a window's documents, as lists: looked up once per document, where a numpy
    call each would cost more than the rest of its work. Line indices below 257 are Python's shared
    small ints, so `lines` costs about its 8-byte pointers."""

    def __init__(self, removals: np.ndarray):
        ordinals = removals >> np.uint64(32)
        starts = np.flatnonzero(np.concatenate((ordinals[:1] == ordinals[:1], ordinals[1:] != ordinals[:-1])))
        self.changed = ordinals[starts].tolist()  # the documents that lose lines, ascending
        self.bounds = [*starts.tolist(), len(removals)]
        self.lines = (removals & _LOW32).tolist()
        self.at = 0  # the next changed document's place in `changed`

    def lines_of(self, ordinal: int) -> list[int]:
        """The lines document `ordinal` loses; documents are asked for in order."""
        if self.at == len(self.changed) or self.changed[self.at] != ordinal:
            return []
        self.at += 1
        return self.lines[self.bounds[self.at - 1] : self.bounds[self.at]]

    @property
    def unread(self) -> int:
        """Documents with removals that were never asked for."""
        return len(self.changed) - self.at


class Removals:
    def __init__(self, runs: list[tuple[str, int, int]]):
        self.runs = [[Path(path), first, end] for path, first, end in runs if end > first]

    def upto(self, end_doc: int) -> Window:
        """The removals of the documents before `end_doc` not yet read, sorted."""
        key = end_doc << 32
        parts = []
        for run in self.runs:
            path, first, end = run
            cut = _first_at_least(path, first, end, key)
            if cut > first:
                parts.append(np.fromfile(path, dtype=np.uint64, count=cut - first, offset=first * VALUE_BYTES))
                run[1] = cut
        return Window(np.sort(np.concatenate(parts)) if parts else np.empty(0, np.uint64))

    @property
    def left(self) -> int:
        """Removals not yet read."""
        return sum(end - first for _, first, end in self.runs)


def _value(path: Path, at: int) -> int:
    return int(np.fromfile(path, dtype=np.uint64, count=1, offset=at * VALUE_BYTES)[0])


def _first_at_least(path: Path, first: int, end: int, key: int) -> int:
    """The first index in [first, end) of the sorted run whose value is >= key (end if none)."""
    if first == end or _value(path, end - 1) < key:
        return end
    lo, hi = first, end - 1  # the answer is in [lo, hi]
    while lo < hi:
        mid = (lo + hi) // 2
        if _value(path, mid) < key:
            lo = mid + 1
        else:
            hi = mid
    return lo
