"""WebDataset shard files: plain tar, one sample per `DocBatch`, its payload zstd-compressed.

    import webdataset as wds
    from pretrainkit.shards.webdataset_format import decode_sample
    for sample in wds.WebDataset(["shards/shard-00000.tar"], shardshuffle=False).map(decode_sample):
        sample["ids"], sample["tokens"]   # lists: one id and one token array per document

A sample is one tar member `<shard>-<batch>.ptk` holding many documents, because one small
document per member costs more in tar headers and padding than its tokens. The payload is
`b"PTK1"`, the byte length of a header frame (uint32 little-endian), the header frame (zstd JSON
`{"dtype", "ids", "lengths"}`) and the token frame (zstd raw tokens), so a reader can learn the
document lengths without decompressing tokens. Tar metadata is fixed (mtime 0, uid 0, no names),
so the same batches give byte-identical tar files.
"""

from __future__ import annotations

import io
import json
import struct
import tarfile
from typing import BinaryIO

import numpy as np
import zstandard

from pretrainkit.shards.formats import ZSTD_LEVEL, DocBatch

MAGIC = b"PTK1"
EXTENSION = "ptk"
_HEAD = struct.Struct("<4sI")


def encode_payload(batch: DocBatch) -> bytes:
    header = json.dumps(
        {"dtype": batch.tokens.dtype.name, "ids": batch.ids, "lengths": batch.lengths.tolist()},
        ensure_ascii=False,
        separators=(",", ":"),
    ).encode("utf-8")
    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    head_frame = cctx.compress(header)
    return _HEAD.pack(MAGIC, len(head_frame)) + head_frame + cctx.compress(batch.tokens.tobytes())


def _split_payload(payload: bytes) -> tuple[dict, bytes]:
    magic, head_len = _HEAD.unpack_from(payload)
    if magic != MAGIC:
        raise ValueError("not a pretrainkit WebDataset sample (bad magic)")
    start = _HEAD.size
    header = json.loads(zstandard.ZstdDecompressor().decompress(payload[start : start + head_len]))
    return header, payload[start + head_len :]


def decode_header(payload: bytes) -> dict:
    """The sample's ids, lengths and dtype, without decompressing its tokens."""
    return _split_payload(payload)[0]


def decode_batch(payload: bytes) -> DocBatch:
    header, token_frame = _split_payload(payload)
    tokens = np.frombuffer(zstandard.ZstdDecompressor().decompress(token_frame), dtype=header["dtype"])
    return DocBatch(header["ids"], np.asarray(header["lengths"], dtype=np.uint32), tokens)


def decode_sample(sample: dict) -> dict:
    """Decoder for the stock `webdataset.WebDataset` pipeline: raw sample in, documents out."""
    batch = decode_batch(sample[EXTENSION])
    offsets = batch.offsets
    return {
        "__key__": sample["__key__"],
        "ids": batch.ids,
        "tokens": [batch.tokens[offsets[i] : offsets[i + 1]] for i in range(len(batch.ids))],
    }


class WebDatasetShardWriter:
    """Writes `DocBatch`es as tar members with fixed metadata to an open binary file."""

    def __init__(self, sink: BinaryIO, shard_index: int):
        self._tar = tarfile.open(fileobj=sink, mode="w", format=tarfile.USTAR_FORMAT)
        self._shard = shard_index
        self._count = 0

    def write(self, batch: DocBatch) -> None:
        payload = encode_payload(batch)
        info = tarfile.TarInfo(f"{self._shard:05d}-{self._count:06d}.{EXTENSION}")
        info.size, info.mtime, info.mode = len(payload), 0, 0o644
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        self._tar.addfile(info, io.BytesIO(payload))
        self._count += 1

    def close(self) -> None:
        self._tar.close()


class WebDatasetShardReader:
    """Random access to the samples of one tar shard (member offsets from one header scan)."""

    def __init__(self, path: str):
        with tarfile.open(path, mode="r:") as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
        self._spans = [(m.offset_data, m.size) for m in members]
        self._path = path
        self._fh = open(path, "rb")
        self.num_batches = len(self._spans)

    def _payload(self, i: int) -> bytes:
        offset, size = self._spans[i]
        self._fh.seek(offset)
        return self._fh.read(size)

    def lengths(self, i: int) -> np.ndarray:
        return np.asarray(decode_header(self._payload(i))["lengths"], dtype=np.uint32)

    def tokens(self, i: int) -> np.ndarray:
        return decode_batch(self._payload(i)).tokens

    def ids(self, i: int) -> list[str]:
        return decode_header(self._payload(i))["ids"]
