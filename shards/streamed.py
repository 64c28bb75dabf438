"""Shard sets at a URL, opened for reading: copied whole when they fit the cache's bound, else
streamed one record batch at a time through the bounded batch cache.

    ss = open_shard_set("s3://corpora/tokens/web", ShardCache.configured())   # or a local path
    ss.read_batches([17, 4, 230])     # fetched at once (range reads), checked, decoded
    ss.prefetch([88, 3, 41])          # a background thread fetches these while the caller computes

The cache (its directory and bound, `shards.set_copies.ShardCache`) is given, or else that of
`$PTK_CACHE_DIR` and `$PTK_SHARD_CACHE_BYTES`; the set carries it to the processes it is sent to.

Which way a URL is read: a set whose files fit the cache's bound (or with no bound) beside the
copies in use is copied whole (`shards.set_copies`): the fastest to read once there. A larger Arrow
set, or one the copies in use leave no room for, whose shards have record-batch sidecars
(`shards/batch_ranges.py`) is a `StreamedShardSet`: its manifest and sidecars (a few bytes per
batch, each checked against the manifest) are read when it opens, which is all the batch index and
the held-out split need; record batches are then fetched as the loader's windows ask for them,
through `shards.batch_cache` (one file per batch, checked against the sidecar's sha256, LRU-evicted
under the same bound, which the whole copies and the batches share). Such a set without sidecars
(WebDataset, or written before them) is one line saying so. Either way the tokens are the same bytes
as on a local path, and the fingerprint is the manifest's: the data order and losses do not depend
on how a set is read.

Prefetch: `SourceStream` asks for the next window's record batches while it reads a window; a
thread fetches them, and the read of that window takes them from memory, so a step waits on the
network only when the network is slower than the loader.
"""

from __future__ import annotations

import hashlib
import os
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np

from pretrainkit.errors import UserError
from pretrainkit.quantities import byte_size
from pretrainkit.remote import staging
from pretrainkit.remote.transfer import read_bytes
from pretrainkit.remote.urls import filesystem, is_url, join, storage_errors
from pretrainkit.shards import ShardSet
from pretrainkit.shards.arrow_format import ID, LENGTH, TOKENS, URL, decode_record_batch
from pretrainkit.shards.batch_cache import BatchCache, BatchRange
from pretrainkit.shards.batch_ranges import BatchRanges, sidecar_name
from pretrainkit.shards.formats import MANIFEST_NAME
from pretrainkit.shards.manifest import parse_manifest
from pretrainkit.shards.set_copies import MAX_BYTES_ENV, NoRoom, ShardCache, batch_cache, shard_set_copy
from pretrainkit.shards.verify import listed_files

STREAMS_FOLDER = "shard-streams"  # a streamed set's stand-in path, named in messages as its URL; never written


def open_shard_set(path: str | Path, shard_cache: ShardCache | None = None) -> ShardSet:
    """The shard set at a local path or URL, through `shard_cache` (None: `ShardCache.configured()`;
    see the module docstring)."""
    if not is_url(path):
        return ShardSet.open(path, cache_dir=shard_cache.dir if shard_cache else None)
    shard_cache = shard_cache or ShardCache.configured()
    url = path.rstrip("/")
    where = join(url, MANIFEST_NAME)
    manifest = parse_manifest(read_bytes(where), where)
    limit, size = shard_cache.max_bytes, sum(size for size, _ in listed_files(manifest).values())
    try:
        if limit is not None and size > limit:
            raise NoRoom(f"{MAX_BYTES_ENV}={byte_size(limit)}: the shard set {url} ({byte_size(size)}) does not fit")
        return ShardSet.open(shard_set_copy(url, shard_cache), cache_dir=shard_cache.dir)
    except NoRoom as e:
        if manifest["format"] != "arrow" or not all("batches" in entry for entry in manifest["shards"]):
            raise UserError(
                f"{e}, and cannot be streamed: its shards have no record-batch sidecars (WebDataset shards, or "
                "Arrow shards written before them; `ptk tokenize` them again); raise the bound"
            ) from None
        return StreamedShardSet.open(url, manifest, shard_cache)


