"""The local cache of derived arrays (loader indices), keyed by the fingerprint of what they describe.

    arrays = cached_arrays("shard-batches", ss.fingerprint, lambda: {"docs": ..., "tokens": ...})

A cache entry is a `.npz` file under `$PTK_CACHE_DIR` (default `~/.cache/pretrainkit`), written
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


def cache_dir() -> Path:
    return Path(os.environ.get("PTK_CACHE_DIR") or Path.home() / ".cache" / "pretrainkit")


def cached_arrays(kind: str, key: str, build: Callable[[], dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The arrays stored for (kind, key), built and stored first if there are none."""
    path = cache_dir() / kind / f"{key}.npz"
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
