"""The dedup index: per-document hashes that later runs can deduplicate against.

    part = scan_part(ScanJob(...))          # read one input task, write OUT/.work/parts/part-00003.*
    finish_part(FinishJob(...))            # its kept documents into OUT/index/part-00003.*
    idx = DedupIndex.open("OUT/index")     # a finished index (meta.json present)

One part per read task, in input order; document `i` of part `p` has the global key
`offset(p) + i`. Files of a part (raw little-endian arrays). While a run works, its parts (in
`OUT/.work/parts/`) describe every document read; the finished index (`OUT/index/`) keeps only
what `--against` needs, for the documents the run kept, so it costs less disk than the input:

| suffix      | content                                                       | in |
|-------------|---------------------------------------------------------------|----|
| `.sig`      | uint32 [docs, num_perm] MinHash signature                     | run |
| `.bands`    | uint64 [docs, bands] LSH band hashes of the signature         | index |
| `.exact`    | uint64 [docs, 2] BLAKE2b-128 of the NFC-normalized, trimmed text | both |
| `.counts`   | uint32 [docs] number of distinct shingles (0: no words)       | both |
| `.shingles` | uint32, every document's sorted unique shingle hashes         | both |
| `.ids`      | one JSON string (the document id) per line                    | both |
| `.idpos`    | uint64 [docs + 1] byte offset of each line of `.ids`          | both |
| `.idhash`   | uint64 [docs, 2] BLAKE2b-128 of the id (finds repeated ids)   | run |
| `.lines`    | uint64 [docs] line (row) of each document in its input file   | both |
| `.kept`     | uint8 [docs], 1 where the run kept the document               | run |
| `.json`     | the part's counts and its input file (`source`, relative to the run's input root); written after the arrays: marks the part whole | both |

Memory while scanning is one batch (~256 KB of text), whatever the size of the input. A
document over `LARGE_TEXT_CHARS` is a batch of its own: its record is written (and freed) first,
then its text is normalized and hashed a piece at a time (`normalized_pieces`), so beyond the
text itself a worker holds the shingle set (twice, while merging) and one piece.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np
import zstandard

from dataprep.dedup.minhash import HASH_SCHEME, MinHasher, band_hashes, near_normal_bytes
from dataprep.readers import Document, ReadTask, read_task
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic

INDEX_VERSION = 3  # 2: .idhash, .lines and the source of each part; 3: kept documents only, .bands for .sig
BATCH_BYTES = 256 << 10  # small batches keep the vectorized hashing inside the CPU caches
BATCH_DOCS = 4096
LARGE_TEXT_CHARS = 1 << 20
READ_CHUNK_DOCS = 1 << 18
ARRAY_SUFFIXES = (".sig", ".exact", ".counts", ".shingles", ".ids", ".idpos", ".idhash", ".lines")


def part_name(index: int) -> str:
    return f"part-{index:05d}"


_ASCII_WHITESPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # exactly what str.strip() removes from ASCII text


def exact_hash(text: str) -> bytes:
    """BLAKE2b-128 of the NFC-normalized, trimmed text."""
    return hashlib.blake2b(unicodedata.normalize("NFC", text).strip().encode("utf-8"), digest_size=16).digest()


def hashes_input(text: str) -> tuple[bytes, bytes]:
    """(exact hash, bytes for near-dup hashing) of one document. ASCII text, the common case, is
    encoded once and needs no normalization (NFC leaves it unchanged)."""
    if text.isascii():
        raw = text.encode("ascii")
        return hashlib.blake2b(raw.strip(_ASCII_WHITESPACE), digest_size=16).digest(), raw
    return exact_hash(text), near_normal_bytes(text)


_PIECE_CUT = re.compile("[ \n]")


def normalized_pieces(text: str, piece_chars: int, exact) -> Iterator[bytes]:
    """As `hashes_input`, a piece at a time: the near-dup bytes of pieces of about `piece_chars`
    cut before an ASCII space or newline (a character no NFC/NFKD composition or lowercasing context
    looks across, so the pieces normalize as the whole does, and no word spans two), while `exact`
    (a BLAKE2b-128) takes in the exact hash's input; its digest is the exact hash once every piece
    has been taken."""
    pending, started = "", False  # whitespace held back until text follows it (strip() of the whole)
    start = 0
    while start < len(text):
        cut = _PIECE_CUT.search(text, start + piece_chars) if len(text) - start > piece_chars else None
        piece = text[start : cut.start() if cut else len(text)]
        start += len(piece)
        yield near_normal_bytes(piece)
        nfc = unicodedata.normalize("NFC", piece)
        if not started:
            nfc = nfc.lstrip()
            started = bool(nfc)
        body = nfc.rstrip()
        if body:
            exact.update(pending.encode("utf-8"))
            exact.update(body.encode("utf-8"))
            pending = nfc[len(body) :]
        else:
            pending += nfc


def id_line(doc_id: str) -> bytes:
    """The id as a JSON string and a newline (json.dumps only where escaping may be needed)."""
    if doc_id.isascii() and doc_id.isprintable() and '"' not in doc_id and "\\" not in doc_id:
        return f'"{doc_id}"\n'.encode("ascii")
    return json.dumps(doc_id, ensure_ascii=False).encode("utf-8") + b"\n"


@dataclass(frozen=True)
class ScanJob:
    index: int
    task: ReadTask
    index_dir: str
    rejected_path: str
    records_path: str  # every document's record, one line each, for the write stage
    num_perm: int
    ngram: int
    text_field: str
    id_field: str


def scan_part(job: ScanJob) -> dict:
    """Read one task and write its index part and rejected rows; returns the part's counts."""
    meta_path = Path(job.index_dir) / f"{part_name(job.index)}.json"
    if meta_path.exists():  # finished by an earlier, interrupted run
        return json.loads(meta_path.read_text())
    hasher = MinHasher(job.num_perm, job.ngram)
    base = Path(job.index_dir) / part_name(job.index)
    docs = rejected = 0
    with contextlib.ExitStack() as stack:
        # Not fsynced: a rerun rewrites any part whose .json (written last) is missing.
        out = {s: stack.enter_context(atomic_write(f"{base}{s}", "wb", durable=False)) for s in ARRAY_SUFFIXES}
        rej = stack.enter_context(atomic_write(job.rejected_path, "w", durable=False, encoding="utf-8"))
        records_file = stack.enter_context(atomic_write(job.records_path, "wb", durable=False))
        records = stack.enter_context(zstandard.ZstdCompressor(level=1).stream_writer(records_file, closefd=False))
        batch: list[Document] = []
        batch_bytes = 0
        id_end = 0
        out[".idpos"].write(np.zeros(1, np.uint64).tobytes())

        def flush() -> None:
            nonlocal id_end
            records.write(b"\n".join(d.record for d in batch))  # no copy of a batch of one large document
            records.write(b"\n")
            for d in batch:  # written: a large document's line is freed before its text is hashed
                d.record = b""
            if len(batch) == 1 and len(batch[0].text) > LARGE_TEXT_CHARS:
                digest = hashlib.blake2b(digest_size=16)
                sb = hasher.large_document(normalized_pieces(batch[0].text, LARGE_TEXT_CHARS, digest))
                exact = [digest.digest()]
            else:
                exact, normalized = zip(*[hashes_input(d.text) for d in batch])
                sb = hasher.signatures_of_normalized(list(normalized))
            out[".sig"].write(sb.signatures)  # arrays are written as they lie in memory: no copies
            out[".counts"].write(sb.shingle_counts)
            out[".shingles"].write(sb.shingles)
            out[".exact"].write(b"".join(exact))
            id_lines = [id_line(d.id) for d in batch]
            out[".ids"].write(b"".join(id_lines))
            positions = np.uint64(id_end) + np.cumsum([len(line) for line in id_lines], dtype=np.uint64)
            out[".idpos"].write(positions.tobytes())
            id_end = int(positions[-1])
            out[".idhash"].write(b"".join(hashlib.blake2b(line, digest_size=16).digest() for line in id_lines))
            out[".lines"].write(np.array([d.line for d in batch], dtype=np.uint64).tobytes())

        for item in read_task(job.task, job.text_field, job.id_field):
            if isinstance(item, Document):
                if len(item.text) >= BATCH_BYTES and batch:  # a large document is hashed alone, in pieces
                    flush()
                    batch, batch_bytes = [], 0
                batch.append(item)
                batch_bytes += len(item.text)
                docs += 1
                if batch_bytes >= BATCH_BYTES or len(batch) >= BATCH_DOCS:
                    flush()
                    batch, batch_bytes = [], 0
            else:
                rej.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
                rejected += 1
        if batch:
            flush()
    meta = {"docs": docs, "rejected": rejected, "bytes": job.task.nbytes, "source": job.task.file.rel}
    write_text_atomic(meta_path, json.dumps(meta))
    return meta


