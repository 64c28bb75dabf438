"""A run's work directory: intermediate files and finished-job markers that let a killed run resume.

    if not open_work_dir(out / WORK_NAME, {"inputs": ..., "options": ...}, on_reset=clear_index):
        ...  # a fresh start: nothing of an earlier run is reused
    remove_parts(out, first=len(jobs))  # kept parts of an earlier run over more input

A rerun keeps the work directory only when its plan (inputs with their stamps, the jobs, the
options) is the same as the interrupted run's, so a finished job's files are reused only for the
same job. On a different plan the directory is emptied, `on_reset` clears what the run keeps
elsewhere, and only then is the new plan stamped, so a kill in between never pairs old files with
the new plan.

An input's stamp (`file_stamp`) is its size, modification time and a hash of its first and last
`STAMP_BYTES`: a file edited in place that keeps its size and time (a copy with `cp -p`, `touch -r`)
is another plan too, unless the edit lies wholly between those ends of a file larger than twice
`STAMP_BYTES`. Stamping reads at most 2 MiB per input (all of a smaller one).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from pretrainkit.files import write_text_atomic
from pretrainkit.stage_layout import KEPT_GLOB, PLAN_MARKER, part_index

STAMP_BYTES = 1 << 20  # of each end of an input, hashed into its stamp

if TYPE_CHECKING:
    from pretrainkit.dataprep.readers import InputFile


def file_stamp(path: str) -> tuple[str, int, int, str]:
    """(path, size, mtime, sha256 of its first and last `STAMP_BYTES`): what a plan records of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        stat = os.fstat(f.fileno())
        digest.update(f.read(STAMP_BYTES))
        if stat.st_size > STAMP_BYTES:
            f.seek(max(STAMP_BYTES, stat.st_size - STAMP_BYTES))
            digest.update(f.read(STAMP_BYTES))
    return (path, stat.st_size, stat.st_mtime_ns, digest.hexdigest())


def input_stamps(files: Sequence[InputFile]) -> list[tuple[str, int, int, str]]:
    """The plan's record of the input files (`file_stamp`): a changed file is a different plan."""
    return [file_stamp(f.path) for f in files]


def open_work_dir(work: Path, plan: dict, on_reset: Callable[[], None] | None = None) -> bool:
    """True when `work` holds an interrupted run of this plan (its finished jobs count as done)."""
    fingerprint = hashlib.sha256(json.dumps(plan, sort_keys=True).encode()).hexdigest()
    marker = work / PLAN_MARKER
    if marker.is_file() and marker.read_text() == fingerprint:
        return True
    shutil.rmtree(work, ignore_errors=True)
    if on_reset is not None:
        on_reset()
    work.mkdir(parents=True)
    write_text_atomic(marker, fingerprint)
    return False


def remove_parts(directory: Path, first: int = 0, pattern: str = KEPT_GLOB) -> None:
    """The numbered parts (`part-NNNNN...`) in `directory` from number `first` on: what an earlier run
    over more input, or of another plan, left there, which would otherwise read as this run's output."""
    for p in directory.glob(pattern):
        if part_index(p.name) >= first:
            p.unlink()


def remove_work_dir(work: Path) -> None:
    """Delete a finished run's work directory, its plan stamp first: a run killed while this deletes
    leaves a directory that no rerun mistakes for an interrupted run whose files are all there."""
    (work / PLAN_MARKER).unlink(missing_ok=True)
    shutil.rmtree(work)
