"""Atomic file writes and content hashes: every file the toolkit writes goes through here.

    with atomic_write(path, "wb") as f:
        f.write(data)

The data is written to `<name>.tmp-<pid>` in the same directory, flushed and renamed over the
final name, so a process killed at any moment leaves either the old file, the new file, or a
`.tmp-<pid>` leftover that no reader accepts (and that `remove_temporaries` clears in a directory the
command owns; a user's `draft.tmp-v2.txt` is no temporary). Files are also
fsynced before the rename, so that they survive an operating-system crash too, unless the caller
passes `durable=False`: intermediate files that a rerun recreates anyway (a dedup run's work
files and index arrays, which cost ~5 ms each to sync).

Output locations: `output_directory(OUT)` / `output_file(PATH)` check up front that the command can
write there (one `UserError` naming the path otherwise: a file where a directory is wanted, a
read-only file system, no permission); `with writing_into(OUT):` turns a later failed write (a full
disk) into one line naming the file or OUT, and removes the temporaries this process made (by name,
wherever they are) and those left in the directories the caller says the command owns. Nothing else
is swept: OUT may be a user's folder, holding other files and another run's temporaries.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import IO

from pretrainkit.errors import UserError, os_error

TMP_MARK = ".tmp-"
_TEMPORARY_NAME = re.compile(re.escape(TMP_MARK) + r"\d+$")

# The temporaries this process has made and not yet published or removed: on a failure, these are
# the only files outside a command's own directories that it may delete.
_OWN_TEMPORARIES: set[Path] = set()


def temporary_path(path: str | os.PathLike) -> Path:
    """The temporary sibling this process writes `path` through, registered as its own until
    `release_temporary` (renamed into place, or removed)."""
    path = Path(path)
    tmp = path.with_name(f"{path.name}{TMP_MARK}{os.getpid()}")
    _OWN_TEMPORARIES.add(tmp)
    return tmp


def release_temporary(tmp: Path) -> None:
    _OWN_TEMPORARIES.discard(Path(tmp))


@contextlib.contextmanager
def atomic_write(path: str | os.PathLike, mode: str = "wb", durable: bool = True, **kwargs) -> Iterator[IO]:
    """Open a temporary sibling of `path` for writing; rename it over `path` on success."""
    path = Path(path)
    tmp = temporary_path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(tmp, mode, **kwargs)
    except OSError as e:  # named after the file meant, not its temporary
        release_temporary(tmp)
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
    finally:
        release_temporary(tmp)


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


def is_temporary(name: str) -> bool:
    """Whether a file name is an atomic write's temporary (`shard-00000.bin.tmp-4711`)."""
    return _TEMPORARY_NAME.search(name) is not None


def remove_temporaries(directory: str | os.PathLike, recursive: bool = False) -> None:
    """Delete leftovers of interrupted atomic writes inside `directory` (directly, or at any depth):
    only for a directory the command owns, where every temporary is one of its runs'."""
    directory = Path(directory)
    if directory.is_dir():
        for p in directory.rglob(f"*{TMP_MARK}*") if recursive else directory.iterdir():
            if is_temporary(p.name) and p.is_file():
                p.unlink(missing_ok=True)


def remove_own_temporaries() -> None:
    """Delete the temporaries this process made and left (a write cut short before its own cleanup)."""
    for tmp in list(_OWN_TEMPORARIES):
        tmp.unlink(missing_ok=True)
        release_temporary(tmp)


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
def writing_into(
    out: str | os.PathLike, owned: Sequence[Path] = (), owned_trees: Sequence[Path] = ()
) -> Iterator[None]:
    """A failed write under `out` (full disk, quota, read-only) becomes one line naming the file, or
    `out` where the error names none. On any failure the temporaries this process made are removed,
    and those left directly in an `owned` directory or at any depth of an `owned_trees` one (by killed
    workers): the directories only this command writes into, so only finished files remain for a rerun."""
    try:
        yield
    except BaseException as e:
        remove_own_temporaries()
        for d in owned:
            remove_temporaries(d)
        for d in owned_trees:
            remove_temporaries(d, recursive=True)
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


def json_object_or_none(path: str | os.PathLike) -> dict | None:
    """The JSON object in `path`; None when there is none (absent, cut short by a kill, or not an object)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


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