def _array(path: Path, dtype, shape: tuple[int, ...]) -> np.ndarray:
    expected = int(np.prod(shape)) * np.dtype(dtype).itemsize
    size = path.stat().st_size if path.exists() else -1
    if size != expected:
        raise UserError(f"{path}: index file is missing or has {size} bytes, expected {expected}; rerun the dedup that wrote it")
    if expected == 0:
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=shape)


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

    def __init__(self, base: Path, docs: int, num_perm: int):
        self.base, self.docs, self.num_perm = base, docs, num_perm

    @cached_property
    def signatures(self) -> np.ndarray:
        return _array(Path(f"{self.base}.sig"), np.uint32, (self.docs, self.num_perm))

    @cached_property
    def exact(self) -> np.ndarray:
        return _array(Path(f"{self.base}.exact"), np.uint64, (self.docs, 2))

    @cached_property
    def id_hashes(self) -> np.ndarray:
        return _array(Path(f"{self.base}.idhash"), np.uint64, (self.docs, 2))

    @cached_property
    def counts(self) -> np.ndarray:
        return _array(Path(f"{self.base}.counts"), np.uint32, (self.docs,))

    def shingle_extents(self, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(first shingle, shingle count) of each given document (sorted, unique), from prefix sums
        over `.counts` computed a chunk at a time: nothing per document of the part is kept."""
        starts, counts = np.empty(len(local), np.int64), np.empty(len(local), np.int64)
        running, done = 0, 0
        with open(f"{self.base}.counts", "rb") as f:
            for lo in range(0, self.docs, READ_CHUNK_DOCS):
                if done == len(local):
                    break
                c = _read_at(f, np.uint32, lo, min(READ_CHUNK_DOCS, self.docs - lo)).astype(np.int64)
                end = done + int(np.searchsorted(local[done:], lo + len(c)))
                at = local[done:end] - lo
                ends = np.cumsum(c)
                starts[done:end], counts[done:end] = running + ends[at] - c[at], c[at]
                running += int(ends[-1])
                done = end
        return starts, counts

    def kept(self) -> np.ndarray:
        return _array(Path(f"{self.base}.kept"), np.uint8, (self.docs,)).astype(bool)

    def band_hashes(self, lo: int, hi: int, bands: int, rows: int) -> np.ndarray:
        """uint64 [hi - lo, bands] of documents lo .. hi - 1: from the signatures while the run is under
        way, from `.bands` in a finished index (which keeps no signatures)."""
        if Path(f"{self.base}.sig").exists():
            return band_hashes(np.asarray(self.signatures[lo:hi]), bands, rows)
        return np.array(_array(Path(f"{self.base}.bands"), np.uint64, (self.docs, bands))[lo:hi])

    def id_texts(self, local: np.ndarray) -> list[bytes]:
        """The ids of the given documents of this part as `.ids` holds them: JSON strings in UTF-8
        (`id_line`, without its newline), read by one read of the span of `.idpos` and `.ids` they
        lie in (at most the part's, whose size the read tasks bound)."""
        local = np.asarray(local, dtype=np.int64)
        if len(local) == 0:
            return []
        lo, hi = int(local.min()), int(local.max()) + 1
        with open(f"{self.base}.idpos", "rb") as pos_file, open(f"{self.base}.ids", "rb") as text_file:
            pos = _read_at(pos_file, np.uint64, lo, hi - lo + 1).astype(np.int64)
            text = _read_bytes(text_file, int(pos[0]), int(pos[-1] - pos[0]))
        pos -= pos[0]
        return [text[b:e] for b, e in zip(pos[local - lo].tolist(), (pos[local - lo + 1] - 1).tolist())]

    def ids_of(self, local: list[int]) -> list[str]:
        return [json.loads(text) for text in self.id_texts(local)]

    @cached_property
    def source(self) -> str:
        """The part's input file, relative to its run's input root."""
        return json.loads(Path(f"{self.base}.json").read_text())["source"]

    def lines_of(self, local: np.ndarray) -> np.ndarray:
        """uint64 line (row) of each given document in its input file."""
        local = np.asarray(local, dtype=np.int64)
        if len(local) == 0:
            return np.empty(0, np.uint64)
        lo, hi = int(local.min()), int(local.max()) + 1
        with open(f"{self.base}.lines", "rb") as f:
            return _read_at(f, np.uint64, lo, hi - lo)[local - lo]

    def locations_of(self, local: list[int]) -> list[tuple[str, int]]:
        """(input file relative to its run's input root, line) of the given documents."""
        return [(self.source, line) for line in self.lines_of(local).tolist()]


@dataclass
class DedupIndex:
    """A set of parts with consecutive global keys; `offsets[p]` is part p's first key."""

    directory: Path
    num_perm: int
    ngram: int
    parts: list[IndexPart]
    lsh: tuple[int, int] = (0, 0)  # (bands, rows) of `.bands`; (0, 0): built with --no-near

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
    def meta(num_perm: int, ngram: int, part_docs: list[int], lsh: tuple[int, int]) -> dict:
        return {
            "version": INDEX_VERSION,
            "hash_scheme": HASH_SCHEME,
            "num_perm": num_perm,
            "ngram": ngram,
            "lsh": {"bands": lsh[0], "rows": lsh[1]},
            "parts": part_docs,
        }

    @classmethod
    def from_parts(cls, directory: Path, num_perm: int, ngram: int, part_docs: list[int], lsh: tuple[int, int] = (0, 0)) -> "DedupIndex":
        parts = [IndexPart(directory / part_name(i), n, num_perm) for i, n in enumerate(part_docs)]
        return cls(directory, num_perm, ngram, parts, lsh)

    @classmethod
    def open(cls, directory: str | Path) -> "DedupIndex":
        directory = Path(directory)
        meta_path = directory / "meta.json"
        if not meta_path.is_file():
            raise UserError(f"{directory}: not a finished dedup index (no meta.json); point --against at OUT/index of a completed `ptk dedup`")
        try:
            meta = json.loads(meta_path.read_text())
            if meta.get("version") != INDEX_VERSION or meta.get("hash_scheme") != HASH_SCHEME:
                raise UserError(f"{meta_path}: index version {meta.get('version')}/{meta.get('hash_scheme')} is not {INDEX_VERSION}/{HASH_SCHEME}; rebuild it")
            num_perm, ngram, part_docs = int(meta["num_perm"]), int(meta["ngram"]), [int(n) for n in meta["parts"]]
            lsh = (int(meta["lsh"]["bands"]), int(meta["lsh"]["rows"]))
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{meta_path}: unreadable index metadata ({e})") from None
        return cls.from_parts(directory, num_perm, ngram, part_docs, lsh)


@dataclass(frozen=True)
class FinishJob:
    work_base: str  # the run's part, every document read
    index_base: str  # the finished index's part
    docs: int
    num_perm: int
    bands: int
    rows: int


_FINISHED_SUFFIXES = (".exact", ".counts", ".shingles", ".ids", ".idpos", ".lines", ".bands")


def finish_part(job: FinishJob) -> int:
    """Write the index part a later `--against` reads: the kept documents only, with their band
    hashes instead of signatures, a chunk of documents at a time; returns its document count."""
    meta_path = Path(f"{job.index_base}.json")
    if meta_path.exists():  # finished by an earlier, interrupted run
        return json.loads(meta_path.read_text())["docs"]
    src = IndexPart(Path(job.work_base), job.docs, job.num_perm)
    kept = src.kept()
    id_end = 0
    with contextlib.ExitStack() as stack:
        out = {s: stack.enter_context(atomic_write(f"{job.index_base}{s}", "wb")) for s in _FINISHED_SUFFIXES if s != ".bands" or job.bands}
        shingles = stack.enter_context(open(f"{job.work_base}.shingles", "rb"))
        ids = stack.enter_context(open(f"{job.work_base}.ids", "rb"))
        lines = stack.enter_context(open(f"{job.work_base}.lines", "rb"))
        idpos = stack.enter_context(open(f"{job.work_base}.idpos", "rb"))
        out[".idpos"].write(np.zeros(1, np.uint64).tobytes())
        first_shingle = 0
        for lo in range(0, job.docs, READ_CHUNK_DOCS):
            hi = min(lo + READ_CHUNK_DOCS, job.docs)
            keep = kept[lo:hi]
            counts = np.asarray(src.counts[lo:hi])
            out[".exact"].write(np.asarray(src.exact[lo:hi])[keep].tobytes())
            out[".counts"].write(counts[keep].tobytes())
            chunk_shingles = _read_at(shingles, np.uint32, first_shingle, int(counts.sum(dtype=np.int64)))
            out[".shingles"].write(chunk_shingles[np.repeat(keep, counts)].tobytes())
            first_shingle += len(chunk_shingles)
            pos = _read_at(idpos, np.uint64, lo, hi - lo + 1).astype(np.int64)
            text = np.frombuffer(_read_bytes(ids, int(pos[0]), int(pos[-1] - pos[0])), dtype=np.uint8)
            line_lengths = np.diff(pos)
            out[".ids"].write(text[np.repeat(keep, line_lengths)].tobytes())
            out[".idpos"].write((id_end + np.cumsum(line_lengths[keep])).astype(np.uint64).tobytes())
            id_end += int(line_lengths[keep].sum())
            out[".lines"].write(_read_at(lines, np.uint64, lo, hi - lo)[keep].tobytes())
            if job.bands:
                out[".bands"].write(src.band_hashes(lo, hi, job.bands, job.rows)[keep].tobytes())
    docs = int(kept.sum())
    source = json.loads(Path(f"{job.work_base}.json").read_text())["source"]
    write_text_atomic(meta_path, json.dumps({"docs": docs, "source": source}))
    return docs
