"""Fixtures for dataprep tests: real corpora from ../shared/data written as JSONL inputs; the process table
and the processes a command started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixtures import corpora


def need_shared_data() -> None:
    corpora.need_data(corpora.DATA)


@pytest.fixture(scope="session")
def reuters_docs() -> list[tuple[str, str]]:
    need_shared_data()
    return corpora.reuters_documents(files=6)


@pytest.fixture(scope="session")
def license_docs() -> list[tuple[str, str]]:
    need_shared_data()
    return corpora.license_documents()


@pytest.fixture(scope="session")
def reuters_jsonl(tmp_path_factory, reuters_docs) -> Path:
    return corpora.write_jsonl(reuters_docs, tmp_path_factory.mktemp("reuters") / "reuters.jsonl")


def live_processes() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, first word of its command line) of every process alive (zombies are dead)."""
    found = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{name}/cmdline", "rb") as f:
                title = f.read().split(b"\0")[0].decode(errors="replace")
        except OSError:
            continue
        if fields[0] != "Z":
            found[int(name)] = (int(fields[1]), title)
    return found


@pytest.fixture(scope="session")
def process_table():
    """`live_processes`, for tests about the processes a command leaves."""
    return live_processes


def started_by(command: int) -> dict[str, set[int]]:
    """The live processes that `command` started: its workers, forked from it or (from a process with
    threads, as ptk's are once numpy's BLAS pool or Arrow's allocator thread runs) by multiprocessing's
    forkserver, whose children they then are; and its helpers, that server and the resource tracker."""
    table = live_processes()
    children = {pid for pid, (ppid, _) in table.items() if ppid == command}
    helpers = {pid for pid in children if b"multiprocessing" in _command_line(pid)}
    workers = (children - helpers) | {pid for pid, (ppid, _) in table.items() if ppid in helpers}
    return {"workers": workers, "helpers": helpers}


def _command_line(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it has ended
        return b""


@pytest.fixture(scope="session")
def processes_started_by():
    """`started_by`, for tests about a command's workers."""
    return started_by
