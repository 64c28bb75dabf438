"""The bounded local cache of record batches read from shards in a bucket: one file per batch, named
by its sha256, checked on every read, evicted least recently used.

    cache = BatchCache(cache_dir() / "record-batches", max_bytes=2 << 30)
    data = cache.get([BatchRange("s3://b/tokens/web/shard-00003.arrow", 1_048_576, 21_403, sha256)])

- Reading: a batch found in the cache whose bytes have its sha256 is used (its time of use renewed);
  the others are fetched at once (fsspec range reads, concurrent requests) and checked against their
  sha256 (from the shard's sidecar, which the manifest vouches for). A short or corrupt download is
  fetched again once, then is one line naming the object and the byte range; a storage error (an
  unreachable bucket, after the backend's retries) is one line naming the object.
- Bound: `max_bytes` (None: unbounded), less what the rest of the cache holds under the same bound:
  `others(wanted)`, which may first let go of some of it (the unused whole shard sets of
  `shards.set_copies`, which also makes room in this folder under the same lock). Fetched batches
  are stored under an exclusive lock on `.lock` in the folder: the least recently used files are
  removed until the new ones fit, then the new ones are written (each to a temporary name, renamed),
  so the folder never holds more than its share of the bound, whatever the processes sharing it do.
  What does not fit is used and not kept.
- Sharing: any number of processes (ranks, loader workers) use one folder. A file is whole or absent
  (renamed into place), and a reader that loses a file to another process's eviction fetches it again:
  nothing depends on a cached file staying. A batch is fetched by one process at a time: each claims
  what it fetches (an exclusive lock on `<folder>-fetching/<sha256>`), and one that finds a batch
  claimed waits for the claim, then reads the batch from the cache, so the ranks of a node reading
  the same window download it once. Claims are taken without waiting and waited for only after the
  process has let go of its own: no two processes wait for each other. Each store lists the folder
  once (O(files), a few ms per ten thousand files), which is why it happens once per window of
  batches, not once per batch.
- Forks: a process forked while one of its threads holds a lock here (a caller's own fork, or a
  DataLoader of its own with forked workers, while a prefetch thread stores a window; TrainLoader's
  workers start from forkserver instead) would hold that lock too, for as long as it lives: an flock
  belongs to the open file, which the child shares. Every lock's descriptor is therefore registered
  while open, and a forked child closes the ones it inherited at once (`os.register_at_fork`); the
  parent's thread still holds its lock and lets go of it as usual.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, is_temporary
from pretrainkit.remote.urls import filesystem, storage_errors

LOCK_NAME = ".lock"
_OPEN_LOCKS: set[int] = set()  # the descriptors of this process's locks (claims and `.lock`) now open
_OPEN_LOCKS_GUARD = threading.Lock()  # held across a fork, so the child's copy of the set is complete


def _open_lock(path: Path) -> int:
    """A new descriptor of lock file `path`, registered until `_close_lock` (see "Forks")."""
    with _OPEN_LOCKS_GUARD:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        _OPEN_LOCKS.add(fd)
    return fd


def _close_lock(fd: int) -> None:
    """Close a descriptor from `_open_lock`, which releases its lock."""
    with _OPEN_LOCKS_GUARD:
        _OPEN_LOCKS.discard(fd)
        os.close(fd)


def _close_inherited_locks() -> None:
    """In a forked child: drop the locks the parent's threads hold (their copies in this process)."""
    for fd in _OPEN_LOCKS:
        os.close(fd)
    _OPEN_LOCKS.clear()
    _OPEN_LOCKS_GUARD.release()


os.register_at_fork(
    before=_OPEN_LOCKS_GUARD.acquire,
    after_in_parent=_OPEN_LOCKS_GUARD.release,
    after_in_child=_close_inherited_locks,
)


@dataclass(frozen=True)
class BatchRange:
    url: str  # the shard object
    offset: int
    size: int
    sha256: bytes  # of bytes [offset, offset + size)

    @property
    def name(self) -> str:
        return self.sha256.hex()


