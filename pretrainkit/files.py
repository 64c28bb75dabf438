"""Atomic file writes and content hashes: every file the toolkit writes goes through here.

    with atomic_write(path, "wb") as f:
        f.write(data)

The data is written to `<name>.tmp-<pid>` in the same directory, flushed and renamed over the
final name, so a process killed at any moment leaves either the old file, the new file, or a
`.tmp-*` leftover that no reader accepts (and that `remove_temporaries` clears). Files are also
fsynced before the rename, so that they survive an operating-system crash too, unless the caller
passes `durable=False`: intermediate files that a rerun recreates anyway (a dedup run's work
files and index arrays, which cost ~5 ms each to sync).

Output locations: `output_directory(OUT)` / `output_file(PATH)` check up front that the command can
write there (one `UserError` naming the path otherwise: a file where a directory is wanted, a
read-only file system, no permission); `with writing_into(OUT):` turns a later failed write (a full
disk) into one line naming the file or OUT, and removes every `.tmp-*` left under OUT.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from pretrainkit.errors import UserError, os_error

TMP_MARK = ".tmp-"


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", durable: bool = True, **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; rename it over `path` on success."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(tmp, mode, **kwargs)
    except OSError as e:  # named after the file meant, not its temporary
        raise OSError(e.errno, e.strerror, str(path)) from None
    try:
        with f:
            yield f
            f.flush()
            if durable:
                os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


def fsync_all(files: Sequence[IO]) -> None:
    """Flush and fsync open files at once, in threads (the disk takes them in one go; one after
    the other, each waits for the device)."""
    for f in files:
        f.flush()
    with ThreadPoolExecutor(len(files)) as pool:
        list(pool.map(lambda f: os.fsync(f.fileno()), files))


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


def remove_temporaries(directory: str | os.PathLike, recursive: bool = False) -> None:
    """Delete leftovers of interrupted atomic writes inside `directory` (directly, or at any depth)."""
    directory = Path(directory)
    if directory.is_dir():
        for p in directory.rglob(f"*{TMP_MARK}*") if recursive else directory.iterdir():
            if TMP_MARK in p.name and p.is_file():
                p.unlink(missing_ok=True)


# A failed write without a file name is still about the output when it is one of these.
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM}


def output_directory(path: str | os.PathLike) -> Path:
    """Create `path` (and its parents) as a directory to write into, or say in one line why not."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise UserError(f"{path}: exists and is not a directory (the output here is a directory)")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise os_error(e, path) from None
    _check_writable(path)
    return path


def output_file(path: str | os.PathLike) -> Path:
    """Check that file `path` can be written (its directory is made if missing), or say in one line why not."""
    path = Path(path)
    if path.is_dir():
        raise UserError(f"{path}: is a directory (the output here is a file)")
    output_directory(path.parent)
    return path


def _check_writable(directory: Path) -> None:
    if os.statvfs(directory).f_flag & os.ST_RDONLY:
        raise UserError(f"{directory}: read-only file system")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UserError(f"{directory}: permission denied (cannot write into it)")


@contextlib.contextmanager
def writing_into(out: str | os.PathLike) -> Iterator[None]:
    """A failed write under `out` (full disk, quota, read-only) becomes one line naming the file, or
    `out` where the error names none; on any failure, temporaries left under `out` (by this process
    or its killed workers) are removed, so only finished files remain for a rerun."""
    try:
        yield
    except BaseException as e:
        remove_temporaries(out, recursive=True)
        if isinstance(e, OSError) and (e.filename is not None or e.errno in WRITE_ERRNOS):
            raise os_error(e, out) from None
        raise


def read_json_object(path: str | os.PathLike, what: str) -> dict:
    """The JSON object in `path`, or a one-line UserError naming the file as not being `what`."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise UserError(f"{path}: cannot read {what}: {e}") from None
    if not isinstance(data, dict):
        raise UserError(f"{path}: not {what} (expected a JSON object)")
    return data


def sha256_file(path: str | os.PathLike, chunk_size: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(chunk_size):
            h.update(chunk)
    return h.hexdigest()


def write_concatenation_atomic(sources: list[Path], target: str | os.PathLike) -> None:
    """`target` holds the sources' bytes one after the other (per-job pieces joined in job order)."""
    with atomic_write(target) as out:
        for src in sources:
            with open(src, "rb") as f:
                shutil.copyfileobj(f, out)
