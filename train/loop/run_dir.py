"""The run directory, before and after a run: checked writable before any work, held by one run at a
time, and read back for how far a stopped run got. Imports no torch, so `ptk train` answers from its
launcher process at once. A run_dir URL is trained in its local mirror (`pretrainkit/remote/runs.py`):
these functions take the URL and work on the mirror.

    check_run_dir(cfg.run_dir, "run.yaml")     # UserError: a file, read-only, not creatable, in use, not a run's
    with holding_run_dir(cfg.run_dir, "run.yaml", main=True):   # the run's lock on it (rank 0)
    print(interrupted_message(cfg.run_dir))    # after Ctrl-C or SIGTERM: the steps a resume will redo
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from pretrainkit.files import output_directory
from pretrainkit.output_folders import TRAIN, check_folder, output_folder, prefixed, probe_lock
from pretrainkit.remote.runs import mirror_path, prepare_mirror
from pretrainkit.remote.urls import is_url
from pretrainkit.train.checkpoint.names import checkpoint_dirs, step_of

CHECKPOINTS_DIR = "checkpoints"
METRICS_FILE = "metrics.jsonl"
TAIL_BYTES = 1 << 16  # the last rows of metrics.jsonl are enough to find its last step


def check_run_dir(run_dir: str | os.PathLike, where: str) -> None:
    """Create `run_dir` and check it writable, no other command's output and no other run's now, or
    raise UserError naming the config key and the path (`RUN_DIR is in use by pid N (host H)` as it is)."""
    with prefixed(f"{where}: run_dir:"):
        if is_url(run_dir):
            run_dir = prepare_mirror(run_dir)
        check_folder(run_dir, TRAIN)
        output_directory(run_dir)
    probe_lock(run_dir)


def local_run_dir(run_dir: str | os.PathLike) -> Path:
    """The folder a run is trained in: `run_dir`, or a URL's local mirror."""
    return mirror_path(run_dir) if is_url(run_dir) else Path(run_dir)


@contextlib.contextmanager
def holding_run_dir(run_dir: str | os.PathLike, where: str, main: bool) -> Iterator[None]:
    """The run directory for the whole run: the main process holds it (`pretrainkit.output_folders`:
    checked, locked, marked), every other one checks it writable."""
    with contextlib.ExitStack() as held:
        with prefixed(f"{where}: run_dir:"):
            if main:
                held.enter_context(output_folder(run_dir, TRAIN))
            else:
                output_directory(run_dir)
        yield


def last_logged_step(run_dir: str | os.PathLike) -> int | None:
    """The step of the last complete row of `RUN_DIR/metrics.jsonl`, None without one."""
    try:
        with open(Path(run_dir) / METRICS_FILE, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - TAIL_BYTES))
            lines = f.read().split(b"\n")[:-1]  # the text after the last newline may be a half-written row
    except OSError:
        return None
    for line in reversed(lines):
        try:
            return int(json.loads(line)["step"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def interrupted_message(run_dir: str | os.PathLike, how: str = "interrupted") -> str:
    """One line for a stopped run (`how`: interrupted, or stopped by SIGTERM): where it stood and how many
    steps the same command will redo."""
    last = last_logged_step(local_run_dir(run_dir))
    ckpts = checkpoint_dirs(local_run_dir(run_dir) / CHECKPOINTS_DIR)
    saved = step_of(ckpts[0]) if ckpts else 0
    if last is None or last <= saved:
        where = "before its first step" if last is None and not saved else f"at step {saved}"
        return f"ptk train: {how} {where}; no step is lost: the same command resumes the run"
    redo = last - saved
    since = f"since the last checkpoint ({ckpts[0].name})" if ckpts else "(no checkpoint yet)"
    return (
        f"ptk train: {how} at step {last}; {redo} step{'s' if redo != 1 else ''} {since} will be "
        f"redone when the same command resumes the run"
    )
