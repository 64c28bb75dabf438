"""`ShardSet`: random access to a shard directory's documents and to its token stream.

    ss = ShardSet.open("shards/")
    ss.num_docs, ss.num_tokens, ss.eos_id, ss.dtype
    ss.document(3)                   # tokens of document 3
    ss.read_tokens(0, 2049)          # the stream doc0 EOS doc1 EOS ... (an EOS after every document)
    ss.doc_lengths()                 # int64 per document, read without decompressing any tokens

Guarantees: `open` refuses a directory whose manifest is missing or invalid, or whose shard files
are missing or not of the listed size (a shard cut short by a crash is never read); `verify()`
adds the sha256 check. A read decompresses only the batches (about 16k tokens each) that it
touches, and keeps recently used batches, with EOS separators already in place, in an LRU.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from pretrainkit.errors import UserError
from shards.arrow_format import ArrowShardReader
from shards.manifest import fingerprint, load_manifest
from shards.verify import verify_shards
from shards.webdataset_format import WebDatasetShardReader

DEFAULT_CACHE_TOKENS = 1 << 24


class ShardSet:
    def __init__(self, path: Path, manifest: dict, cache_tokens: int = DEFAULT_CACHE_TOKENS):
        self.path = path
        self.manifest = manifest
        self.cache_tokens = cache_tokens
        self._readers: list[ArrowShardReader | WebDatasetShardReader | None] = [None] * len(manifest["shards"])
        self._index: _StreamIndex | None = None
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickle only what names the set (for DataLoader workers); readers and cache reopen lazily."""
        return {"path": self.path, "manifest": self.manifest, "cache_tokens": self.cache_tokens}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["manifest"], state["cache_tokens"])

    @classmethod
    def open(cls, path: str | Path, cache_tokens: int = DEFAULT_CACHE_TOKENS) -> "ShardSet":
        path = Path(path)
        manifest = load_manifest(path)
        for entry in manifest["shards"]:
            f = path / entry["file"]
            if not f.is_file():
                raise UserError(f"{f}: shard listed in {path / 'manifest.json'} is missing")
            size = f.stat().st_size
            if size != entry["bytes"]:
                raise UserError(f"{f}: {size} bytes, manifest says {entry['bytes']} (truncated or replaced shard)")
        return cls(path, manifest, cache_tokens)

    # -- manifest facts -------------------------------------------------------------------------
    @property
    def format(self) -> str:
        return self.manifest["format"]

    @property
    def num_docs(self) -> int:
        return self.manifest["totals"]["docs"]

    @property
    def num_tokens(self) -> int:
        return self.manifest["totals"]["tokens"]

    @functools.cached_property
    def stream_length(self) -> int:
        """Length of the token stream: every document followed by one EOS."""
        return self.num_tokens + self.num_docs

    @property
    def eos_id(self) -> int:
        return self.manifest["tokenizer"]["eos_id"]

    @property
    def vocab_size(self) -> int:
        return self.manifest["tokenizer"]["vocab_size"]

    @property
    def dtype(self) -> type:
        return np.uint16 if self.manifest["dtype"] == "uint16" else np.uint32

    @property
    def tokenizer_sha256(self) -> str:
        return self.manifest["tokenizer"]["sha256"]

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.manifest)

    def verify(self) -> list[str]:
        return verify_shards(self.path, self.manifest)

    # -- reads ----------------------------------------------------------------------------------
    def doc_lengths(self) -> np.ndarray:
        return self._stream_index().lengths.copy()

    def document(self, i: int) -> np.ndarray:
        if not 0 <= i < self.num_docs:
            raise IndexError(f"document {i} out of range [0, {self.num_docs})")
        idx = self._stream_index()
        start = int(idx.doc_starts[i])
        return self.read_tokens(start, start + int(idx.lengths[i]))

    def document_id(self, i: int) -> str:
        if not 0 <= i < self.num_docs:
            raise IndexError(f"document {i} out of range [0, {self.num_docs})")
        idx = self._stream_index()
        b = int(np.searchsorted(idx.batch_docs, i, side="right")) - 1
        shard, local = idx.batch_loc[b]
        return self._reader(shard).ids(local)[i - int(idx.batch_docs[b])]

    def read_tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream doc0 EOS doc1 EOS ... (a copy; safe to modify)."""
        if not 0 <= start <= stop <= self.stream_length:
            raise IndexError(f"token range [{start}, {stop}) outside the stream [0, {self.stream_length})")
        if start == stop:
            return np.empty(0, dtype=self.dtype)
        idx = self._index or self._stream_index()
        b = int(idx.batch_starts.searchsorted(start, side="right")) - 1
        stream = self._batch_stream(b)
        lo = start - idx.batch_start_list[b]
        if stop - start <= len(stream) - lo:  # the common case: one batch holds the whole range
            return stream[lo : lo + stop - start].copy()
        out = np.empty(stop - start, dtype=self.dtype)
        pos = start
        while True:
            n = min(len(stream) - lo, stop - pos)
            out[pos - start : pos - start + n] = stream[lo : lo + n]
            pos += n
            if pos == stop:
                return out
            b, lo = b + 1, 0
            stream = self._batch_stream(b)

    # -- internals ------------------------------------------------------------------------------
    def _reader(self, shard: int) -> ArrowShardReader | WebDatasetShardReader:
        if self._readers[shard] is None:
            path = str(self.path / self.manifest["shards"][shard]["file"])
            try:
                self._readers[shard] = ArrowShardReader(path) if self.format == "arrow" else WebDatasetShardReader(path)
            except Exception as e:  # pyarrow and tarfile raise many types for a corrupt file
                raise UserError(f"{path}: unreadable shard: {e}") from None
        return self._readers[shard]

    def _stream_index(self) -> "_StreamIndex":
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = _StreamIndex.build(self)
        return self._index

    def _batch_stream(self, b: int) -> np.ndarray:
        """Batch b's documents with an EOS after each, decompressed once and kept in the LRU."""
        with self._lock:
            stream = self._cache.get(b)
            if stream is not None:
                self._cache.move_to_end(b)
                return stream
        idx = self._stream_index()
        shard, local = idx.batch_loc[b]
        ends = idx.doc_starts[idx.batch_docs[b] + 1 : idx.batch_docs[b + 1] + 1] - idx.batch_starts[b] - 1
        stream = np.full(idx.batch_starts[b + 1] - idx.batch_starts[b], self.eos_id, dtype=self.dtype)
        keep = np.ones(len(stream), dtype=bool)
        keep[ends] = False
        try:
            stream[keep] = self._reader(shard).tokens(local)
        except Exception as e:  # a damaged file of the right size: decompression or shape errors
            path = self.path / self.manifest["shards"][shard]["file"]
            raise UserError(f"{path}: batch {local} unreadable ({e}); run `ptk shards verify {self.path}`") from None
        with self._lock:
            self._cache[b] = stream
            self._cached += len(stream)
            while self._cached > self.cache_tokens and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached -= len(old)
        return stream


