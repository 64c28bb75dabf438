"""Atomic `torch.distributed.checkpoint` directories, finalized in the background;
newest-valid lookup, and restore on any world size.

    ckpts = Checkpoints(run.checkpoints, keep=2, tensors=trainer.states, records=[trainer.record, loop])
    ckpts.save()                                # returns after the write
    ckpts.wait()                                # the save's hashing, meta.json and rename are done (collective)
    found = ckpts.latest_valid()                # newest whose files verify, or None
    ckpts.restore(found)                        # every state and record (the loop's LoopState in `extra`), the RNG

What is saved is handed in as `Stateful`s (`state_dict()` / `load_state_dict()`), as torchtitan's checkpoint
manager takes them: `tensors` (by name: "model", "optim", see `states.py`) go through DCP, each under its
name; `records` give JSON, merged into `meta.json` (the trainer's `step`, `tokens` and `model`, the loop's
`config` and `extra`), and are handed the whole `meta.json` on restore. A record must give `step`.

Layout: `checkpoints/step-0000050/` holds the DCP files (model and optimizer, keyed by parameter name,
so FSDP2 shards, DDP replicas and a plain model all read and write the same checkpoint), one
`rng-rank<r>.pt` per process, and `meta.json`, written last: the records' keys (step, tokens, the
resolved config, the model's shape for `ptk export`, the loop's state in `extra`), the world size, and
every file's size and sha256. The DCP files and RNG states are the same bytes for the same run,
wherever its run_dir is (`.metadata` holds no path or save id). The directory is first written as
`.tmp-step-0000050` and renamed once `meta.json` is complete, so a killed run never leaves a
directory named `step-*` that is incomplete. On restore the newest `step-*` whose files match their
`meta.json` is loaded; a newer one that does not match is reported (one line on stderr) and skipped.
After a save the newest `keep` written on schedule are kept, and the newest of all: one written only
because the run was stopped (SIGTERM; `interim` in its `meta.json`) is removed once a newer one
exists, so a run stopped and resumed keeps the checkpoints an uninterrupted run keeps.

A run_dir in a bucket trains in a local mirror per node (`Mirror`, `train/rundir/mirror.py`): each
node's processes write into their node's copy, each file is hashed on a node that holds it, every node
but rank 0's publishes its part before rank 0 seals the checkpoint and publishes the rest, `meta.json`
last; before a checkpoint is chosen every node fetches the published ones whole.

Where the time goes: `save` blocks training for the write (`dcp.save`, every process its part) only.
The sha256 of every file (each process hashes about 1/N of them, largest first), `meta.json`, the
rename, its directory fsync and the pruning of older checkpoints then run in a thread while training
goes on (`Finalization`). The next `save`, a `choose` (resume, rollback), the end of training and a run
stopping on an error or Ctrl-C wait for it first, so its failure (a full disk writing `meta.json`) is
reported as the same one-line error a failed write is. Verification on resume stays before the load,
as it must (a corrupt file is never loaded), split across the processes the same way: the cost of a
resume's hashing per process is that of a save's (per GB: `python -m bench.checkpoint_hash`).
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import io
import json
import shutil
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.stateful import Stateful

from pretrainkit.errors import UserError
from pretrainkit.files import fsync_directory, json_object_or_none, sha256_file, write_bytes_atomic, write_text_atomic
from pretrainkit.remote.transfer import list_tree, read_bytes
from pretrainkit.remote.urls import is_url, join
from pretrainkit.train.checkpoint.loop_state import LoopState
from pretrainkit.train.model.llama import ModelConfig
from pretrainkit.train.parallel.agree import AgreedError, failure_message, rank, together, world
from pretrainkit.train.rundir.names import META_FILE, TMP_PREFIX, checkpoint_dirs, checkpoint_name, step_of
from pretrainkit.train.rundir.run_dir import RunDir
from pretrainkit.train.rundir.run_files import complete_checkpoints

INTERIM_KEY = "interim"  # in meta.json: written only to stop (see `Checkpoints.save`)


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    meta: dict


def share_of_files(seen: Sequence[Mapping[str, int]], rank: int) -> list[str]:
    """This process's share of the files to hash, given what each process sees (`seen[r]`: name -> size):
    largest first, each to the least loaded process that sees it (every process computes the same split),
    so each hashes about what it wrote, not rank 0 everything; with a copy of the directory per node, a
    node's files are hashed on that node."""
    sizes = {name: size for files in seen for name, size in files.items()}
    load, mine = [0] * len(seen), []
    for name in sorted(sizes, key=lambda n: (-sizes[n], n)):
        r = min((i for i in range(len(seen)) if name in seen[i]), key=lambda i: (load[i], i))
        load[r] += sizes[name]
        if r == rank:
            mine.append(name)
    return mine


