"""The record-batch sidecar of an Arrow shard: where each record batch lies in the file, its sha256,
and its documents' token counts, so that a reader can fetch and check one batch by a range read.

    ranges = BatchRanges.of_file(path, offsets, sizes, docs, lengths)   # the writer, after the shard
    write_bytes_atomic(path.with_name(sidecar_name(path.name)), ranges.encode())
    ranges = BatchRanges.decode(data, where="s3://b/tokens/shard-00000.arrow.batches")
    ranges.offsets[b], ranges.sizes[b], ranges.sha256[b], ranges.lengths(b)

`shard-00000.arrow.batches` holds, little-endian: the magic `PTKBATCH`, a version (uint32), the
batch count n (uint32); then n rows of (offset uint64, size uint64, documents uint32, sha256 32
bytes); then every document's token count (uint32), in order. Its size and sha256 are in the
manifest entry of its shard (`batches`), so every byte a range read brings is checked against
something the manifest vouches for. A batch's bytes are one Arrow IPC message that decodes alone
with the set's schema (`arrow_format.decode_record_batch`). The lengths duplicate the shard's
`length` column on purpose: a streamed shard set builds its batch index and held-out split from the
sidecars without fetching a single record batch.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.errors import UserError

SUFFIX = ".batches"
_MAGIC = b"PTKBATCH"
_VERSION = 1
_HEADER = np.dtype([("magic", "S8"), ("version", "<u4"), ("count", "<u4")])
_ROW = np.dtype([("offset", "<u8"), ("size", "<u8"), ("docs", "<u4"), ("sha256", "u1", (32,))])


def sidecar_name(shard_file: str) -> str:
    return shard_file + SUFFIX


@dataclass(frozen=True)
class BatchRanges:
    offsets: np.ndarray  # int64 per batch: its first byte in the shard file
    sizes: np.ndarray  # int64 per batch: its bytes
    docs: np.ndarray  # int64 (n + 1,): first document of each batch within the shard, then the shard's count
    sha256: list[bytes]  # per batch: the digest of its bytes
    doc_lengths: np.ndarray  # uint32 per document of the shard

    @property
    def num_batches(self) -> int:
        return len(self.offsets)

    def lengths(self, b: int) -> np.ndarray:
        return self.doc_lengths[self.docs[b] : self.docs[b + 1]]

    @classmethod
    def of_file(cls, path: Path, offsets: list[int], sizes: list[int], lengths: np.ndarray, docs: list[int]):
        """The ranges of the shard file `path`, each batch's sha256 read from it; and the whole file's
        sha256 (one read for both)."""
        whole, digests = hashlib.sha256(), []
        with open(path, "rb") as f:
            pos = 0
            for offset, size in zip(offsets, sizes):
                gap = f.read(offset - pos)  # the file's header before the first batch
                data = f.read(size)
                whole.update(gap)
                whole.update(data)
                digests.append(hashlib.sha256(data).digest())
                pos = offset + size
            while chunk := f.read(1 << 20):  # the footer
                whole.update(chunk)
        starts = np.concatenate([[0], np.cumsum(docs, dtype=np.int64)])
        ranges = cls(np.array(offsets, np.int64), np.array(sizes, np.int64), starts, digests, lengths)
        return ranges, whole.hexdigest()

    def encode(self) -> bytes:
        header = np.array([(_MAGIC, _VERSION, self.num_batches)], dtype=_HEADER)
        rows = np.zeros(self.num_batches, dtype=_ROW)
        rows["offset"], rows["size"], rows["docs"] = self.offsets, self.sizes, np.diff(self.docs)
        rows["sha256"] = np.frombuffer(b"".join(self.sha256), np.uint8).reshape(-1, 32)
        return header.tobytes() + rows.tobytes() + np.asarray(self.doc_lengths, dtype="<u4").tobytes()

    @classmethod
    def decode(cls, data: bytes, where: str) -> BatchRanges:
        """The sidecar's content; a UserError naming `where` when it is not one."""
        if len(data) < _HEADER.itemsize:
            raise UserError(f"{where}: not a record-batch sidecar (too short)")
        header = np.frombuffer(data, _HEADER, count=1)[0]
        if header["magic"] != _MAGIC or header["version"] != _VERSION:
            raise UserError(f"{where}: not a record-batch sidecar of version {_VERSION}")
        n = int(header["count"])
        lengths_at = _HEADER.itemsize + n * _ROW.itemsize
        if len(data) < lengths_at:
            raise UserError(f"{where}: {len(data)} bytes, its header says at least {lengths_at}")
        rows = np.frombuffer(data, _ROW, count=n, offset=_HEADER.itemsize)
        docs = np.concatenate([[0], np.cumsum(rows["docs"], dtype=np.int64)])
        if len(data) != lengths_at + 4 * int(docs[-1]):
            raise UserError(f"{where}: {len(data)} bytes, its header says {lengths_at + 4 * int(docs[-1])}")
        lengths = np.frombuffer(data, "<u4", offset=lengths_at).astype(np.uint32)
        return cls(
            rows["offset"].astype(np.int64),
            rows["size"].astype(np.int64),
            docs,
            [d.tobytes() for d in rows["sha256"]],
            lengths,
        )
