"""The local cache of derived arrays (loader indices), keyed by the fingerprint of what they describe.

    arrays = cached_arrays("shard-batches", ss.fingerprint, lambda: {"docs": ..., "tokens": ...})

A cache entry is a `.npz` file under the cache directory (`cache_dir`: the one given, as a training
config's `data.cache.dir` is, else `$PTK_CACHE_DIR`, else `~/.cache/pretrainkit`), written
to a temporary name and renamed, so that every rank and loader worker that opens the same shard
set reads one small file instead of recomputing it. An entry is only ever derived from
fingerprinted content, so it is never stale; an unreadable entry is rebuilt, and a cache
directory that cannot be written only costs the recomputation.
"""

from __future__ import annotations

import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from pretrainkit.files import atomic_write

CACHE_DIR_ENV = "PTK_CACHE_DIR"


def cache_dir(given: str | os.PathLike | None = None) -> Path:
    """`given`, else `$PTK_CACHE_DIR`, else `~/.cache/pretrainkit`."""
    return Path(given or os.environ.get(CACHE_DIR_ENV) or Path.home() / ".cache" / "pretrainkit")


def cached_arrays(
    kind: str, key: str, build: Callable[[], dict[str, np.ndarray]], root: Path | None = None
) -> dict[str, np.ndarray]:
    """The arrays stored for (kind, key) in the cache directory `root` (None: `cache_dir()`), built and
    stored first if there are none."""
    path = cache_dir(root) / kind / f"{key}.npz"
    try:
        with np.load(path, allow_pickle=False) as f:
            return {name: f[name] for name in f.files}
    except (OSError, ValueError, zipfile.BadZipFile, EOFError):
        pass  # absent or unreadable: build it
    arrays = build()
    try:
        with atomic_write(path, "wb", durable=False) as f:
            np.savez(f, **arrays)
    except OSError:
        pass  # a read-only cache only costs the recomputation next time
    return arrays