def read_meta(path: Path) -> Checkpoint:
    meta_path = path / META_FILE
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        dict(meta["files"])
        step = int(meta["step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{meta_path}: missing or unreadable ({e})") from None
    return Checkpoint(path, step, meta)


def check_files(ckpt: Checkpoint, names: list[str]) -> None:
    """UserError naming the first of `names` whose size or sha256 differs from `meta.json`."""
    for name in sorted(names):
        size, digest = ckpt.meta["files"][name]
        f = ckpt.path / name
        if not f.is_file():
            raise UserError(f"{f}: missing")
        if f.stat().st_size != size:
            raise UserError(f"{f}: {f.stat().st_size} bytes, expected {size} (truncated?)")
        if sha256_file(f) != digest:
            raise UserError(f"{f}: sha256 does not match {META_FILE}")


def verify(path: Path) -> Checkpoint:
    """The checkpoint at `path` if its files match `meta.json`; else UserError naming the problem."""
    ckpt = read_meta(path)
    check_files(ckpt, list(ckpt.meta["files"]))
    return ckpt


def check_model(ckpt: Checkpoint, model_cfg: ModelConfig) -> None:
    """UserError naming the first model key whose value differs between `ckpt` and `model_cfg`.

    `max_seq_len` follows `data.seq_len`, which no weight depends on and the loader state governs;
    keys only one side has (a checkpoint older than a new ModelConfig field) are not compared."""
    now = json.loads(json.dumps(dataclasses.asdict(model_cfg)))  # as meta.json holds it: a tuple is a list there
    for key, saved in sorted(ckpt.meta.get("model", {}).items()):
        if key != "max_seq_len" and key in now and now[key] != saved:
            name = "the vocabulary size (data.mixture's tokenizer)" if key == "vocab_size" else f"model.{key}"
            raise UserError(
                f"{ckpt.path}: {name} is {saved} in the checkpoint but {now[key]} in the config; resume with the "
                f"checkpoint's value, or start a new run (another run_dir, or --no-resume)"
            )


class Mirror(Protocol):
    """A copy of the checkpoint directory per node, published to a bucket (a run_dir URL's mirror:
    `train/rundir/mirror.py`). Each node's processes write their files of a checkpoint into their
    node's copy; every node publishes its part before rank 0 seals the checkpoint and publishes
    `meta.json` last."""

    owner: bool  # this process creates and cleans its node's copy, and publishes the node's part

    def begin(self, name: str) -> None:
        """Rank 0, before any part of checkpoint `name` is published: an older `meta.json` of it unpublished."""

    def push_part(self, tmp: Path, name: str) -> None:
        """An owner other than rank 0: its node's files of checkpoint `name` (in `tmp`) published."""

    def push(self) -> None:
        """Rank 0, once a checkpoint is sealed: its own files, then `meta.json`, then the run's other files."""

    def fetch_checkpoints(self) -> None:
        """An owner, before a checkpoint is chosen: every file of the published checkpoints in its copy."""


class Finalization:
    """The background part of one save on this process, in a thread: `work` (hash this process's share,
    exchange the shares, and on rank 0 write `meta.json`, rename, prune). `result` waits for it and raises
    its failure as a one-line UserError."""

    def __init__(self, tmp: Path, work: Callable[[], None]) -> None:
        self.tmp, self.problem = tmp, None
        self._thread = threading.Thread(target=self._run, args=(work,), name=f"ptk-finalize-{tmp.name}", daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], None]) -> None:
        try:
            work()
        except BaseException as e:  # noqa: BLE001 - reported as one line by whoever waits for it
            self.problem = failure_message(e, self.tmp)

    def result(self) -> None:
        self._thread.join()
        if self.problem:
            raise UserError(self.problem)


def _is_interim(path: Path) -> bool:
    meta = json_object_or_none(path / META_FILE)
    return bool(meta and meta.get(INTERIM_KEY))