class BatchCache:
    def __init__(self, root: Path, max_bytes: int | None, others: Callable[[int], int] | None = None):
        """`others(wanted)`: the bytes the rest of the cache holds under the same bound once it has made
        what room it can for `wanted` more bytes here; asked under the lock."""
        self.root = Path(root)
        self.max_bytes, self.others = max_bytes, others

    def get(self, ranges: list[BatchRange]) -> list[bytes]:
        """The bytes of each range, from the cache or the bucket (see the module docstring)."""
        out: list[bytes | None] = [self._cached(r) for r in ranges]
        missing = [i for i, data in enumerate(out) if data is None]
        claims = self._claim([ranges[i] for i in missing])
        try:
            self._fetch_into(out, ranges, [i for i in missing if ranges[i].name in claims])
        finally:
            for name, fd in claims.items():
                _remove(self._fetching / name)
                _close_lock(fd)  # releases the claim: whoever waits for it finds the batch stored
        others = [i for i in missing if ranges[i].name not in claims]
        for i in others:
            self._wait_for(ranges[i])
            out[i] = self._cached(ranges[i])
        self._fetch_into(out, ranges, [i for i in others if out[i] is None])  # evicted meanwhile, or failed there
        return out

    @property
    def _fetching(self) -> Path:
        """Where a process claims the batches it is fetching (a lock file each), so that the others wait
        for them instead of fetching them too: the ranks of a node read the same windows."""
        return self.root.with_name(self.root.name + "-fetching")

    def _claim(self, ranges: list[BatchRange]) -> dict[str, int]:
        """An exclusive lock on each range's claim that no one else holds: {name: descriptor}."""
        claims: dict[str, int] = {}
        if ranges:
            self._fetching.mkdir(parents=True, exist_ok=True)
        for r in ranges:
            if r.name in claims:
                continue
            fd = _open_lock(self._fetching / r.name)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                _close_lock(fd)
                continue
            claims[r.name] = fd
        return claims

    def _wait_for(self, r: BatchRange) -> None:
        """Until whoever claimed `r` lets go of it."""
        fd = _open_lock(self._fetching / r.name)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
        finally:
            _close_lock(fd)
        _remove(self._fetching / r.name)

    def _fetch_into(self, out: list[bytes | None], ranges: list[BatchRange], indices: list[int]) -> None:
        """Fetch ranges[i] for each i into out[i], checked (a bad one fetched again once), and store them."""
        for _ in range(2):
            missing = [i for i in indices if out[i] is None]
            if not missing:
                break
            for i, data in zip(missing, _fetch([ranges[i] for i in missing])):
                if len(data) == ranges[i].size and hashlib.sha256(data).digest() == ranges[i].sha256:
                    out[i] = data
        else:
            bad = ranges[next(i for i in indices if out[i] is None)]
            raise UserError(
                f"{bad.url}: bytes {bad.offset}-{bad.offset + bad.size - 1} fetched twice, and both times their "
                "size or sha256 differs from the shard's record-batch sidecar"
            )
        self._store([(ranges[i], out[i]) for i in indices])

    def _cached(self, r: BatchRange) -> bytes | None:
        path = self.root / r.name
        try:
            data = path.read_bytes()
        except OSError:  # absent, or evicted by another process a moment ago
            return None
        if len(data) != r.size or hashlib.sha256(data).digest() != r.sha256:
            _remove(path)  # a damaged file: fetched again and stored anew
            return None
        try:
            os.utime(path)  # its time of use, for eviction
        except OSError:
            pass
        return data

    def _store(self, fetched: list[tuple[BatchRange, bytes]]) -> None:
        if not fetched:
            return
        with self.locked():
            if self.max_bytes is not None:
                fetched = self._make_room(fetched)
            for r, data in fetched:
                with atomic_write(self.root / r.name, "wb", durable=False) as f:
                    f.write(data)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """The folder's exclusive lock, held by whatever stores batches or makes room in it."""
        self.root.mkdir(parents=True, exist_ok=True)
        fd = _open_lock(self.root / LOCK_NAME)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            _close_lock(fd)  # releases the lock

    def shrink_to(self, limit: int) -> None:
        """Under `locked()`: remove the least recently used files until the folder holds at most `limit` bytes."""
        self._evict_down_to(self._files(), limit)

    def _make_room(self, fetched: list[tuple[BatchRange, bytes]]) -> list[tuple[BatchRange, bytes]]:
        """Remove the least recently used files until `fetched` fits; the part of it that fits."""
        files = self._files()
        taken = {name for _, name, _ in files}  # already there (another process stored it): kept as it is
        wanted = sum(size for _, _, size in files) + sum(len(data) for r, data in fetched if r.name not in taken)
        new, room = [], self.max_bytes - (self.others(wanted) if self.others else 0)
        for r, data in fetched:
            if r.name not in taken and len(data) <= room:
                new.append((r, data))
                taken.add(r.name)
                room -= len(data)
        self._evict_down_to(files, room)
        return new

    def _files(self) -> list[tuple[float, str, int]]:
        """(time of use, name, size) of each batch file; a dead writer's temporary removed."""
        files = []
        for entry in os.scandir(self.root):
            if entry.name == LOCK_NAME:
                continue
            if is_temporary(entry.name):  # every write holds the lock: a temporary seen here is a dead writer's
                _remove(entry.path)
                continue
            try:
                stat = entry.stat()
            except OSError:
                continue
            files.append((stat.st_mtime, entry.name, stat.st_size))
        return files

    def _evict_down_to(self, files: list[tuple[float, str, int]], limit: int) -> None:
        used = sum(size for _, _, size in files)
        for _, name, size in sorted(files):
            if used <= limit:
                break
            _remove(self.root / name)
            used -= size


def _fetch(ranges: list[BatchRange]) -> list[bytes]:
    """The bytes of every range, read at once (one request each, concurrent)."""
    fs, _ = filesystem(ranges[0].url)
    with storage_errors(ranges[0].url, "read"):
        results = fs.cat_ranges(
            [filesystem(r.url)[1] for r in ranges],
            [r.offset for r in ranges],
            [r.offset + r.size for r in ranges],
            on_error="return",
        )
    for r, result in zip(ranges, results):
        if isinstance(result, BaseException):
            with storage_errors(r.url, "read"):
                raise result
    return [bytes(result) for result in results]


def _remove(path: str | os.PathLike) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
