"""Atomic file writes and content hashes: every file the toolkit writes goes through here.

    with atomic_write(path, "wb") as f:
        f.write(data)

The data is written to `<name>.tmp-<pid>` in the same directory, flushed and renamed over the
final name, so a process killed at any moment leaves either the old file, the new file, or a
`.tmp-*` leftover that no reader accepts (and that `remove_temporaries` clears). Files are also
fsynced before the rename, so that they survive an operating-system crash too, unless the caller
passes `durable=False`: intermediate files that a rerun recreates anyway (a dedup run's work
files and index arrays, which cost ~5 ms each to sync).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
from pathlib import Path
from typing import IO, Iterator

TMP_MARK = ".tmp-"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", durable: bool = True, **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; rename it over `path` on success."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")
    try:
        with open(tmp, mode, **kwargs) as f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def fsync_directory(path: str | os.PathLike) -> None:
    """Make the entries of directory `path` (a file renamed into it) survive an operating-system crash."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: str | os.PathLike, data: bytes) -> None:
    with atomic_write(path, "wb") as f:
        f.write(data)


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))


def remove_temporaries(directory: str | os.PathLike) -> None:
    """Delete leftovers of interrupted atomic writes directly inside `directory`."""
    directory = Path(directory)
    if directory.is_dir():
        for p in directory.iterdir():
            if TMP_MARK in p.name and p.is_file():
                p.unlink()


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()