class Checkpoints:
    def __init__(
        self,
        directory: str | Path,
        keep: int,
        tensors: Mapping[str, Stateful] | None = None,
        records: Sequence[Stateful] = (),
        mirror: Mirror | None = None,
    ) -> None:
        """`tensors` and `records`: what `save` writes and `restore` loads (none for a reader such as `ptk export`).
        `mirror`: `directory` is a copy per node of a run in a bucket, published in the background as each
        checkpoint is finalized (its failure is the save's) and fetched before one is chosen."""
        self.dir = Path(directory)
        self.keep = keep
        self.tensors, self.records = dict(tensors or {}), list(records)
        self.mirror = mirror
        self.pending: Finalization | None = None
        # The finalizer thread exchanges hashes over a gloo group of its own, made once by every process
        # (as DCP's async_save wants its background collectives kept off the training's group): each
        # process issues a group's collectives in one order, and a second thread sharing the training's
        # group would interleave its exchanges with the training's all-reduces differently on each
        # process. One finalization at a time uses this group, so its order is the same everywhere.
        # (Shares exchanged as files instead would leave rank 0 polling for a peer's file, which a peer
        # whose disk is full cannot write, until a timeout.)
        self._group: Any = None

    @property
    def owner(self) -> bool:
        """Whether this process creates and cleans its copy of the directory: rank 0 of one that every
        process shares, each node's first process of a mirror per node."""
        return self.mirror.owner if self.mirror is not None else rank() == 0

    def candidates(self) -> list[Path]:
        """`step-N` directories, the highest step first."""
        return checkpoint_dirs(self.dir)

    def latest_valid(self, before: int | None = None) -> Checkpoint | None:
        """The newest checkpoint whose files verify (of those before step `before`); reports the others.
        For one process alone (`ptk export`, replay); a training run uses the collective `choose`."""
        for path in self.candidates():
            if before is not None and step_of(path) >= before:
                continue
            try:
                return verify(path)
            except UserError as e:  # said by whichever command reads it (export, eval, generate, replay)
                print(f"ptk: note: skipping corrupt checkpoint {path.name}: {e}", file=sys.stderr)
        return None

    def choose(self, before: int | None = None, refuse_all_corrupt: bool = False) -> Checkpoint | None:
        """`latest_valid` as a collective: every process hashes its share of each candidate's files.

        With `refuse_all_corrupt`, checkpoints that exist but all fail raise UserError naming them:
        starting over on its own would retrain from step 1 and overwrite the run's logs."""
        self.wait()  # a rollback must see the checkpoint still being finalized
        if self.mirror is not None:  # then every copy holds the same checkpoints, whole
            together(lambda: self.mirror.fetch_checkpoints() if self.owner else None, self.dir)
        problems = []
        for path in self.candidates():
            if before is not None and step_of(path) >= before:
                continue
            try:
                ckpt = read_meta(path)
                seen = together(functools.partial(_present, ckpt), path)
                missing = sorted(set(ckpt.meta["files"]).difference(*seen))  # by any process: it could not load
                if missing:
                    raise UserError(f"{path / missing[0]}: missing")
                together(functools.partial(check_files, ckpt, share_of_files(seen, rank())), path)
                return ckpt
            except UserError as e:
                problems.append(f"{path.name} ({e})")
                if rank() == 0:
                    print(f"ptk train: skipping corrupt checkpoint {path.name}: {e}", file=sys.stderr)
        if refuse_all_corrupt and problems:  # every process found the same (each check was agreed)
            raise AgreedError(
                f"{self.dir}: every checkpoint is corrupt: {'; '.join(problems)}; not starting over unasked (that "
                f"would overwrite the run's logs): pass --no-resume to start the run over, or use another run_dir"
            )
        return None

    def save(self, interim: bool = False) -> Path:
        """Collective: every process calls it at the same step. Returns once the files are written; the
        checkpoint is named `step-*` later, when its finalization (in the background) is done: `wait`.
        `interim`: written off the schedule only to stop (a SIGTERM), so pruned once a newer one exists.

        A failure on any process (a full disk, a read-only directory) stops every process with the
        same one-line UserError naming the path, here or at the next `wait`; the temporary directory is
        removed and the older checkpoints stay as they were, so the run resumes from the newest of them."""
        self.wait()
        meta = {"world_size": world()} | ({INTERIM_KEY: True} if interim else {})
        for record in self.records:
            meta.update(copy.deepcopy(record.state_dict()))
        name = checkpoint_name(meta["step"])
        final, tmp = self.dir / name, self.dir / f"{TMP_PREFIX}{name}"
        try:
            together(lambda: _fresh_directory(tmp) if self.owner else None, tmp)
            together(lambda: _write_states(self.tensors, tmp), tmp)
        except UserError:
            if self.owner:
                shutil.rmtree(tmp, ignore_errors=True)
            raise
        if self._group is None and world() > 1:
            self._group = dist.new_group(backend="gloo")
        self.pending = Finalization(tmp, lambda: self._finalize(tmp, final, meta))
        return final

    def _finalize(self, tmp: Path, final: Path, meta: dict) -> None:
        """In the finalizer thread of every process: gather which files each process sees, hash this
        process's share, gather the shares over the finalizer's group; with a mirror, every node publishes
        its part; rank 0 seals. A failure anywhere leaves no `step-*` and no temporary directory."""
        try:
            seen = together(lambda: self._listed(tmp, final.name), tmp, group=self._group)
            shares = together(
                lambda: {name: [seen[rank()][name], sha256_file(tmp / name)] for name in share_of_files(seen, rank())},
                tmp,
                group=self._group,
            )
            meta["files"] = {k: v for share in shares for k, v in sorted(share.items())}
            if self.mirror is not None:  # every part in the bucket before rank 0 publishes meta.json
                together(lambda: self._push_part(tmp, final.name), tmp, group=self._group)
            if rank() == 0:
                self._seal(tmp, final, meta)
        except BaseException:
            if self.owner:
                shutil.rmtree(tmp, ignore_errors=True)
            raise

    def _listed(self, tmp: Path, name: str) -> dict[str, int]:
        """The files of the checkpoint being written that this process sees (name: size). With a mirror,
        rank 0 first unpublishes an older `meta.json` of the same step, before any node publishes a part."""
        if self.mirror is not None and rank() == 0:
            self.mirror.begin(name)
        return {p.name: p.stat().st_size for p in sorted(tmp.iterdir()) if p.is_file()}

    def _push_part(self, tmp: Path, name: str) -> None:
        """Another node's part published (rank 0's goes with `meta.json`), then dropped from its copy:
        a checkpoint chosen later is fetched whole (`Mirror.fetch_checkpoints`)."""
        if self.owner and rank() != 0:
            self.mirror.push_part(tmp, name)
            shutil.rmtree(tmp)

    def wait(self) -> None:
        """Collective: wait for the pending finalization, if any. If it failed on any process, every process
        raises the same AgreedError (e.g. `...: no space left on device`)."""
        pending, self.pending = self.pending, None
        if pending is not None:
            together(pending.result, pending.tmp)

    def wait_alone(self) -> str | None:
        """Wait for the pending finalization on this process only, for a run stopping on an exception (its
        peers may be stuck in a collective that this process will never join): its failure, or None."""
        pending, self.pending = self.pending, None
        if pending is not None:
            try:
                pending.result()
            except UserError as e:
                return str(e)
        return None

    def _seal(self, tmp: Path, final: Path, meta: dict) -> None:
        """Rank 0: `meta.json` last, the rename that makes the checkpoint visible, then pruning, then the push."""
        write_text_atomic(tmp / META_FILE, json.dumps(meta, indent=1, sort_keys=True))
        fsync_directory(tmp)
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        fsync_directory(self.dir)  # so that the rename itself survives a power loss
        for old in self._prunable():
            shutil.rmtree(old, ignore_errors=True)
        if self.mirror is not None:
            self.mirror.push()

    def _prunable(self) -> list[Path]:
        """All but the newest checkpoint and the newest `keep` of those written on schedule: an interim one
        goes once a newer one exists, so a run stopped and resumed keeps what an uninterrupted one keeps."""
        found = self.candidates()
        scheduled = [path for path in found if not _is_interim(path)]
        kept = set(found[:1]) | set(scheduled[: self.keep])
        return [path for path in found if path not in kept]

    def restore(self, ckpt: Checkpoint) -> None:
        """Load every tensor state, every record and this process's RNG from `ckpt` (collective)."""
        load_states(ckpt, self.tensors)
        for record in self.records:
            record.load_state_dict(ckpt.meta)
        rng_file = ckpt.path / f"rng-rank{rank()}.pt"
        if not rng_file.exists():  # more processes than when saved
            rng_file = ckpt.path / "rng-rank0.pt"
        set_rng_states(torch.load(rng_file, weights_only=False))

    def remove_all(self) -> None:
        for p in self.candidates():
            shutil.rmtree(p)
        self.remove_temporaries()

    def remove_temporaries(self) -> None:
        if self.dir.is_dir():
            for p in self.dir.glob(f"{TMP_PREFIX}*"):
                shutil.rmtree(p, ignore_errors=True)


