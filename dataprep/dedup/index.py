"""The dedup index: per-document hashes that later runs can deduplicate against.

    finish_part(FinishJob(...), keep)      # its files become OUT/index/part-00003.*, kept documents only
    idx = DedupIndex.open("OUT/index")     # a finished index (meta.json present)
    read_extents(paths, which, offsets, sizes)   # many small pieces of index files, read at once

One part per read task, in input order; document `i` of part `p` has the global key
`offset(p) + i`. Files of a part (raw little-endian arrays). While a run works, its parts (in
`OUT/.work/parts/`) describe every document read; the finished index (`OUT/index/`) keeps only
what `--against` needs, for the documents the run kept, so it costs less disk than the input (its
files are the run's, moved and cut down in place):

| suffix      | content                                                       | in |
|-------------|---------------------------------------------------------------|----|
| `.bands`    | uint64 [docs, bands] LSH band hashes of the MinHash signature (not with --no-near) | run |
| `.exact`    | uint64 [docs, 2] BLAKE2b-128 of the NFC-normalized, trimmed text | both |
| `.counts`   | uint32 [docs] number of distinct shingles (0: no words)       | both |
| `.shingles` | uint32, every document's sorted unique shingle hashes         | both |
| `.ids`      | one JSON string (the document id) per line                    | both |
| `.idpos`    | uint64 [docs + 1] byte offset of each line of `.ids`          | both |
| `.lines`    | uint64 [docs] line (row) of each document in its input file   | both |
| `.heads`    | each document's url and text head, as its duplicates.jsonl row shows them (`rows.head_fragment`) | run |
| `.headpos`  | uint64 [docs + 1] byte offset of each document's piece of `.heads` | run |
| `.json`     | the part's counts and its input file (`source`); written after the arrays: marks the part whole | both |

A part's `source` is relative to the run's input root.
"""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO

import numba
import numpy as np

from pretrainkit.dataprep.dedup.minhash import HASH_SCHEME, MinHasher, band_hashes
from pretrainkit.dataprep.kernels.pieces import copy_kept
from pretrainkit.errors import UserError
from pretrainkit.files import fsync_all, release_temporary, temporary_path, write_text_atomic
from pretrainkit.stage_layout import part_name

INDEX_VERSION = (
    4  # 2: .idhash, .lines and the source of each part; 3: kept documents only, .bands for .sig; 4: no .bands
)
READ_CHUNK_DOCS = 1 << 18
COALESCE_GAP = 4096  # bytes between two extents still read by one call: about what a call costs in copying
SCRATCH_BYTES = 1 << 20
# the arrays a scan writes, and .bands with near-dedup; the finished index keeps FINISHED_SUFFIXES of them
ARRAY_SUFFIXES = (".exact", ".counts", ".shingles", ".ids", ".idpos", ".lines", ".heads", ".headpos")


def written_part_files(work_base: str, bands: int) -> list[str]:
    """The arrays of a run's part, which nothing reads once the part's outputs are written (those
    that `finish_part` did not take); its `.json`, which marks it scanned, stays."""
    return [f"{work_base}{s}" for s in ARRAY_SUFFIXES + ((".bands",) if bands else ())]


def _array(path: Path, dtype, shape: tuple[int, ...]) -> np.ndarray:
    expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
    size = path.stat().st_size if path.exists() else -1
    if size != expected:
        raise UserError(
            f"{path}: index file is missing or has {size} bytes, expected {expected}; rerun the dedup that wrote it"
        )
    if expected == 0:
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=shape)


@numba.njit(cache=True)
def _extents_in_chunk(
    chunk_counts: np.ndarray,
    lo: int,
    local: np.ndarray,
    done: int,
    running: int,
    starts: np.ndarray,
    counts: np.ndarray,
) -> tuple[int, int]:
    """`shingle_extents` over documents lo .. lo + len(chunk_counts) - 1, given the `running` sum
    of the counts before lo and the `done` documents of `local` before them."""
    for i in range(len(chunk_counts)):
        if done < len(local) and local[done] == lo + i:
            starts[done], counts[done] = running, chunk_counts[i]
            done += 1
        running += chunk_counts[i]
    return done, running


_pread = numba.types.ExternalFunction(
    "pread", numba.types.intp(numba.types.intc, numba.types.voidptr, numba.types.uintp, numba.types.int64)
)


