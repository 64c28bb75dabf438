"""Shard sets in a bucket, for training and evaluation: each fetched whole into a local cache, checked
against its manifest's sha256 as it arrives, shared by the processes of a machine, and the least
recently used sets evicted when the cache would pass its size bound.

    cache = ShardCache.configured()                     # or (dir, max_bytes) from a training config
    local = shard_set_copy("s3://corpora/tokens/web", cache)   # <cache dir>/shard-sets/<hash of the URL>/

A mixture source whose `shards:` is a URL reads this copy (`mixtures/mixture.py`), so the data order,
the held-out split and the losses are those of the same shard set on a local path: the shard files are
the same bytes, and a shard set's fingerprint is its manifest's.

- Fetching: the bucket's `manifest.json` is read first. A copy whose manifest is the same bytes and
  whose shard files all have their sizes is used as it is (its time of use renewed); otherwise the
  copy's manifest is removed, the missing or wrong-sized shards are fetched (many requests at once)
  and each one's sha256 checked: a truncated or corrupt download is fetched again once, then is one
  line naming the object. Files the manifest does not list are removed, and the manifest is written
  last: a copy without one is not a shard set.
- Sharing: the processes of a machine fetch a set one at a time (an exclusive lock on
  `<hash>.lock`); the others wait and then find it complete. Each process that uses a copy keeps a
  shared lock on it until it exits, so no other process evicts a set in use.
- Settings: `ShardCache` (the cache directory, the bound), given to every function here and carried
  by the shard sets opened through it into the processes they are sent to (loader workers): a
  training config's `data.cache.{dir, max_bytes}`, else `$PTK_CACHE_DIR` and `$PTK_SHARD_CACHE_BYTES`.
- Bound: `max_bytes` (K/M/G suffixes; default unbounded), on the whole cache: these
  copies and the streamed record batches (`batch_cache(cache)`) together, accounted under the batch
  folder's lock. Before a fetch, copies of other sets not in use are evicted, least recently used
  first, then batch files, until the fetched set fits; its size is then reserved (`<hash>.bytes`),
  so batches stored while it arrives leave it room. Batches to store evict unused copies the same
  way before they evict older batches. A set that cannot fit beside the sets in use is `NoRoom` (one line
  naming both figures): `shards.streamed` then streams it a record batch at a time, as it does
  a set larger than the bound itself.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import os
import shutil
from argparse import ArgumentTypeError
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.cache import cache_dir
from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file, write_bytes_atomic
from pretrainkit.quantities import byte_size, quantity
from pretrainkit.remote import staging
from pretrainkit.remote.transfer import download_all, read_bytes
from pretrainkit.remote.urls import join
from pretrainkit.shards.batch_cache import BatchCache
from pretrainkit.shards.formats import MANIFEST_NAME
from pretrainkit.shards.verify import listed_files

MAX_BYTES_ENV = "PTK_SHARD_CACHE_BYTES"
FOLDER = "shard-sets"
BATCHES_FOLDER = "record-batches"
RESERVED_SUFFIX = ".bytes"  # beside a copy: the bytes it takes once complete, reserved before its fetch
_IN_USE: dict[Path, int] = {}  # copy -> the descriptor of this process's lock on it


class NoRoom(UserError):
    """A shard set that fits the bound, but not beside the sets in use."""


@dataclass(frozen=True)
class ShardCache:
    """The local cache of shard sets in a bucket: its directory and the bound on what it holds (None:
    unbounded)."""

    dir: Path
    max_bytes: int | None

    @classmethod
    def configured(cls, dir: str | os.PathLike | None = None, max_bytes: str | None = None) -> ShardCache:
        """The settings given (a training config's `data.cache`), each unset one from its variable."""
        text, name = (max_bytes, "max_bytes") if max_bytes else (os.environ.get(MAX_BYTES_ENV), MAX_BYTES_ENV)
        return cls(cache_dir(dir), _size(text, name) if text else None)


def batch_cache(cache: ShardCache) -> BatchCache:
    """The machine's cache of streamed record batches, under the same bound as the whole copies."""
    others = functools.partial(_copies_beside_batches, cache)
    return BatchCache(cache.dir / BATCHES_FOLDER, cache.max_bytes, others)


def _copies_beside_batches(cache: ShardCache, wanted: int) -> int:
    """For the batch cache, under its lock: unused copies evicted, least recently used first, until
    `wanted` bytes of batches fit beside the copies under the bound; the bytes the copies then hold."""
    sizes = _copies(cache.dir / FOLDER)
    _evict_unused(sizes, wanted, cache.max_bytes)
    return sum(sizes.values())


def shard_set_copy(url: str, cache: ShardCache) -> Path:
    """The shard set at `url` as a complete local copy in the cache (see the module docstring); NoRoom
    when it cannot fit beside the sets in use."""
    url = url.rstrip("/")
    root = cache.dir / FOLDER
    copy = root / hashlib.sha256(url.encode()).hexdigest()[:16]
    manifest_bytes = read_bytes(join(url, MANIFEST_NAME))
    shards = _listed_shards(url, manifest_bytes)
    fd = _lock_fd(copy)
    fcntl.flock(fd, fcntl.LOCK_SH)
    if not _complete(copy, manifest_bytes, shards):
        fcntl.flock(fd, fcntl.LOCK_EX)  # waits for the processes still reading an older copy
        try:
            if not _complete(copy, manifest_bytes, shards):
                _make_room(cache, copy, len(manifest_bytes) + sum(size for size, _ in shards.values()))
                _fetch(url, copy, manifest_bytes, shards)
        except NoRoom:
            os.close(_IN_USE.pop(copy))  # nothing of it is kept: no lock to hold
            raise
        finally:
            if copy in _IN_USE:
                fcntl.flock(fd, fcntl.LOCK_SH)
    os.utime(copy)  # its time of use, for eviction
    staging.show_as(copy, url)
    return copy


def _lock_fd(copy: Path) -> int:
    """This process's descriptor of `copy`'s lock, opened once and kept (with its shared lock, once
    taken) until the process exits, so that no other process evicts a copy in use."""
    if copy not in _IN_USE:
        copy.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(copy.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o644)
        os.set_inheritable(fd, False)
        _IN_USE[copy] = fd
    return _IN_USE[copy]


def _listed_shards(url: str, manifest_bytes: bytes) -> dict[str, tuple[int, str]]:
    """The manifest's shard files (and record-batch sidecars) by name, with their sizes and sha256."""
    try:
        entries = listed_files(json.loads(manifest_bytes))
    except (ValueError, KeyError, TypeError) as e:
        raise UserError(f"{join(url, MANIFEST_NAME)}: not a shard set manifest ({e})") from None
    for name in entries:
        if "/" in name or name.startswith("."):
            raise UserError(f"{join(url, MANIFEST_NAME)}: shard file name {name!r} is not a plain file name")
    return entries


def _complete(copy: Path, manifest_bytes: bytes, shards: dict[str, tuple[int, str]]) -> bool:
    try:
        if (copy / MANIFEST_NAME).read_bytes() != manifest_bytes:
            return False
        return all((copy / name).stat().st_size == size for name, (size, _) in shards.items())
    except OSError:
        return False


def _fetch(url: str, copy: Path, manifest_bytes: bytes, shards: dict[str, tuple[int, str]]) -> None:
    copy.mkdir(parents=True, exist_ok=True)
    (copy / MANIFEST_NAME).unlink(missing_ok=True)
    for path in copy.iterdir():
        if path.name not in shards:
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    wanted = {name: size for name, (size, digest) in shards.items() if not _whole(copy / name, size, digest)}
    for _ in range(2):
        staging.in_batches(
            wanted,
            f"fetch {url.rsplit('/', 1)[-1]}",
            lambda batch: download_all([(join(url, name), copy / name) for name in batch], url),
        )
        wanted = {name: size for name, size in wanted.items() if not _whole(copy / name, *shards[name])}
        if not wanted:
            break
        for name in wanted:
            (copy / name).unlink(missing_ok=True)
    if wanted:
        name = sorted(wanted)[0]
        raise UserError(
            f"{join(url, name)}: fetched twice, and both times its size or sha256 differs from {MANIFEST_NAME}"
        )
    write_bytes_atomic(copy / MANIFEST_NAME, manifest_bytes)


def _whole(path: Path, size: int, digest: str) -> bool:
    try:
        return path.stat().st_size == size and sha256_file(path) == digest
    except OSError:
        return False


def _size(text: str, name: str) -> int:
    try:
        value = quantity(text)
    except ArgumentTypeError:
        value = -1
    if value < 1:
        raise UserError(f"{name}={text}: must be a size in bytes (K/M/G suffixes), e.g. 50G")
    return int(value)


def _make_room(cache: ShardCache, copy: Path, needed: int) -> None:
    """Evict unused copies of other sets, least recently used first, then batch files, until `needed`
    bytes fit the bound; reserve them. NoRoom when the sets in use leave too little."""
    limit, root = cache.max_bytes, cache.dir / FOLDER
    if limit is None:
        return
    batches = batch_cache(cache)
    with batches.locked():
        sizes = _copies(root, but=copy)
        _evict_unused(sizes, needed, limit)
        if sum(sizes.values()) + needed > limit:
            raise NoRoom(
                f"{MAX_BYTES_ENV}={byte_size(limit)}: the shard set {copy.name} ({byte_size(needed)}) does not fit "
                f"beside the {len(sizes)} shard set(s) in use in {root} ({byte_size(sum(sizes.values()))})"
            )
        batches.shrink_to(limit - sum(sizes.values()) - needed)
        write_bytes_atomic(copy.with_suffix(RESERVED_SUFFIX), str(needed).encode())


def _copies(root: Path, but: Path | None = None) -> dict[Path, int]:
    """The copies in `root` (but `but`), each with the bytes it holds."""
    return {p: _held(p) for p in root.iterdir() if p.is_dir() and p != but} if root.is_dir() else {}


def _evict_unused(sizes: dict[Path, int], needed: int, limit: int | None) -> None:
    """Evict copies of `sizes` (copy: bytes) that no process uses, least recently used first, until
    `needed` more bytes fit `limit` beside the rest; the evicted ones leave `sizes`."""
    for victim in sorted(sizes, key=lambda p: p.stat().st_mtime):
        if limit is None or sum(sizes.values()) + needed <= limit:
            break
        if _evict(victim):
            del sizes[victim]


def _held(copy: Path) -> int:
    """A copy's bytes: its reservation, or (a copy made before reservations, or one being evicted) its files."""
    try:
        return int(copy.with_suffix(RESERVED_SUFFIX).read_text())
    except (OSError, ValueError):
        pass
    held = 0
    for path in copy.rglob("*"):
        try:
            held += path.stat().st_size if path.is_file() else 0
        except OSError:  # a temporary renamed by a process fetching into an unbounded cache
            pass
    return held


def _evict(copy: Path) -> bool:
    """Remove `copy` unless a process holds it; whether it was removed."""
    lock = copy.with_suffix(".lock")
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        shutil.rmtree(copy, ignore_errors=True)
        copy.with_suffix(RESERVED_SUFFIX).unlink(missing_ok=True)
        return True
    finally:
        os.close(fd)
