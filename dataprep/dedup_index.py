"""The dedup index: per-document hashes that later runs can deduplicate against.

    part = scan_part(ScanJob(...))          # read one input task, write index/part-00003.*
    idx = DedupIndex.open("OUT/index")     # a finished index (meta.json present)
    idx.part(3).signatures                 # uint32 [docs, num_perm], memory-mapped

One part per read task, in input order; document `i` of part `p` has the global key
`offset(p) + i`. Files of a part (`index/part-NNNNN.*`, raw little-endian arrays):

| suffix      | content                                                       |
|-------------|---------------------------------------------------------------|
| `.sig`      | uint32 [docs, num_perm] MinHash signature                     |
| `.exact`    | uint64 [docs, 2] BLAKE2b-128 of the NFC-normalized, trimmed text |
| `.counts`   | uint32 [docs] number of distinct shingles (0: no words)       |
| `.shingles` | uint32, every document's sorted unique shingle hashes         |
| `.ids`      | one JSON string (the document id) per line                    |
| `.idpos`    | uint64 [docs + 1] byte offset of each line of `.ids`          |
| `.idhash`   | uint64 [docs, 2] BLAKE2b-128 of the id (finds repeated ids)   |
| `.lines`    | uint64 [docs] line (row) of each document in its input file   |
| `.kept`     | uint8 [docs], 1 where the run kept the document (written last) |
| `.json`     | the part's counts and its input file (`source`, relative to the run's input root); written after the arrays: marks the part whole |

Memory while scanning is one batch (~256 KB of text), whatever the size of the input.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import unicodedata
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import numpy as np
import zstandard

from dataprep.minhash import HASH_SCHEME, MinHasher, near_normal_bytes
from dataprep.readers import Document, ReadTask, read_task
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic

INDEX_VERSION = 2  # 2: .idhash, .lines and the source of each part
BATCH_BYTES = 256 << 10  # small batches keep the vectorized hashing inside the CPU caches
BATCH_DOCS = 4096
LARGE_TEXT_CHARS = 1 << 20
ARRAY_SUFFIXES = (".sig", ".exact", ".counts", ".shingles", ".ids", ".idpos", ".idhash", ".lines")


def part_name(index: int) -> str:
    return f"part-{index:05d}"


_ASCII_WHITESPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"  # exactly what str.strip() removes from ASCII text


def exact_hash(text: str) -> bytes:
    """BLAKE2b-128 of the NFC-normalized, trimmed text."""
    return hashlib.blake2b(unicodedata.normalize("NFC", text).strip().encode("utf-8"), digest_size=16).digest()


def hashes_input(text: str, large_chars: int = LARGE_TEXT_CHARS) -> tuple[bytes, bytes]:
    """(exact hash, bytes for near-dup hashing) of one document. ASCII text, the common case, is
    encoded once and needs no normalization (NFC leaves it unchanged). Other text longer than
    `large_chars` is normalized piece by piece, so that its copies stay the size of a piece."""
    if text.isascii():
        raw = text.encode("ascii")
        return hashlib.blake2b(raw.strip(_ASCII_WHITESPACE), digest_size=16).digest(), raw
    if len(text) > large_chars:
        return _hashes_input_in_pieces(text, large_chars)
    return exact_hash(text), near_normal_bytes(text)


_PIECE_CUT = re.compile("[ \n]")


def _hashes_input_in_pieces(text: str, piece_chars: int) -> tuple[bytes, bytes]:
    """As `hashes_input`, for pieces cut before an ASCII space or newline: a character no NFC/NFKD
    composition or lowercasing context looks across, so the pieces normalize as the whole does."""
    exact = hashlib.blake2b(digest_size=16)
    near: list[bytes] = []
    pending, started = "", False  # whitespace held back until text follows it (strip() of the whole)
    start = 0
    while start < len(text):
        cut = _PIECE_CUT.search(text, start + piece_chars) if len(text) - start > piece_chars else None
        piece = text[start : cut.start() if cut else len(text)]
        start += len(piece)
        near.append(near_normal_bytes(piece))
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
    return exact.digest(), b"".join(near)


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
            exact, normalized = zip(*[hashes_input(d.text) for d in batch])
            sb = hasher.signatures_of_normalized(list(normalized))
            out[".sig"].write(sb.signatures.tobytes())
            out[".counts"].write(sb.shingle_counts.tobytes())
            out[".shingles"].write(sb.shingles.tobytes())
            out[".exact"].write(b"".join(exact))
            id_lines = [id_line(d.id) for d in batch]
            out[".ids"].write(b"".join(id_lines))
            positions = np.uint64(id_end) + np.cumsum([len(line) for line in id_lines], dtype=np.uint64)
            out[".idpos"].write(positions.tobytes())
            id_end = int(positions[-1])
            out[".idhash"].write(b"".join(hashlib.blake2b(line, digest_size=16).digest() for line in id_lines))
            out[".lines"].write(np.array([d.line for d in batch], dtype=np.uint64).tobytes())
            records.write(b"\n".join(d.record for d in batch))  # no copy of a batch of one large document
            records.write(b"\n")

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

    @cached_property
    def shingle_offsets(self) -> np.ndarray:
        return np.concatenate(([0], np.cumsum(self.counts, dtype=np.int64)))

    @cached_property
    def shingles(self) -> np.ndarray:
        return _array(Path(f"{self.base}.shingles"), np.uint32, (int(self.shingle_offsets[-1]),))

    def shingle_set(self, i: int) -> np.ndarray:
        return self.shingles[self.shingle_offsets[i] : self.shingle_offsets[i + 1]]

    def kept(self) -> np.ndarray:
        return _array(Path(f"{self.base}.kept"), np.uint8, (self.docs,)).astype(bool)

    def ids_of(self, local: list[int]) -> list[str]:
        """The ids of the given documents of this part (read directly, not the whole list)."""
        pos = _array(Path(f"{self.base}.idpos"), np.uint64, (self.docs + 1,))
        text = _array(Path(f"{self.base}.ids"), np.uint8, (int(pos[-1]),))
        return [json.loads(bytes(text[pos[i] : pos[i + 1]])) for i in local]

    def locations_of(self, local: list[int]) -> list[tuple[str, int]]:
        """(input file relative to its run's input root, line) of the given documents."""
        source = json.loads(Path(f"{self.base}.json").read_text())["source"]
        lines = _array(Path(f"{self.base}.lines"), np.uint64, (self.docs,))
        return [(source, int(lines[i])) for i in local]


@dataclass
class DedupIndex:
    """A set of parts with consecutive global keys; `offsets[p]` is part p's first key."""

    directory: Path
    num_perm: int
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
    def meta(num_perm: int, ngram: int, part_docs: list[int]) -> dict:
        return {
            "version": INDEX_VERSION,
            "hash_scheme": HASH_SCHEME,
            "num_perm": num_perm,
            "ngram": ngram,
            "parts": part_docs,
        }

    @classmethod
    def from_parts(cls, directory: Path, num_perm: int, ngram: int, part_docs: list[int]) -> "DedupIndex":
        parts = [IndexPart(directory / part_name(i), n, num_perm) for i, n in enumerate(part_docs)]
        return cls(directory, num_perm, ngram, parts)

    @classmethod
    def open(cls, directory: str | Path) -> "DedupIndex":
        directory = Path(directory)
        meta_path = directory / "meta.json"
        if not meta_path.is_file():
            raise UserError(f"{directory}: not a finished dedup index (no meta.json); point --against at OUT/index of a completed `ptk dedup`")
        try:
            meta = json.loads(meta_path.read_text())
            num_perm, ngram, part_docs = int(meta["num_perm"]), int(meta["ngram"]), [int(n) for n in meta["parts"]]
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{meta_path}: unreadable index metadata ({e})") from None
        if meta.get("version") != INDEX_VERSION or meta.get("hash_scheme") != HASH_SCHEME:
            raise UserError(f"{meta_path}: index version {meta.get('version')}/{meta.get('hash_scheme')} is not {INDEX_VERSION}/{HASH_SCHEME}; rebuild it")
        return cls.from_parts(directory, num_perm, ngram, part_docs)