@numba.njit(cache=True)
def _gather(fds: np.ndarray, offsets: np.ndarray, sizes: np.ndarray, out: np.ndarray, scratch: np.ndarray) -> int:
    """`read_extents` over open files; returns -1, or the first extent a read came short for."""
    pos, i, n = 0, 0, len(fds)
    while i < n:
        j, end = i + 1, offsets[i] + sizes[i]
        while (
            j < n
            and fds[j] == fds[i]
            and offsets[j] - end <= COALESCE_GAP
            and offsets[j] + sizes[j] - offsets[i] <= len(scratch)
        ):
            end = max(end, offsets[j] + sizes[j])
            j += 1
        if j == i + 1:
            if _pread(fds[i], out[pos:].ctypes.data, sizes[i], offsets[i]) != sizes[i]:
                return i
            pos += sizes[i]
        else:
            if _pread(fds[i], scratch.ctypes.data, end - offsets[i], offsets[i]) != end - offsets[i]:
                return i
            for k in range(i, j):
                at = offsets[k] - offsets[i]
                out[pos : pos + sizes[k]] = scratch[at : at + sizes[k]]
                pos += sizes[k]
        i = j
    return -1


def read_extents(paths: list[str], which: np.ndarray, offsets: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """uint8: bytes offsets[i] .. offsets[i] + sizes[i] - 1 of file paths[which[i]], one extent after
    another. The extents come sorted by (file, offset) (they may overlap): a compiled loop of
    positioned reads, one per run of extents at most `COALESCE_GAP` apart, through a small scratch
    buffer. Python does nothing per extent, and nothing is memory-mapped."""
    which, offsets, sizes = (np.asarray(a, dtype=np.int64) for a in (which, offsets, sizes))
    out = np.empty(int(sizes.sum()), np.uint8)
    used = np.flatnonzero(np.bincount(which, minlength=len(paths))) if len(which) else np.empty(0, np.int64)
    fd_of = np.full(len(paths), -1, np.int32)
    try:
        for f in used.tolist():
            fd_of[f] = os.open(paths[f], os.O_RDONLY)
        short = _gather(fd_of[which], offsets, sizes, out, np.empty(SCRATCH_BYTES, np.uint8))
    finally:
        for fd in fd_of[fd_of >= 0].tolist():
            os.close(fd)
    if short >= 0:
        raise UserError(
            f"{paths[which[short]]}: index file is shorter than the rest of its part says; "
            "rerun the dedup that wrote it"
        )
    return out


def _read_bytes(f: BinaryIO, offset: int, size: int) -> bytes:
    data = os.pread(f.fileno(), size, offset)
    if len(data) != size:
        raise UserError(f"{f.name}: index file is shorter than its counts say; rerun the dedup that wrote it")
    return data


def _read_at(f: BinaryIO, dtype, first: int, count: int) -> np.ndarray:
    """Elements first .. first + count - 1 of a raw array file, by one positioned read (no memory map:
    a process's resident memory holds what it read, not every page of the file it touched)."""
    size = np.dtype(dtype).itemsize
    return np.frombuffer(_read_bytes(f, first * size, count * size), dtype=dtype)


class IndexPart:
    """Read access to one part of an index."""

    def __init__(self, base: Path, docs: int):
        self.base, self.docs = base, docs

    @cached_property
    def exact(self) -> np.ndarray:
        return _array(Path(f"{self.base}.exact"), np.uint64, (self.docs, 2))

    @cached_property
    def counts(self) -> np.ndarray:
        return _array(Path(f"{self.base}.counts"), np.uint32, (self.docs,))

    def shingle_extents(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first shingle, shingle count) of each given document (sorted, unique), summing `.counts`
        a chunk at a time up to the last of them: nothing per document of the part is kept."""
        local = np.asarray(local, dtype=np.int64)
        starts, counts = np.empty(len(local), np.int64), np.empty(len(local), np.int64)
        running, done = 0, 0
        with open(f"{self.base}.counts", "rb") as f:
            for lo in range(0, int(local[-1]) + 1 if len(local) else 0, READ_CHUNK_DOCS):
                chunk = _read_at(f, np.uint32, lo, min(READ_CHUNK_DOCS, int(local[-1]) + 1 - lo))
                done, running = _extents_in_chunk(chunk, lo, local, done, running, starts, counts)
        return starts, counts

    def band_hashes(self, lo: int, hi: int, bands: int, rows: int) -> np.ndarray:
        """uint64 [hi - lo, bands] of documents lo .. hi - 1 (`rows`: of the signature each band hashed),
        of a run's part (its scan wrote them)."""
        return np.array(_array(Path(f"{self.base}.bands"), np.uint64, (self.docs, bands))[lo:hi])

    def band_hashes_of_sets(self, lo: int, hi: int, hasher: MinHasher, bands: int, rows: int) -> np.ndarray:
        """`band_hashes` of a finished index's part, which keeps no signatures: from the documents'
        shingle sets, hashed again (a signature is a function of the set, whatever the text)."""
        counts = np.asarray(self.counts[lo:hi])
        first = int(self.counts[:lo].sum(dtype=np.int64))
        with open(f"{self.base}.shingles", "rb") as f:
            shingles = _read_at(f, np.uint32, first, int(counts.sum(dtype=np.int64)))
        return band_hashes(hasher.signatures_of_sets(shingles, counts), bands, rows)

    @cached_property
    def source(self) -> str:
        """The part's input file, relative to its run's input root."""
        return json.loads(Path(f"{self.base}.json").read_text())["source"]

    def ids_of(self, local: list[int]) -> list[str]:
        """The ids of the given documents of this part: one read of the span of `.idpos` and `.ids`
        they lie in (at most the part's, whose size the read tasks bound)."""
        if not local:
            return []
        lo, hi = min(local), max(local) + 1
        with open(f"{self.base}.idpos", "rb") as pos_file, open(f"{self.base}.ids", "rb") as text_file:
            pos = _read_at(pos_file, np.uint64, lo, hi - lo + 1).astype(np.int64)
            text = _read_bytes(text_file, int(pos[0]), int(pos[-1] - pos[0]))
        pos -= pos[0]
        return [json.loads(text[pos[i - lo] : pos[i - lo + 1]]) for i in local]

    def locations_of(self, local: list[int]) -> list[tuple[str, int]]:
        """(input file relative to its run's input root, line) of the given documents."""
        if not local:
            return []
        lo, hi = min(local), max(local) + 1
        with open(f"{self.base}.lines", "rb") as f:
            lines = _read_at(f, np.uint64, lo, hi - lo).tolist()
        return [(self.source, lines[i - lo]) for i in local]


@dataclass(frozen=True)
class Parts:
    """A run's index parts as its jobs take them (picklable): (base, docs) of each, in key order, the
    first `old` an `--against` index's; `offsets[p]` is part p's first key, `offsets[-1]` the total."""

    described: tuple[tuple[str, int], ...]
    offsets: np.ndarray
    old: int

    @classmethod
    def of(cls, parts: list[IndexPart], old: int) -> Parts:
        offsets = np.concatenate(([0], np.cumsum([p.docs for p in parts], dtype=np.int64)))
        return cls(tuple((str(p.base), p.docs) for p in parts), offsets, old)

    @property
    def total(self) -> int:
        return int(self.offsets[-1])

    @property
    def first_new_key(self) -> int:
        return int(self.offsets[self.old])

    def open(self) -> list[IndexPart]:
        return [IndexPart(Path(b), n) for b, n in self.described]


@dataclass
class DedupIndex:
    """A set of parts with consecutive global keys; `offsets[p]` is part p's first key."""

    directory: Path
    ngram: int
    parts: list[IndexPart]

    @cached_property
    def offsets(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum([p.docs for p in self.parts], dtype=np.int64)))

    @property
    def docs(self) -> int:
        return int(self.offsets[-1])

    def locate(self, keys: np.ndarray) -> np.ndarray:
        """Part number of each global key."""
        return np.searchsorted(self.offsets, keys, side="right") - 1

    @staticmethod
    def meta(ngram: int, part_docs: list[int]) -> dict:
        return {"version": INDEX_VERSION, "hash_scheme": HASH_SCHEME, "ngram": ngram, "parts": part_docs}

    @classmethod
    def from_parts(cls, directory: Path, ngram: int, part_docs: list[int]) -> DedupIndex:
        return cls(directory, ngram, [IndexPart(directory / part_name(i), n) for i, n in enumerate(part_docs)])

    @classmethod
    def open(cls, directory: str | Path) -> DedupIndex:
        directory = Path(directory)
        meta_path = directory / "meta.json"
        if not meta_path.is_file():
            raise UserError(
                f"{directory}: not a finished dedup index (no meta.json); "
                "--against takes OUT/index of a completed `ptk dedup`"
            )
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("version") != INDEX_VERSION or meta.get("hash_scheme") != HASH_SCHEME:
                raise UserError(
                    f"{meta_path}: index version {meta.get('version')}/{meta.get('hash_scheme')} "
                    f"is not {INDEX_VERSION}/{HASH_SCHEME}; rebuild it"
                )
            ngram, part_docs = int(meta["ngram"]), [int(n) for n in meta["parts"]]
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{meta_path}: unreadable index metadata ({e})") from None
        return cls.from_parts(directory, ngram, part_docs)


