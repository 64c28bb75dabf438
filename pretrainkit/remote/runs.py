"""A training run whose `run_dir` is a URL: trained in a local mirror folder, which is pulled from the
bucket before the run and pushed to it after every checkpoint and when the run ends.

    local = mirror_path(url)        # WORK/outputs/<hash of the URL>: the same on every process of a machine
    prepare_mirror(url)             # main process: a prefix of another command's output refused, the marker fetched
    pull_run(url, local)            # main process, holding the mirror: the bucket's run, when it is the newer
    push_run(local, url)            # rank 0: after each checkpoint is sealed, and when the run ends

Why a mirror: DCP's files, their sha256 in `meta.json` and the rename that publishes a checkpoint
(`train/checkpoint/checkpoints.py`), the logs appended per step and the run's lock all rest on local
files, and keep their guarantees there; the bucket gets whole checkpoints only.

- Pull: the side whose newest complete checkpoint (a `step-*` with its `meta.json`) is the newer one
  wins. When it is the bucket's (a first run on this machine, or the run went on elsewhere), the mirror
  is emptied and the bucket's run fetched into it, its complete checkpoints only; otherwise the mirror
  is at least as new (this machine wrote what the bucket holds) and stays as it is. A mirror that was
  pushed before (`PUSHED_FILE`) to a prefix that now holds no run (deleted, or a new bucket of the same
  name) is emptied: the run starts over, as it would in an emptied run_dir; one that was never pushed
  (killed before its first push) is the run's only copy and is resumed from.
- Push: each complete local checkpoint that the bucket does not hold as it is gets its `meta.json`
  deleted in the bucket first, then its files uploaded, `meta.json` last, so a reader of the bucket takes
  a `step-*` only when it is whole. Then the run's other files (logs, `config.yaml`, the marker, the
  trackers' folders), and last the objects the mirror does not hold are deleted (checkpoints pruned, the
  remains of a push cut short). A kill -9 anywhere leaves the newest complete checkpoint in the bucket
  whole: the same command resumes from the mirror on this machine, from the bucket on another.
- One node: its processes share the mirror. Across nodes each node's mirror would hold only its own
  processes' DCP files, so a URL `run_dir` is refused there (`check_one_node`).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from pretrainkit.output_folders import LOCK_NAME, MARKER_NAME
from pretrainkit.remote import staging
from pretrainkit.remote.run_files import (
    META_FILE,
    PUSHED_FILE,
    checkpoint_of,
    complete_checkpoints,
    newest_step,
    published,
    run_files_read,
)
from pretrainkit.remote.transfer import download_all, list_tree, read_bytes, remove_all, upload, upload_all
from pretrainkit.remote.urls import is_url, join


def mirror_path(url: str) -> Path:
    return staging.staging_path(url, staging.work_dir())


def prepare_mirror(url: str) -> Path:
    """The mirror, with the bucket's output marker fetched into it (`remote.staging.staging_folder`); messages
    name `url` for it from now on."""
    local = staging.staging_folder(url, staging.work_dir())
    staging.show_as(local, url)
    return local


def fetched_model(path: str | None) -> str | None:
    """A model to start from (`init_from`: a run, a checkpoint, an export or a Hugging Face folder) as a
    local path: a URL's objects fetched into the work folder (of a run, its complete checkpoints only);
    a process of the same machine that comes later finds them there and fetches nothing."""
    return str(staging.local_copy(path, select=run_files_read)) if is_url(path) else path


def check_one_node(url: str) -> None:
    """UserError when this process is one of a run across several nodes (see the module docstring)."""
    world, local_world = os.environ.get("WORLD_SIZE", "1"), os.environ.get("LOCAL_WORLD_SIZE")
    if local_world is not None and world != local_world:
        raise UserError(
            f"run_dir: {url}: a run_dir URL trains on one node (its processes share a local mirror of it); "
            "across nodes use a run_dir every node mounts"
        )


def _local_files(local: Path) -> dict[str, int]:
    files = {}
    for path in sorted(local.rglob("*")):
        rel = path.relative_to(local).as_posix()
        try:
            if path.is_file() and published(rel):
                files[rel] = path.stat().st_size
        except FileNotFoundError:  # a tracker's temporary file, gone since it was listed
            continue
    return files


def pull_run(url: str, local: Path) -> None:
    """Fetch the bucket's run into the mirror `local` if its newest complete checkpoint is newer."""
    listing = list_tree(url)
    wanted = run_files_read(listing)
    if MARKER_NAME not in listing and (local / PUSHED_FILE).exists():
        print(f"ptk train: note: {url} holds no run now; the run starts over", file=sys.stderr)
        _empty(local)
        return
    if newest_step(complete_checkpoints(wanted)) <= newest_step(complete_checkpoints(_local_files(local))):
        return
    _empty(local)
    staging.in_batches(
        wanted, "fetch run", lambda batch: download_all([(join(url, rel), local / rel) for rel in batch], url)
    )


def _empty(local: Path) -> None:
    """Remove the mirror's files but the run's hold on it (its lock and marker)."""
    for path in local.iterdir():
        if path.name not in (LOCK_NAME, MARKER_NAME):
            shutil.rmtree(path) if path.is_dir() else path.unlink()


def push_run(local: Path, url: str) -> None:
    """Mirror the run folder `local` to `url`, in the order the module docstring gives."""
    mine, theirs = _local_files(local), list_tree(url)
    checkpoints = complete_checkpoints(mine)
    for ckpt, names in sorted(checkpoints.items()):
        meta = f"{ckpt}/{META_FILE}"
        if all(theirs.get(rel) == size for rel, size in names.items()):
            if read_bytes(join(url, meta)) == (local / meta).read_bytes():
                continue
        if meta in theirs:
            remove_all([join(url, meta)], url)
        upload_all([(local / rel, join(url, rel)) for rel in sorted(names) if rel != meta], url)
        upload(local / meta, join(url, meta))
    others = sorted(rel for rel in mine if checkpoint_of(rel) is None)
    upload_all([(local / rel, join(url, rel)) for rel in others], url)
    kept = set(others).union(*checkpoints.values())
    remove_all([join(url, rel) for rel in sorted(set(theirs) - kept)], url)
    write_text_atomic(local / PUSHED_FILE, url + "\n")
