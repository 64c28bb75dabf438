"""`ShardSet`: random access to a shard directory's documents and to its token stream.

    ss = ShardSet.open("shards/")
    ss.num_docs, ss.num_tokens, ss.tokenizer.eos_id, ss.dtype
    ss.document(3)                   # tokens of document 3
    ss.document_origin(3)            # (its shard's file, its id)
    ss.document_url(3)               # its url, None without one (a set with no urls: always None)
    ss.read_tokens(0, 2049)          # the stream doc0 EOS doc1 EOS ... (an EOS after every document)
    ss.doc_lengths()                 # int64 per document, read without decompressing any tokens
    ss.batches.docs, ss.read_batch(b)   # the record-batch index; one batch's lengths and tokens

Guarantees: `open` refuses a directory whose manifest is missing or invalid, or whose shard files
are missing or not of the listed size (a shard cut short by a crash is never read); `verify()`
adds the sha256 check. A read decompresses only the batches (about 16k tokens each) that it
touches, and keeps recently used batches, with EOS separators already in place, in an LRU.
The only index held in memory is per record batch (`BatchIndex`, 16 bytes per ~16k tokens), read
from the cache directory given to `open` (else `pretrainkit.cache.cache_dir()`): nothing per document.
"""

from __future__ import annotations

import functools
import threading
from collections import OrderedDict
from pathlib import Path

import numpy as np

from pretrainkit.cache import cached_arrays
from pretrainkit.errors import UserError
from pretrainkit.shards.arrow_format import ArrowShardReader
from pretrainkit.shards.manifest import TokenizerInfo, fingerprint, load_manifest, tokenizer_info
from pretrainkit.shards.verify import verify_shards
from pretrainkit.shards.webdataset_format import WebDatasetShardReader

DEFAULT_CACHE_TOKENS = 1 << 24