@dataclass(frozen=True)
class FinishJob:
    work_base: str  # the run's part, every document read
    index_base: str  # the finished index's part
    docs: int


FINISHED_SUFFIXES = (".exact", ".counts", ".shingles", ".ids", ".idpos", ".lines")
_ROW_BYTES = {".exact": 16, ".counts": 4, ".lines": 8}


def finish_part(job: FinishJob, kept: np.ndarray) -> int:
    """Turn the run's part into the index part a later `--against` reads: the documents whose `kept`
    flag (bool, one per document of the part) is set; returns their count.

    Each scan file is renamed to a temporary of the index part and its kept rows and pieces moved
    to its front in place, then the file is cut after them: the pages the scan wrote are written
    over, where new files would need new pages for every byte (a new page costs ~10x an overwrite
    in the page cache; on a virtual machine whose host takes back free memory, ~30x). The scan's
    files of the part are gone from then on: a rerun scans the task again (`part_files_whole`)."""
    meta_path = Path(f"{job.index_base}.json")
    if meta_path.exists():  # finished by an earlier, interrupted run
        return json.loads(meta_path.read_text())["docs"]
    source = json.loads(Path(f"{job.work_base}.json").read_text())["source"]
    counts = np.asarray(IndexPart(Path(job.work_base), job.docs).counts, dtype=np.int64)  # read before .counts is cut
    with open(f"{job.work_base}.idpos", "rb") as f:
        idpos = _read_at(f, np.uint64, 0, job.docs + 1).astype(np.int64)
    temps = [temporary_path(f"{job.index_base}{s}") for s in FINISHED_SUFFIXES]
    for s, tmp in zip(FINISHED_SUFFIXES, temps):
        os.replace(f"{job.work_base}{s}", tmp)
    with contextlib.ExitStack() as stack:
        files = {s: stack.enter_context(open(tmp, "r+b")) for s, tmp in zip(FINISHED_SUFFIXES, temps)}
        rows = np.arange(1, job.docs + 1, dtype=np.int64)
        for s, width in _ROW_BYTES.items():
            _keep_in_place(files[s], width * rows, kept)
        _keep_in_place(files[".shingles"], 4 * np.cumsum(counts), kept)
        _keep_in_place(files[".ids"], idpos[1:], kept)
        kept_idpos = np.zeros(int(kept.sum()) + 1, np.uint64)
        np.cumsum(np.diff(idpos)[kept], out=kept_idpos[1:])
        os.pwrite(files[".idpos"].fileno(), kept_idpos, 0)
        os.ftruncate(files[".idpos"].fileno(), kept_idpos.nbytes)
        fsync_all(list(files.values()))
    for s, tmp in zip(FINISHED_SUFFIXES, temps):
        os.replace(tmp, f"{job.index_base}{s}")
        release_temporary(tmp)
    docs = int(kept.sum())
    write_text_atomic(meta_path, json.dumps({"docs": docs, "source": source}))
    return docs


def part_files_whole(work_base: str) -> bool:
    """Whether the run's part still has every file its write job reads (`finish_part` takes them)."""
    return all(os.path.exists(f"{work_base}{s}") for s in FINISHED_SUFFIXES)


def _keep_in_place(f: BinaryIO, ends: np.ndarray, kept: np.ndarray) -> None:
    """Leave in file `f` only the pieces whose `kept` flag is set, in order (piece i ends at byte
    `ends[i]`; the file holds `ends[-1]` bytes): a chunk of pieces is read, its kept ones copied
    together and written back at or before where the chunk began (so nothing unread is written
    over), and the file is cut after the last."""
    written = start = 0
    for lo in range(0, len(kept), READ_CHUNK_DOCS):
        hi = min(lo + READ_CHUNK_DOCS, len(kept))
        chunk = np.frombuffer(_read_bytes(f, start, int(ends[hi - 1]) - start), np.uint8)
        out = np.empty(len(chunk), np.uint8)
        n = copy_kept(chunk, ends[lo:hi] - start, kept[lo:hi], out)
        os.pwrite(f.fileno(), out[:n], written)
        written, start = written + n, int(ends[hi - 1])
    os.ftruncate(f.fileno(), written)
