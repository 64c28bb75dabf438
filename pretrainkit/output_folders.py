"""Which command owns an output folder, and which run of it is writing there now.

    with output_folder(out, DEDUP):     # UserError unless `out` is empty, missing or a dedup output;
        ...                             # another run writing there: "OUT is in use by pid N (host H)"
    check_folder(run, TRAIN, "ptk init")   # the ownership check alone, writing nothing
    probe_lock(run_dir)                 # the lock check alone (`ptk train --nproc N`, before torchrun)

Ownership: a command writes only into a folder that is missing, empty, or holds its own kind of
output, so that one command's files never replace another's (a tokenize into a dedup output would
overwrite its `rejected.jsonl` under stats that still count it). The folder's kind is the marker
`MARKER_NAME` (`{"format": 1, "output_of": "ptk dedup"}`: nothing else, so that the same inputs still
give byte-identical folders), written atomically once the run holds the folder. Folders written
before markers existed are recognised by their files (`Kind.recognise`). A run directory is the
exception to "empty": `ptk train` also writes beside the user's own files (`ptk init` puts the
configs in the run directory), never into another command's output. A run that fails before
writing anything else takes its marker back (and the folder, if it made it). A `ptk prepare` output
owns the folders under it too: its stages write there, each with its own command's marker (the same
bytes as the command's own output), and no other run may, so that a resumed prepare never takes
another command's files for a stage it finished; only the process holding the prepare's folder
writes below it.

Concurrency: a run holds an exclusive `fcntl.flock` on `LOCK_NAME` in the folder for as long as it
writes there; a second run is refused at once, naming the holder's pid and host (the holder writes
them into the lock file after taking it: in place, not through `pretrainkit.files`, since renaming
another file over it would lose the lock). The kernel releases the lock when the process dies, so a
`kill -9` never leaves a stale one; the file left then is taken over by the next run. On a clean exit
the holder removes the file while it still holds the lock; a run that had opened it just before and
locks it just after finds its inode no longer at the path and tries again on the new one. Locks are
per process and re-entrant (`ptk dedup` holds OUT around its runner, `run_dedup` again inside); forked
workers close their inherited copy, so they never keep a folder locked after the run has ended.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import shutil
import socket
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.errors import UserError, os_error, shortened
from pretrainkit.files import TMP_MARK, output_directory, read_json_object, write_text_atomic
from pretrainkit.stage_layout import LOCK_NAME, MARKER_NAME, STATS_NAME, WORK_NAME

MARKER_FORMAT = 1
HOLDER_WAIT_S = 1.0  # how long a refused run waits for the holder to write its pid into the lock file


def own_name(name: str) -> bool:
    """Whether a file name is this module's (the marker, its temporary, the lock): no output's content."""
    return name == LOCK_NAME or name == MARKER_NAME or name.startswith(MARKER_NAME + TMP_MARK)


@dataclass(frozen=True)
class Kind:
    name: str  # the command, as the marker and messages name it
    recognise: Callable[[Path], bool]  # an output of this command written before markers existed
    user_files: bool = False  # whether the folder may also hold files of no command (a run dir's configs)

    @property
    def accepts(self) -> str:
        if self.user_files:
            return f"a folder holding no other command's output (a new one, one of your files, or a {self.name} run)"
        return f"an empty folder or a {self.name} output"


def _has(folder: Path, *names: str, directory: bool = False) -> bool:
    return any((folder / n).is_dir() if directory else (folder / n).is_file() for n in names)


DEDUP = Kind(
    "ptk dedup", lambda f: _has(f, STATS_NAME) or _has(f, "index", directory=True) or (f / WORK_NAME / "parts").is_dir()
)
TOKENIZE = Kind("ptk tokenize", lambda f: _has(f, "manifest.json") or _has(f, WORK_NAME, directory=True))
PREPARE = Kind("ptk prepare", lambda f: bool(_entries(f)) and set(_entries(f)) <= {"dedup", "shards"})
EXPORT = Kind(
    "ptk export",
    lambda f: _has(f, "pretrainkit_model.json") or (_has(f, "config.json") and _has(f, "tokenizer_config.json")),
)
TRAIN = Kind("ptk train", lambda f: _has(f, "metrics.jsonl") or _has(f, "checkpoints", directory=True), True)
# Every extract output has its marker (the command came after markers): no old output to recognise.
EXTRACT = Kind("ptk extract", lambda f: False)
DECONTAMINATE = Kind("ptk decontaminate", lambda f: False)  # never written without a marker: none to recognise
FILTER = Kind("ptk filter", lambda f: False)  # never written without a marker: none to recognise
PARAGRAPHS = Kind("ptk dedup --paragraphs", lambda f: False)  # never written without a marker: none to recognise
SPLIT = Kind("ptk split", lambda f: False)  # never written without a marker: none to recognise
SCORE = Kind("ptk score", lambda f: False)  # never written without a marker: none to recognise
MIX_SEARCH = Kind("ptk mix search", lambda f: False)  # never written without a marker: none to recognise
KINDS = (DEDUP, TOKENIZE, PREPARE, EXPORT, TRAIN)  # the order old outputs are recognised in


def _entries(folder: Path) -> list[str]:
    try:
        return sorted(n for n in os.listdir(folder) if not own_name(n))
    except FileNotFoundError:
        return []
    except OSError as e:
        raise os_error(e, folder) from None


def owner(folder: str | os.PathLike) -> str | None:
    """The command whose output `folder` holds ("ptk dedup"), "" for files of no command, None when
    it is missing or empty (of anything but this module's own files)."""
    folder = Path(folder)
    marker = folder / MARKER_NAME
    if marker.is_file():
        data = read_json_object(marker, "a pretrainkit output marker")
        if not isinstance(data.get("output_of"), str):
            raise UserError(f"{marker}: not a pretrainkit output marker (no 'output_of')")
        return data["output_of"]
    if not _entries(folder):
        return None
    return next((k.name for k in KINDS if k.recognise(folder)), "")


def check_folder(folder: str | os.PathLike, kind: Kind, writer: str | None = None) -> None:
    """A UserError unless `kind`'s command may write into `folder` (see the module docstring); `writer`
    names another command that writes there for it (`ptk init` writes a run directory's configs)."""
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        return  # output_directory says so, in its words
    prepare = _prepare_above(folder)
    if prepare is not None:
        raise UserError(
            f"{folder}: lies inside the {PREPARE.name} output {prepare}, whose folders only its own runs write; "
            "choose another output"
        )
    found = owner(folder)
    if found is None or found == kind.name or (found == "" and kind.user_files):
        return
    writes = f"{writer or kind.name} writes only into {kind.accepts}"
    if found:
        raise UserError(f"{folder}: holds a {found} output; {writes}")
    names = _entries(folder)
    shown = ", ".join(shortened(n, 60) for n in names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    raise UserError(f"{folder}: holds files of no ptk output ({shown}); {writes}")


def _prepare_above(folder: Path) -> Path | None:
    """The folder above `folder` that holds a `ptk prepare` output (by its marker), unless this process
    holds it: then `folder` is one of the prepare's stages."""
    for parent in Path(os.path.abspath(folder)).parents:
        if os.path.isfile(parent / MARKER_NAME) and owner(parent) == PREPARE.name:
            return None if os.path.realpath(parent) in _HELD else parent
    return None


class InUse(UserError):
    """Another process holds the folder's lock."""


@contextlib.contextmanager
def prefixed(prefix: str) -> Iterator[None]:
    """A UserError from checking an output gets `prefix` (what names it: `-o`, `run.yaml: run_dir:`);
    `InUse` keeps its shape, `OUT is in use by pid N (host H)`."""
    try:
        yield
    except InUse:
        raise
    except UserError as e:
        raise UserError(f"{prefix} {e}") from None


_HELD: dict[str, int] = {}  # real path of a folder -> the fd of its lock, for the folders this process holds


def _close_inherited() -> None:
    for fd in _HELD.values():
        os.close(fd)
    _HELD.clear()


os.register_at_fork(after_in_child=_close_inherited)


@contextlib.contextmanager
def output_folder(folder: str | os.PathLike, kind: Kind) -> Iterator[Path]:
    """Hold `folder` for a run of `kind`: checked (before anything is written there), made, locked,
    checked again under the lock, marked; unlocked at the end. Re-entrant within a process."""
    folder = Path(folder)
    check_folder(folder, kind)
    key = os.path.realpath(folder)
    if key in _HELD:  # an inner stage of the run that holds it
        yield folder
        return
    created = not folder.exists()
    output_directory(folder)
    fd = _lock(folder)
    _HELD[key] = fd
    marked = False
    try:
        check_folder(folder, kind)  # what another run may have made of it before this one took the lock
        marked = _mark(folder, kind)
        yield folder
    finally:
        if marked and not _entries(folder):  # nothing written: leave the folder as it was
            (folder / MARKER_NAME).unlink(missing_ok=True)
        del _HELD[key]
        _unlock(folder, fd)
        if created:
            with contextlib.suppress(OSError):
                folder.rmdir()  # only when empty


def _mark(folder: Path, kind: Kind) -> bool:
    """Write the marker unless it is there already; True when this call wrote it."""
    if (folder / MARKER_NAME).is_file():
        return False
    write_text_atomic(folder / MARKER_NAME, json.dumps({"format": MARKER_FORMAT, "output_of": kind.name}) + "\n")
    return True


def probe_lock(folder: str | os.PathLike) -> None:
    """Raise `InUse` if another process holds `folder`; take and release the lock otherwise (a missing
    folder is held by no one)."""
    folder = Path(folder)
    if folder.is_dir() and os.path.realpath(folder) not in _HELD:
        _unlock(folder, _lock(folder))


def publish(built: Path, folder: Path) -> None:
    """Replace `folder` by `built` (a sibling written under a temporary name), keeping its marker and
    this run's lock: they move into `built` first (the same inode, so the lock holds), then the swap."""
    for name in (LOCK_NAME, MARKER_NAME):
        with contextlib.suppress(FileNotFoundError):
            os.replace(folder / name, built / name)
    shutil.rmtree(folder, ignore_errors=True)
    built.rename(folder)


def _lock(folder: Path) -> int:
    path = folder / LOCK_NAME
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise os_error(e, path) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _holder(fd) if e.errno in (errno.EAGAIN, errno.EACCES) else None
            os.close(fd)
            if holder is None:
                raise UserError(f"{path}: cannot lock: {e.strerror}") from None
            raise InUse(f"{folder} is in use by {holder}") from None
        try:
            current = os.stat(path).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            break
        os.close(fd)  # the holder removed this file on its way out: lock the one at the path now
    os.ftruncate(fd, 0)
    os.pwrite(fd, json.dumps({"pid": os.getpid(), "host": socket.gethostname()}).encode() + b"\n", 0)
    return fd


def _holder(fd: int) -> str:
    """`pid N (host H)` from the lock file, waiting a moment for a holder that has just taken it."""
    deadline = time.monotonic() + HOLDER_WAIT_S
    while True:
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            data = json.loads(os.pread(fd, 4096, 0))
            return f"pid {int(data['pid'])} (host {shortened(str(data['host']), 100)})"
        if time.monotonic() > deadline:
            return "another process"
        time.sleep(0.02)


def _unlock(folder: Path, fd: int) -> None:
    path = folder / LOCK_NAME
    with contextlib.suppress(OSError):
        if os.stat(path).st_ino == os.fstat(fd).st_ino:
            path.unlink()  # while still locked: see the module docstring
    os.close(fd)
