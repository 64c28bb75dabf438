"""WebDataset shard files: plain tar, one sample per `DocBatch`, in members stock decoders read.

    import webdataset as wds
    from pretrainkit.shards.webdataset_format import decode_sample
    for sample in wds.WebDataset(["shards/shard-00000.tar"], shardshuffle=False).decode():
        sample["npy.gz"], sample["json.gz"]  # the batch's tokens (numpy array), {"ids": [...], "lengths": [...]}
        decode_sample(sample)["tokens"]      # convenience: the same tokens as one array per document

A sample (key `<shard>-<batch>`) is one `DocBatch` of many documents, because one small document
per sample costs more in tar headers and padding than its tokens: `<key>.json.gz` holds the
documents' ids and token counts (and, in a set whose documents have addresses, their `urls`, null
for one without), `<key>.npy.gz` all their tokens back to back as a standard NumPy
array (the set's dtype), so `webdataset`'s default decoders (which gunzip `.gz`, then load `.npy` and
`.json`), or `gzip` with `numpy.load` and `json.load`, read them with no pretrainkit code. gzip, not
zstd, because stock decoders know only gzip; at level 6 it is about as small as zstd level 3 on
tokens. The gzip header's mtime is 0 and tar metadata is fixed (mtime 0, uid 0, no names), so the
same batches give byte-identical tar files.

Version 1 sets (manifest `version` 1) held each sample as one opaque `<key>.ptk` member (zstd frames
behind a `PTK1` magic); the reader still reads them, so such sets need not be rewritten.
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import tarfile
from collections.abc import Callable
from typing import BinaryIO

import numpy as np
import zstandard

from pretrainkit.shards.formats import DocBatch

META_EXTENSION, TOKENS_EXTENSION = "json.gz", "npy.gz"
GZIP_LEVEL = 6
LEGACY_EXTENSION, LEGACY_MAGIC = "ptk", b"PTK1"
_LEGACY_HEAD = struct.Struct("<4sI")


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, GZIP_LEVEL, mtime=0)


def encode_meta(batch: DocBatch) -> bytes:
    meta: dict = {"ids": batch.ids, "lengths": batch.lengths.tolist()}
    if batch.urls is not None:  # a set whose documents have addresses: theirs, null for one without
        meta["urls"] = batch.urls
    return _gzip(json.dumps(meta, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))


def encode_tokens(batch: DocBatch) -> bytes:
    out = io.BytesIO()
    np.lib.format.write_array(out, np.ascontiguousarray(batch.tokens), version=(1, 0), allow_pickle=False)
    return _gzip(out.getvalue())


def decode_meta(data: bytes) -> dict:
    return json.loads(gzip.decompress(data))


def decode_tokens(data: bytes) -> np.ndarray:
    return np.lib.format.read_array(io.BytesIO(gzip.decompress(data)), allow_pickle=False)


def decode_sample(sample: dict) -> dict:
    """A sample decoded by `webdataset`'s `.decode()` (its `json.gz` and `npy.gz`) as ids and one token array
    per document."""
    meta, tokens = sample[META_EXTENSION], sample[TOKENS_EXTENSION]
    offsets = np.zeros(len(meta["lengths"]) + 1, dtype=np.int64)
    np.cumsum(meta["lengths"], out=offsets[1:])
    return {
        "__key__": sample["__key__"],
        "ids": meta["ids"],
        "tokens": [tokens[offsets[i] : offsets[i + 1]] for i in range(len(meta["ids"]))],
    }


def _legacy_split(payload: bytes) -> tuple[dict, bytes]:
    """A version 1 `.ptk` payload: magic, header frame length, zstd JSON header, zstd token frame."""
    magic, head_len = _LEGACY_HEAD.unpack_from(payload)
    if magic != LEGACY_MAGIC:
        raise ValueError("not a pretrainkit WebDataset sample (bad magic)")
    start = _LEGACY_HEAD.size
    header = json.loads(zstandard.ZstdDecompressor().decompress(payload[start : start + head_len]))
    return header, payload[start + head_len :]


def _legacy_tokens(payload: bytes) -> np.ndarray:
    header, frame = _legacy_split(payload)
    return np.frombuffer(zstandard.ZstdDecompressor().decompress(frame), dtype=header["dtype"])


class WebDatasetShardWriter:
    """Writes `DocBatch`es as `<key>.json.gz` + `<key>.npy.gz` tar members with fixed metadata to an open
    binary file."""

    def __init__(self, sink: BinaryIO, shard_index: int):
        self._tar = tarfile.open(fileobj=sink, mode="w", format=tarfile.USTAR_FORMAT)
        self._shard = shard_index
        self._count = 0

    def write(self, batch: DocBatch) -> None:
        key = f"{self._shard:05d}-{self._count:06d}"
        for extension, data in ((META_EXTENSION, encode_meta(batch)), (TOKENS_EXTENSION, encode_tokens(batch))):
            info = tarfile.TarInfo(f"{key}.{extension}")
            info.size, info.mtime, info.mode = len(data), 0, 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            self._tar.addfile(info, io.BytesIO(data))
        self._count += 1

    def close(self) -> None:
        self._tar.close()


class WebDatasetShardReader:
    """Random access to the samples of one tar shard (member offsets from one header scan)."""

    def __init__(self, path: str):
        with tarfile.open(path, mode="r:") as tar:
            members = [m for m in tar.getmembers() if m.isfile()]
        by_extension: dict[str, list[tarfile.TarInfo]] = {}
        for m in members:
            extension = m.name.partition(".")[2]  # webdataset's split: the key ends at the first dot
            by_extension.setdefault(extension, []).append(m)
        self._meta: Callable[[bytes], dict]
        self._tokens: Callable[[bytes], np.ndarray]
        if set(by_extension) <= {LEGACY_EXTENSION}:
            meta = tokens = by_extension.get(LEGACY_EXTENSION, [])
            self._meta, self._tokens = lambda payload: _legacy_split(payload)[0], _legacy_tokens
        else:
            meta, tokens = by_extension.get(META_EXTENSION, []), by_extension.get(TOKENS_EXTENSION, [])
            keys = [m.name.partition(".")[0] for m in meta]
            if set(by_extension) != {META_EXTENSION, TOKENS_EXTENSION} or keys != [
                m.name.partition(".")[0] for m in tokens
            ]:
                raise ValueError(
                    f"expected one .{META_EXTENSION} and one .{TOKENS_EXTENSION} member per sample, "
                    f"found {sorted(by_extension)}"
                )
            self._meta, self._tokens = decode_meta, decode_tokens
        self._meta_spans = [(m.offset_data, m.size) for m in meta]
        self._token_spans = [(m.offset_data, m.size) for m in tokens]
        self._fh = open(path, "rb")
        self.num_batches = len(self._meta_spans)

    def _read(self, span: tuple[int, int]) -> bytes:
        self._fh.seek(span[0])
        return self._fh.read(span[1])

    def lengths(self, i: int) -> np.ndarray:
        return np.asarray(self._meta(self._read(self._meta_spans[i]))["lengths"], dtype=np.uint32)

    def tokens(self, i: int) -> np.ndarray:
        return self._tokens(self._read(self._token_spans[i]))

    def ids(self, i: int) -> list[str]:
        return self._meta(self._read(self._meta_spans[i]))["ids"]

    def urls(self, i: int) -> list[str | None]:
        """Each document's url, None where it has none (every one, in a set without urls)."""
        meta = self._meta(self._read(self._meta_spans[i]))
        return meta.get("urls") or [None] * len(meta["ids"])
