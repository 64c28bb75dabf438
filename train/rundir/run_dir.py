"""A training run's folder as one object, given as a local path or a bucket URL: the names of its files,
its lock, and (for a URL) the local mirror it is trained in and the sync with the bucket (`mirror.py`).
Imports no torch, so `ptk train` answers from its launcher process at once.

    run = RunDir(cfg.run_dir)           # "runs/base" or "s3://bucket/runs/base"
    run.local                           # the folder trained in: the path itself, or the URL's mirror
    run.checkpoints, run.metrics, run.events, run.mixture_changes, run.config_file, run.base_file   # in `run.local`
    run.check("run.yaml")               # launcher: UserError: a file, read-only, not creatable, in use, not a run's
    with run.holding("run.yaml", main=True):   # the run's lock on it (rank 0)
    run.prepare_mirror(); run.pull(); run.push(); run.checkpoint_mirror(owner)   # a URL's: `mirror.py`
    print(run.interrupted_message())    # after Ctrl-C or SIGTERM: the steps a resume will redo
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from pathlib import Path

from pretrainkit.files import output_directory
from pretrainkit.output_folders import TRAIN, check_folder, output_folder, prefixed, probe_lock
from pretrainkit.remote.urls import is_url
from pretrainkit.train.rundir import mirror
from pretrainkit.train.rundir.names import (
    BASE_FILE,
    CHECKPOINTS,
    CONFIG_FILE,
    EVENTS_FILE,
    METRICS_FILE,
    MIXTURE_CHANGES_FILE,
    checkpoint_dirs,
    step_of,
)

TAIL_BYTES = 1 << 16  # the last rows of metrics.jsonl are enough to find its last step


class RunDir:
    """A run's folder: `url` the bucket's prefix (None for a local folder), `local` the folder trained in.
    The mirror's path depends on the work folder (`PTK_WORK_DIR`), read when the RunDir is made."""

    def __init__(self, given: str | os.PathLike) -> None:
        self.url: str | None = str(given) if is_url(given) else None
        self.local: Path = mirror.mirror_path(self.url) if self.url is not None else Path(given)

    @property
    def checkpoints(self) -> Path:
        return self.local / CHECKPOINTS

    @property
    def metrics(self) -> Path:
        return self.local / METRICS_FILE

    @property
    def events(self) -> Path:
        return self.local / EVENTS_FILE

    @property
    def mixture_changes(self) -> Path:
        return self.local / MIXTURE_CHANGES_FILE

    @property
    def config_file(self) -> Path:
        return self.local / CONFIG_FILE

    @property
    def base_file(self) -> Path:
        return self.local / BASE_FILE

    # -- the folder and its lock ----------------------------------------------------------------------
    def check(self, where: str) -> None:
        """Create the folder and check it writable, no other command's output and no other run's now, or
        raise UserError naming the config key and the path (`RUN_DIR is in use by pid N (host H)` as it is).
        A URL's mirror gets the bucket's marker first."""
        with prefixed(f"{where}: run_dir:"):
            if self.url is not None:
                self.prepare_mirror()
            check_folder(self.local, TRAIN)
            output_directory(self.local)
        probe_lock(self.local)

    @contextlib.contextmanager
    def holding(self, where: str, main: bool) -> Iterator[None]:
        """The folder for the whole run: the main process holds it (`pretrainkit.output_folders`: checked,
        locked, marked), every other one checks it writable."""
        with contextlib.ExitStack() as held:
            with prefixed(f"{where}: run_dir:"):
                if main:
                    held.enter_context(output_folder(self.local, TRAIN))
                else:
                    output_directory(self.local)
            yield

    # -- a URL's mirror (`mirror.py`); nothing to do for a local folder -------------------------------
    def prepare_mirror(self) -> None:
        """The main process, first: the bucket's marker fetched (a prefix of another command's output is
        refused); messages name the URL for the mirror from now on."""
        if self.url is not None:
            mirror.prepare_mirror(self.url)

    def pull(self) -> None:
        """Each node's first process, before a resume: the bucket's run into the mirror, when it is the newer."""
        if self.url is not None:
            mirror.pull_run(self.url, self.local, mirror.across_nodes())

    def push(self) -> None:
        """Rank 0: the mirror to the bucket (after a checkpoint, and when the run ends)."""
        if self.url is not None:
            mirror.push_run(self.local, self.url)

    def checkpoint_mirror(self, owner: bool) -> mirror.RunMirror | None:
        """What `Checkpoints` publishes each checkpoint through (`owner`: this node's first process); None
        for a local folder."""
        if self.url is None:
            return None
        return mirror.RunMirror(self.local, self.url, owner, mirror.across_nodes())

    # -- how far a stopped run got --------------------------------------------------------------------
    def last_logged_step(self) -> int | None:
        """The step of the last complete row of `metrics.jsonl`, None without one."""
        try:
            with open(self.metrics, "rb") as f:
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

    def interrupted_message(self, how: str = "interrupted") -> str:
        """One line for a stopped run (`how`: interrupted, or stopped by SIGTERM): where it stood and how
        many steps the same command will redo."""
        last = self.last_logged_step()
        ckpts = checkpoint_dirs(self.checkpoints)
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