class ShardSet:
    def __init__(
        self, path: Path, manifest: dict, cache_tokens: int = DEFAULT_CACHE_TOKENS, cache_dir: Path | None = None
    ):
        self.path = path
        self.manifest = manifest
        self.cache_dir = cache_dir  # of the derived arrays (`pretrainkit.cache`); None: `cache_dir()`
        self.tokenizer: TokenizerInfo = tokenizer_info(manifest)  # sha256, vocab size, EOS of what made the shards
        self.cache_tokens = cache_tokens
        self._readers: list[ArrowShardReader | WebDatasetShardReader | None] = [None] * len(manifest["shards"])
        self._index: BatchIndex | None = None
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._cached = 0
        self._lock = threading.Lock()

    def __getstate__(self) -> dict:
        """Pickle only what names the set (for DataLoader workers); readers and cache reopen lazily."""
        return {
            "path": self.path, "manifest": self.manifest, "cache_tokens": self.cache_tokens, "cache_dir": self.cache_dir
        }  # fmt: skip

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["path"], state["manifest"], state["cache_tokens"], state["cache_dir"])

    @classmethod
    def open(
        cls, path: str | Path, cache_tokens: int = DEFAULT_CACHE_TOKENS, cache_dir: Path | None = None
    ) -> ShardSet:
        path = Path(path)
        manifest = load_manifest(path)
        for entry in manifest["shards"]:
            f = path / entry["file"]
            if not f.is_file():
                raise UserError(f"{f}: shard listed in {path / 'manifest.json'} is missing")
            size = f.stat().st_size
            if size != entry["bytes"]:
                raise UserError(f"{f}: {size} bytes, manifest says {entry['bytes']} (truncated or replaced shard)")
        return cls(path, manifest, cache_tokens, cache_dir)

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
    def has_urls(self) -> bool:
        """Whether the shards hold their documents' urls (the manifest's `urls`)."""
        return self.manifest.get("urls", False)

    @property
    def dtype(self) -> type:
        return np.uint16 if self.manifest["dtype"] == "uint16" else np.uint32

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.manifest)

    def verify(self) -> list[str]:
        return verify_shards(self.path, self.manifest)

    # -- reads ----------------------------------------------------------------------------------
    @property
    def batches(self) -> BatchIndex:
        """Where every record batch starts in the documents and the stream (cached on disk)."""
        if self._index is None:
            with self._lock:
                if self._index is None:
                    self._index = BatchIndex.load(self)
        return self._index

    def batch_lengths(self, b: int) -> np.ndarray:
        """uint32 token counts of record batch b's documents (no token decompression)."""
        shard, local = self.batches.location(b)
        try:
            return self._reader(shard).lengths(local)
        except Exception as e:  # a damaged file of the right size
            raise self._unreadable(shard, local, e) from None

    def read_batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(uint32 lengths, tokens back to back) of record batch b's documents, decompressed now and
        not kept (the loader's windows hold what they read; `read_tokens` has the LRU)."""
        shard, local = self.batches.location(b)
        try:
            reader = self._reader(shard)
            lengths, tokens = reader.lengths(local), reader.tokens(local)
        except Exception as e:  # a damaged file of the right size: decompression errors
            raise self._unreadable(shard, local, e) from None
        if len(tokens) != int(lengths.sum(dtype=np.int64)):
            raise self._unreadable(shard, local, ValueError(f"{len(tokens)} tokens, lengths say {int(lengths.sum())}"))
        return lengths, tokens

    def read_batches(self, batches: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        """`read_batch` of each (a set in a bucket fetches them at once: `shards.streamed`)."""
        return [self.read_batch(b) for b in batches]

    def prefetch(self, batches: list[int]) -> None:
        """Nothing to do for files on a local disk; a set in a bucket starts fetching these batches."""

    def doc_lengths(self) -> np.ndarray:
        """int64 per document, read from the length columns (O(documents): for reports, not the loader)."""
        parts = [self.batch_lengths(b) for b in range(self.batches.num_batches)]
        return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)

    def document(self, i: int) -> np.ndarray:
        b, j, lengths = self._locate(i)
        start = int(self.batches.starts[b]) + int(lengths[:j].sum(dtype=np.int64)) + j
        return self.read_tokens(start, start + int(lengths[j]))

    def document_id(self, i: int) -> str:
        return self.document_origin(i)[1]

    def document_origin(self, i: int) -> tuple[str, str]:
        """(the file of the shard holding document i, the document's id)."""
        shard, local, j = self._record(i)
        return self.manifest["shards"][shard]["file"], self._reader(shard).ids(local)[j]

    def document_url(self, i: int) -> str | None:
        """Document i's url: None where it has none, and for every document of a set without urls."""
        if not self.has_urls:
            return None
        shard, local, j = self._record(i)
        return self._reader(shard).urls(local)[j]

    def _record(self, i: int) -> tuple[int, int, int]:
        """(shard, record batch within that shard, position in the batch) of document i."""
        b, j, _ = self._locate(i)
        shard, local = self.batches.location(b)
        return shard, local, j

    def read_tokens(self, start: int, stop: int) -> np.ndarray:
        """Tokens [start, stop) of the stream doc0 EOS doc1 EOS ... (a copy; safe to modify)."""
        if not 0 <= start <= stop <= self.stream_length:
            raise IndexError(f"token range [{start}, {stop}) outside the stream [0, {self.stream_length})")
        if start == stop:
            return np.empty(0, dtype=self.dtype)
        idx = self.batches
        b = int(idx.starts.searchsorted(start, side="right")) - 1
        stream = self._batch_stream(b)
        lo = start - idx.start_list[b]
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

    def _unreadable(self, shard: int, local: int, e: Exception) -> UserError:
        path = self.path / self.manifest["shards"][shard]["file"]
        return UserError(f"{path}: batch {local} unreadable ({e}); run `ptk shards verify {self.path}`")

    def _locate(self, i: int) -> tuple[int, int, np.ndarray]:
        """(record batch, position in it, the batch's lengths) of document i."""
        if not 0 <= i < self.num_docs:
            raise IndexError(f"document {i} out of range [0, {self.num_docs})")
        b = int(np.searchsorted(self.batches.docs, i, side="right")) - 1
        return b, i - int(self.batches.docs[b]), self.batch_lengths(b)

    def _batch_stream(self, b: int) -> np.ndarray:
        """Batch b's documents with an EOS after each, decompressed once and kept in the LRU."""
        with self._lock:
            stream = self._cache.get(b)
            if stream is not None:
                self._cache.move_to_end(b)
                return stream
        lengths, tokens = self.read_batch(b)
        stream = np.full(len(tokens) + len(lengths), self.tokenizer.eos_id, dtype=self.dtype)
        keep = np.ones(len(stream), dtype=bool)
        keep[np.cumsum(lengths.astype(np.int64) + 1) - 1] = False
        stream[keep] = tokens
        with self._lock:
            self._cache[b] = stream
            self._cached += len(stream)
            while self._cached > self.cache_tokens and len(self._cache) > 1:
                _, old = self._cache.popitem(last=False)
                self._cached -= len(old)
        return stream


class BatchIndex:
    """Per record batch (not per document): its first document and its stream position, and the
    first batch of each shard. 16 bytes a batch (~16k tokens), built once from the length columns
    and kept in the cache directory under the shard set's fingerprint, so opening a shard set of
    any size in a rank or loader worker reads one small file."""

    def __init__(self, docs: np.ndarray, starts: np.ndarray, shard_batches: np.ndarray):
        self.docs = docs  # int64 (num_batches + 1,): first document of each batch, then num_docs
        self.starts = starts  # int64 (num_batches + 1,): stream position of each batch, then stream_length
        self.shard_batches = shard_batches  # int64 (num_shards + 1,): first batch of each shard
        self.start_list = starts.tolist()  # Python ints: cheaper per read than numpy scalars
        self.num_batches = len(docs) - 1

    @property
    def stream_tokens(self) -> np.ndarray:
        """int64 per batch: its tokens with one EOS per document."""
        return np.diff(self.starts)

    def location(self, b: int) -> tuple[int, int]:
        """(shard, batch within the shard) of batch b."""
        shard = int(self.shard_batches.searchsorted(b, side="right")) - 1
        return shard, b - int(self.shard_batches[shard])

    @classmethod
    def load(cls, ss: ShardSet) -> BatchIndex:
        arrays = cached_arrays("shard-batches", ss.fingerprint, lambda: cls._build(ss), ss.cache_dir)
        index = cls(arrays["docs"], arrays["starts"], arrays["shard_batches"])
        if int(index.docs[-1]) != ss.num_docs or int(index.starts[-1]) != ss.stream_length:
            raise UserError(f"{ss.path}: the shards hold other document or token counts than the manifest says")
        return index

    @staticmethod
    def _build(ss: ShardSet) -> dict[str, np.ndarray]:
        counts, tokens, per_shard = [], [], []
        for shard, entry in enumerate(ss.manifest["shards"]):
            reader = ss._reader(shard)
            try:
                lengths = [reader.lengths(i) for i in range(reader.num_batches)]
            except Exception as e:  # a damaged file of the right size
                raise UserError(
                    f"{ss.path / entry['file']}: unreadable ({e}); run `ptk shards verify {ss.path}`"
                ) from None
            if sum(len(x) for x in lengths) != entry["docs"] or sum(int(x.sum()) for x in lengths) != entry["tokens"]:
                raise UserError(
                    f"{ss.path / entry['file']}: holds other document or token counts than the manifest says"
                )
            counts += [len(x) for x in lengths]
            tokens += [int(x.sum()) + len(x) for x in lengths]
            per_shard.append(len(lengths))
        return {
            "docs": np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64),
            "starts": np.concatenate([[0], np.cumsum(tokens, dtype=np.int64)]).astype(np.int64),
            "shard_batches": np.concatenate([[0], np.cumsum(per_shard, dtype=np.int64)]).astype(np.int64),
        }
