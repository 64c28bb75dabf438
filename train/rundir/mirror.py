"""A training run whose `run_dir` is a URL: trained in a local mirror folder, which is pulled from the
bucket before the run and pushed to it after every checkpoint and when the run ends. The training code
reaches these through `RunDir` (`run_dir.py`), which calls them for a URL only:

    local = mirror_path(url)        # WORK/outputs/<hash of the URL>: the same on every process of a machine
    prepare_mirror(url)             # main process: a prefix of another command's output refused, the marker fetched
    pull_run(url, local, across_nodes())   # each node's first process: the bucket's run, when it is the newer
    mirror = RunMirror(local, url, owner=local_rank == 0, across_nodes=across_nodes())   # for `Checkpoints`
    push_run(local, url)            # rank 0: after each checkpoint is sealed, and when the run ends

Why a mirror: DCP's files, their sha256 in `meta.json` and the rename that publishes a checkpoint
(`train/checkpoint/checkpoints.py`), the logs appended per step and the run's lock all rest on local
files, and keep their guarantees there; the bucket gets whole checkpoints only.

- Pull: the side whose newest complete checkpoint (a `step-*` with its `meta.json`) is the newer one
  wins; a mirror that holds a node's part of a checkpoint (not every file its `meta.json` lists) loses,
  whatever its steps. When it is the bucket's (a first run on this machine, or the run went on
  elsewhere or across nodes), the mirror is emptied and the bucket's run fetched into it, its complete
  checkpoints only; otherwise the mirror is at least as new (this machine wrote what the bucket holds)
  and stays as it is. A mirror that was
  pushed before (`PUSHED_FILE`) to a prefix that now holds no run (deleted, or a new bucket of the same
  name) is emptied: the run starts over, as it would in an emptied run_dir; one that was never pushed
  (killed before its first push) is the run's only copy and is resumed from.
- Push: each complete local checkpoint that the bucket does not hold as it is gets its `meta.json`
  deleted in the bucket first, then its files uploaded, `meta.json` last, so a reader of the bucket takes
  a `step-*` only when it is whole. Then the run's other files (logs, `config.yaml`, the marker, the
  trackers' folders), and last the objects the mirror does not hold are deleted (checkpoints pruned, the
  remains of a push cut short). A kill -9 anywhere leaves the newest complete checkpoint in the bucket
  whole: the same command resumes from the mirror on this machine, from the bucket on another.
- Across nodes (torchrun --nnodes N): every node has a mirror of its own, into which its processes write
  their files of each checkpoint. Once they are hashed, every node but rank 0's publishes its part (under
  temporary keys) and drops it from its mirror; all agree that every part is in the bucket, and only then
  rank 0 seals the checkpoint in its mirror and pushes as above: its own part, `meta.json` (every node's
  files' sha256, gathered with the hashes) last, the logs; the deletions keep every file `meta.json` lists.
  Rank 0 first deletes an older `meta.json` of that step in the bucket, before any part is published.
  The bucket is then the run: before the run each node's mirror is emptied and gets the bucket's logs, and
  before a checkpoint is chosen (a resume, a rollback) each node fetches the bucket's complete
  checkpoints whole into its mirror (`sync_checkpoints`), so every node verifies and loads the same ones,
  on any layout. A checkpoint that never reached the bucket is redone.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from pretrainkit.remote import staging
from pretrainkit.remote.transfer import download_all, list_tree, read_bytes, remove_all, upload, upload_all
from pretrainkit.remote.urls import filesystem, is_url, join, storage_errors
from pretrainkit.stage_layout import LOCK_NAME, MARKER_NAME
from pretrainkit.train.rundir.names import CHECKPOINTS, META_FILE, PUSHED_FILE
from pretrainkit.train.rundir.run_files import (
    checkpoint_of,
    complete_checkpoints,
    newest_step,
    published,
    run_files_read,
)


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


def across_nodes() -> bool:
    """Whether this process is one of a run across several nodes (torchrun's world beyond its node)."""
    world, local_world = os.environ.get("WORLD_SIZE", "1"), os.environ.get("LOCAL_WORLD_SIZE")
    return local_world is not None and world != local_world


@dataclass(frozen=True)
class RunMirror:
    """A mirror as `train/checkpoint/checkpoints.py` publishes checkpoints through it (its `Mirror`)."""

    local: Path
    url: str
    owner: bool  # the node's first process: it keeps the node's mirror
    across_nodes: bool

    def begin(self, name: str) -> None:
        fs, meta = filesystem(join(self.url, CHECKPOINTS, name, META_FILE), writing=True)
        with storage_errors(self.url, "delete"):
            if fs.exists(meta):
                fs.rm(meta)

    def push_part(self, tmp: Path, name: str) -> None:
        files = sorted(p for p in tmp.iterdir() if p.is_file())
        upload_all([(p, join(self.url, CHECKPOINTS, name, p.name)) for p in files], self.url)

    def push(self) -> None:
        push_run(self.local, self.url)

    def fetch_checkpoints(self) -> None:
        if self.across_nodes:
            sync_checkpoints(self.url, self.local)


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


def _mirror_newest(local: Path) -> int:
    """The step of the mirror's newest complete checkpoint; -1 when one of them holds only a node's part
    of it (a run across nodes left the mirror: the bucket holds that run)."""
    found = complete_checkpoints(_local_files(local))
    whole = all(set(_listed(local, ckpt)) <= set(names) for ckpt, names in found.items())
    return newest_step(found) if whole else -1


def _listed(local: Path, ckpt: str) -> dict[str, int]:
    """The files (relative to the run) that the mirror's checkpoint `ckpt`'s meta.json lists, with their
    sizes, meta.json itself included."""
    meta = local / ckpt / META_FILE
    files = json.loads(meta.read_text(encoding="utf-8"))["files"]
    return {f"{ckpt}/{name}": size for name, (size, _) in files.items()} | {f"{ckpt}/{META_FILE}": meta.stat().st_size}


def pull_run(url: str, local: Path, across: bool = False) -> None:
    """Fetch the bucket's run into the mirror `local` if its newest complete checkpoint is newer than the
    mirror's (`_mirror_newest`); `across` nodes, always, less the checkpoints (`sync_checkpoints`)."""
    listing = list_tree(url)
    wanted = run_files_read(listing, with_checkpoints=not across)
    if MARKER_NAME not in listing and (local / PUSHED_FILE).exists():
        print(f"ptk train: note: {url} holds no run now; the run starts over", file=sys.stderr)
        _empty(local)
        return
    if not across and newest_step(complete_checkpoints(wanted)) <= _mirror_newest(local):
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


def sync_checkpoints(url: str, local: Path) -> None:
    """Make the mirror's checkpoints the bucket's complete ones, each whole: any other is removed, one
    whose meta.json differs from the bucket's is fetched again, and the files missing (other nodes' parts)
    are fetched, the meta.json files last."""
    complete = complete_checkpoints(run_files_read(list_tree(url)))
    folder = local / CHECKPOINTS
    for path in sorted(folder.iterdir()) if folder.is_dir() else []:
        ckpt, meta = f"{CHECKPOINTS}/{path.name}", path / META_FILE
        if ckpt not in complete or (meta.is_file() and meta.read_bytes() != read_bytes(join(url, ckpt, META_FILE))):
            shutil.rmtree(path) if path.is_dir() else path.unlink()
    mine = _local_files(local)
    wanted = {rel: size for names in complete.values() for rel, size in names.items() if mine.get(rel) != size}
    for last in (False, True):
        batch = {rel: size for rel, size in wanted.items() if rel.endswith(f"/{META_FILE}") == last}
        staging.in_batches(
            batch, "fetch checkpoints", lambda rels: download_all([(join(url, rel), local / rel) for rel in rels], url)
        )


def push_run(local: Path, url: str) -> None:
    """Mirror the run folder `local` to `url`, in the order the module docstring gives."""
    mine, theirs = _local_files(local), list_tree(url)
    kept: set[str] = set()
    for ckpt, names in sorted(complete_checkpoints(mine).items()):
        meta, listed = f"{ckpt}/{META_FILE}", _listed(local, ckpt)
        kept |= set(listed)
        if all(theirs.get(rel) == size for rel, size in listed.items()):
            if read_bytes(join(url, meta)) == (local / meta).read_bytes():
                continue
        absent = [rel for rel, size in listed.items() if rel not in names and theirs.get(rel) != size]
        if absent:  # another node's part, which it published before this checkpoint was sealed
            raise UserError(f"{join(url, absent[0])}: not in the bucket; checkpoint {ckpt} is not published")
        if meta in theirs:
            remove_all([join(url, meta)], url)
        upload_all([(local / rel, join(url, rel)) for rel in sorted(names) if rel != meta], url)
        upload(local / meta, join(url, meta))
    others = sorted(rel for rel in mine if checkpoint_of(rel) is None)
    upload_all([(local / rel, join(url, rel)) for rel in others], url)
    kept |= set(others)
    remove_all([join(url, rel) for rel in sorted(set(theirs) - kept)], url)
    write_text_atomic(local / PUSHED_FILE, url + "\n")