class _StreamIndex:
    """Where every document and batch starts in the stream, from the length columns alone."""

    def __init__(self, lengths: np.ndarray, batch_docs: np.ndarray, batch_loc: list[tuple[int, int]]):
        self.lengths = lengths  # int64 (num_docs,)
        self.batch_docs = batch_docs  # int64 (num_batches + 1,): first document of each batch
        self.batch_loc = batch_loc  # (shard, batch within shard) per batch
        self.doc_starts = np.zeros(len(lengths) + 1, dtype=np.int64)  # stream position of each document
        np.cumsum(lengths + 1, out=self.doc_starts[1:])
        self.batch_starts = self.doc_starts[batch_docs]
        self.batch_start_list = self.batch_starts.tolist()  # Python ints: cheaper per read than numpy scalars

    @classmethod
    def build(cls, ss: ShardSet) -> "_StreamIndex":
        lengths: list[np.ndarray] = []
        loc: list[tuple[int, int]] = []
        for shard, entry in enumerate(ss.manifest["shards"]):
            reader = ss._reader(shard)
            try:
                per_shard = [reader.lengths(i) for i in range(reader.num_batches)]
            except Exception as e:  # a damaged file of the right size
                raise UserError(f"{ss.path / entry['file']}: unreadable ({e}); run `ptk shards verify {ss.path}`") from None
            if sum(len(x) for x in per_shard) != entry["docs"] or sum(int(x.sum()) for x in per_shard) != entry["tokens"]:
                raise UserError(f"{ss.path / entry['file']}: holds other document or token counts than the manifest says")
            lengths += per_shard
            loc += [(shard, i) for i in range(reader.num_batches)]
        batch_docs = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum([len(x) for x in lengths], out=batch_docs[1:])
        flat = np.concatenate(lengths).astype(np.int64) if lengths else np.zeros(0, dtype=np.int64)
        return cls(flat, batch_docs, loc)