def _present(ckpt: Checkpoint) -> dict[str, int]:
    """The files of `ckpt` this process sees (name: size)."""
    found = {}
    for name in ckpt.meta["files"]:
        with contextlib.suppress(FileNotFoundError):
            found[name] = (ckpt.path / name).stat().st_size
    return found


def _fresh_directory(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)


class _ReproducibleWriter(dcp.FileSystemWriter):
    """DCP's file writer without the storage record it puts in `.metadata` (the directory being written
    and a random save id), which no load reads: a run's checkpoints are then the same bytes as the same
    run's anywhere, `.metadata` included."""

    def storage_meta(self) -> None:
        return None


def _write_states(tensors: Mapping[str, Stateful], tmp: Path) -> None:
    """The tensor states through DCP (collective), then this process's RNG states."""
    dcp.save({name: state.state_dict() for name, state in tensors.items()}, storage_writer=_ReproducibleWriter(tmp))
    buffer = io.BytesIO()  # torch.save straight into a file reports a full disk as "unexpected pos"
    torch.save(rng_states(), buffer)
    write_bytes_atomic(tmp / f"rng-rank{rank()}.pt", buffer.getvalue())


def load_states(ckpt: Checkpoint, tensors: Mapping[str, Stateful]) -> None:
    """Load `tensors` (some or all of the checkpoint's, by name) from `ckpt` (collective): DCP fills each
    state's `state_dict()` in place, which is then handed to its `load_state_dict`."""
    state = {name: s.state_dict() for name, s in tensors.items()}
    try:
        dcp.load(state, checkpoint_id=ckpt.path)
    except Exception as e:  # noqa: BLE001 - DCP raises many types for a mismatched checkpoint
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{ckpt.path}: cannot load into this model/optimizer: {first}") from None
    for name, s in tensors.items():
        s.load_state_dict(state[name])