class StreamedShardSet(ShardSet):
    """A `ShardSet` whose record batches are range reads of the shards in a bucket (module docstring)."""

    def __init__(self, path: Path, manifest: dict, url: str, ranges: list[BatchRanges], cache: BatchCache, **kw):
        super().__init__(path, manifest, **kw)
        self.url, self.ranges, self.cache = url, ranges, cache
        self._executor: tuple[int, ThreadPoolExecutor] | None = None  # (the process that made it, it)
        self._prefetched: tuple[list[int], Future] | None = None

    @classmethod
    def open(cls, url: str, manifest: dict, shard_cache: ShardCache) -> StreamedShardSet:
        names = [sidecar_name(e["file"]) for e in manifest["shards"]]
        fs, _ = filesystem(url)
        keys = [filesystem(join(url, n))[1] for n in names]
        with storage_errors(url, "read"):
            found = fs.cat(keys, on_error="return")
        ranges = []
        for name, entry, key in zip(names, manifest["shards"], keys):
            data = found.get(key)
            if not isinstance(data, bytes) or not _matches(data, entry["batches"]):
                data = read_bytes(join(url, name))  # fetched again once: a short or failed download
                if not _matches(data, entry["batches"]):
                    raise UserError(f"{join(url, name)}: its size or sha256 differs from {MANIFEST_NAME}")
            ranges.append(BatchRanges.decode(data, join(url, name)))
        path = shard_cache.dir / STREAMS_FOLDER / hashlib.sha256(url.encode()).hexdigest()[:16]
        staging.show_as(path, url)
        return cls(path, manifest, url, ranges, batch_cache(shard_cache), cache_dir=shard_cache.dir)

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "url": self.url, "ranges": self.ranges, "cache": self.cache}

    def __setstate__(self, state: dict) -> None:
        self.__init__(
            state["path"], state["manifest"], state["url"], state["ranges"], state["cache"],
            cache_tokens=state["cache_tokens"], cache_dir=state["cache_dir"],
        )  # fmt: skip

    def verify(self) -> list[str]:
        """Nothing to check up front: the sidecars were checked when the set opened, each batch is when
        it arrives."""
        return []

    def read_batch(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        return self.read_batches([b])[0]

    def read_batches(self, batches: list[int]) -> list[tuple[np.ndarray, np.ndarray]]:
        data = self._take_prefetched(batches) or self.cache.get([self._range(b) for b in batches])
        return [self._decoded(b, d) for b, d in zip(batches, data)]

    def prefetch(self, batches: list[int]) -> None:
        if self._executor is None or self._executor[0] != os.getpid():  # a copy in a loader worker: its own thread
            self._executor = (os.getpid(), ThreadPoolExecutor(1, thread_name_prefix="ptk-prefetch"))
        ranges = [self._range(b) for b in batches]
        self._prefetched = (list(batches), self._executor[1].submit(self.cache.get, ranges))

    def settle(self) -> None:
        """Until the prefetch in flight, if any, has stored its batches: what the cache holds is then
        what this process's reads left there."""
        if self._prefetched is not None:
            wait([self._prefetched[1]])

    def _take_prefetched(self, batches: list[int]) -> list[bytes] | None:
        if self._prefetched is None or self._prefetched[0] != list(batches):
            return None
        future, self._prefetched = self._prefetched[1], None
        try:
            return future.result()
        except UserError:
            return None  # fetched again by the caller, whose error then names the object

    def _range(self, b: int) -> BatchRange:
        shard, local = self.batches.location(b)
        r = self.ranges[shard]
        url = join(self.url, self.manifest["shards"][shard]["file"])
        return BatchRange(url, int(r.offsets[local]), int(r.sizes[local]), r.sha256[local])

    def _decoded(self, b: int, data: bytes) -> tuple[np.ndarray, np.ndarray]:
        shard, local = self.batches.location(b)
        try:
            batch = decode_record_batch(data, np.dtype(self.dtype), (LENGTH, TOKENS), self.has_urls)
            lengths, tokens = batch.column(0).to_numpy(), batch.column(1).values.to_numpy()
        except Exception as e:  # pyarrow raises many types; the bytes had their sha256, so the writer erred
            raise self._unreadable(shard, local, e) from None
        if len(tokens) != int(lengths.sum(dtype=np.int64)):
            raise self._unreadable(shard, local, ValueError(f"{len(tokens)} tokens, lengths say {int(lengths.sum())}"))
        return lengths, tokens

    def _reader(self, shard: int) -> _StreamedShard:
        return _StreamedShard(self, shard)

    def _unreadable(self, shard: int, local: int, e: Exception) -> UserError:
        return UserError(f"{join(self.url, self.manifest['shards'][shard]['file'])}: batch {local} unreadable ({e})")


class _StreamedShard:
    """One shard of a streamed set, as `ShardSet` reads a shard file: lengths from the sidecar, the
    rest fetched."""

    def __init__(self, ss: StreamedShardSet, shard: int):
        self.ss, self.shard = ss, shard
        self.num_batches = ss.ranges[shard].num_batches

    def lengths(self, i: int) -> np.ndarray:
        return self.ss.ranges[self.shard].lengths(i)

    def tokens(self, i: int) -> np.ndarray:
        return self.ss.read_batches([self._batch(i)])[0][1]

    def ids(self, i: int) -> list[str]:
        return self._column(i, ID)

    def urls(self, i: int) -> list[str | None]:
        return self._column(i, URL)

    def _column(self, i: int, column: int) -> list:
        (data,) = self.ss.cache.get([self.ss._range(self._batch(i))])
        return decode_record_batch(data, np.dtype(self.ss.dtype), (column,), self.ss.has_urls).column(0).to_pylist()

    def _batch(self, i: int) -> int:
        return int(self.ss.batches.shard_batches[self.shard]) + i


def _matches(data: bytes, listed: dict) -> bool:
    return len(data) == listed["bytes"] and hashlib.sha256(data).hexdigest() == listed["sha256"]
