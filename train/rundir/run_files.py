"""Which files of a training run's folder belong in a bucket, and which of them a reader fetches: the
file names alone, for `mirror.py` (a run_dir URL) and the commands that read a run from a bucket
(`UrlArguments.selected` of `pretrainkit/remote/staging.py`).

    published("checkpoints/.tmp-step-0000008/__0_0.distcp")     # False: a checkpoint being written
    complete_checkpoints(listing)                               # {"checkpoints/step-0000008": {its files: sizes}}
    run_files_read(listing)                                     # the listing less incomplete checkpoints
    run_logs_read(listing)                                      # the listing less every checkpoint
"""

from __future__ import annotations

from pathlib import Path

from pretrainkit.files import is_temporary
from pretrainkit.stage_layout import LOCK_NAME
from pretrainkit.train.rundir.names import CHECKPOINTS, META_FILE, PUSHED_FILE, TMP_PREFIX, step_of


def published(rel: str) -> bool:
    """Whether a run's file belongs in the bucket: not the lock, a temporary, or a checkpoint being written."""
    parts = rel.split("/")
    if parts[-1] in (LOCK_NAME, PUSHED_FILE) or is_temporary(parts[-1]):
        return False
    return not (len(parts) > 2 and parts[0] == CHECKPOINTS and parts[1].startswith(TMP_PREFIX))


def checkpoint_of(rel: str) -> str | None:
    """`checkpoints/step-N` for a file of that checkpoint directory; None for the run's other files."""
    parts = rel.split("/")
    if len(parts) > 2 and parts[0] == CHECKPOINTS and step_of(Path(parts[1])) is not None:
        return "/".join(parts[:2])
    return None


def complete_checkpoints(files: dict[str, int]) -> dict[str, dict[str, int]]:
    """The files of each checkpoint directory among `files` that holds its meta.json."""
    found: dict[str, dict[str, int]] = {}
    for rel, size in files.items():
        ckpt = checkpoint_of(rel)
        if ckpt is not None:
            found.setdefault(ckpt, {})[rel] = size
    return {ckpt: names for ckpt, names in found.items() if f"{ckpt}/{META_FILE}" in names}


def newest_step(checkpoints: dict[str, dict[str, int]]) -> int:
    return max((step_of(Path(ckpt)) for ckpt in checkpoints), default=-1)


def run_files_read(listing: dict[str, int], with_checkpoints: bool = True) -> dict[str, int]:
    """Of a run's files (relative path: size), those a reader fetches: the published ones, less the
    checkpoints without their meta.json (a push cut short), or less every checkpoint."""
    complete = complete_checkpoints(listing)

    def read(rel: str) -> bool:
        if not published(rel):
            return False
        if rel.split("/")[0] == CHECKPOINTS:
            return with_checkpoints and checkpoint_of(rel) in complete
        return True

    return {rel: size for rel, size in listing.items() if read(rel)}


def run_logs_read(listing: dict[str, int]) -> dict[str, int]:
    """Of a run's files, those a reader of its logs alone fetches (`ptk report`): no checkpoint."""
    return run_files_read(listing, with_checkpoints=False)