def loader_state_of(path: str | Path) -> dict:
    """The mixture loader state saved in a run directory's newest valid checkpoint, or in the
    checkpoint directory `path` itself: what a mixture's `replay: {from: ...}` continues from. A URL:
    the newest complete checkpoint in the bucket (its meta.json, published last, is all that is read)."""
    if is_url(path):
        return _loader_state_in_bucket(str(path))
    path = Path(path)
    if (path / META_FILE).exists():
        ckpt = verify(path)
    else:
        ckpt = Checkpoints(RunDir(path).checkpoints, keep=1).latest_valid()
        if ckpt is None:
            raise UserError(f"{path}: no valid checkpoint to replay from (expected {path}/checkpoints/step-*/)")
    return _replayed_loader(ckpt.meta, ckpt.path / META_FILE)


def _loader_state_in_bucket(url: str) -> dict:
    listing = list_tree(url)
    if META_FILE in listing:
        meta_url = join(url, META_FILE)
    else:
        complete = complete_checkpoints(listing)
        if not complete:
            raise UserError(
                f"{url}: no complete checkpoint to replay from (expected {url}/checkpoints/step-*/meta.json)"
            )
        meta_url = join(url, max(complete, key=lambda ckpt: step_of(Path(ckpt))), META_FILE)
    try:
        meta = json.loads(read_bytes(meta_url))
    except ValueError as e:
        raise UserError(f"{meta_url}: not valid JSON ({e})") from None
    return _replayed_loader(meta, meta_url)


def _replayed_loader(meta: object, where: Path | str) -> dict:
    """The loader state in a checkpoint's meta.json (`where`, for errors)."""
    state = LoopState.from_meta(meta, where) if isinstance(meta, dict) else None
    if state is None:
        raise UserError(f"{where}: no training loop state (not a training run's checkpoint) to replay from")
    return state.loader


def rng_states() -> dict:
    states = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])
