"""Atomic `torch.distributed.checkpoint` directories, newest-valid lookup, and restore on any world size.

    ckpts = Checkpoints(run_dir / "checkpoints", keep=2)
    ckpts.save(trainer, config=to_dict(cfg), extra={"loader": loader.state_dict(), ...})
    found = ckpts.latest_valid()                # newest whose files verify, or None
    ckpts.restore(trainer, found)               # model, optimizer, step, tokens, RNG; found.meta["extra"]

Layout: `checkpoints/step-0000050/` holds the DCP files (model and optimizer, keyed by parameter name,
so FSDP2 shards, DDP replicas and a plain model all read and write the same checkpoint), one
`rng-rank<r>.pt` per process, and `meta.json`, written last: step, tokens, the resolved config,
the model's shape (`model`, for `ptk export`), the caller's `extra` (loader state, mixture
fingerprint, ...), world size, and every file's size and sha256. The directory is first written as
`.tmp-step-0000050` and renamed once every process has finished, so a killed run never leaves a
directory named `step-*` that is incomplete. On restore the newest `step-*` whose files match their
`meta.json` is loaded; a newer one that does not match is reported (one line on stderr) and skipped. After a save only the newest `keep` are kept.
"""

from __future__ import annotations

import dataclasses
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_state_dict,
    set_model_state_dict,
    set_state_dict,
)

from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file, write_text_atomic
from train.parallel.data_parallel import sharded_optimizer, unwrap
from train.loop.trainer import Trainer

META_FILE = "meta.json"
PREFIX = "step-"
TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class Checkpoint:
    path: Path
    step: int
    meta: dict


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:07d}"


def _rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def _barrier() -> None:
    if dist.is_initialized() and dist.get_world_size() > 1:
        dist.barrier()


def verify(path: Path) -> Checkpoint:
    """The checkpoint at `path` if its files match `meta.json`; else UserError naming the problem."""
    meta_path = path / META_FILE
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        files = meta["files"]
        step = int(meta["step"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"{meta_path}: missing or unreadable ({e})") from None
    for name, (size, digest) in sorted(files.items()):
        f = path / name
        if not f.is_file():
            raise UserError(f"{f}: missing")
        if f.stat().st_size != size:
            raise UserError(f"{f}: {f.stat().st_size} bytes, expected {size} (truncated?)")
        if sha256_file(f) != digest:
            raise UserError(f"{f}: sha256 does not match {META_FILE}")
    return Checkpoint(path, step, meta)


class Checkpoints:
    def __init__(self, directory: str | Path, keep: int) -> None:
        self.dir = Path(directory)
        self.keep = keep

    def candidates(self) -> list[Path]:
        """`step-*` directories, newest first."""
        if not self.dir.is_dir():
            return []
        return sorted((p for p in self.dir.glob(f"{PREFIX}*") if p.is_dir()), key=lambda p: p.name, reverse=True)

    def latest_valid(self, before: int | None = None) -> Checkpoint | None:
        """The newest checkpoint whose files verify (of those before step `before`); reports the others."""
        for path in self.candidates():
            if before is not None and int(path.name[len(PREFIX) :]) >= before:
                continue
            try:
                return verify(path)
            except UserError as e:
                print(f"ptk train: skipping corrupt checkpoint {path.name}: {e}", file=sys.stderr)
        return None

    def save(self, trainer: Trainer, config: dict, extra: dict) -> Path:
        """Collective: every process calls it at the same step."""
        name = checkpoint_name(trainer.step)
        final, tmp = self.dir / name, self.dir / f"{TMP_PREFIX}{name}"
        if _rank() == 0:
            shutil.rmtree(tmp, ignore_errors=True)
            tmp.mkdir(parents=True)
        _barrier()
        model_sd, optim_sd = state_dicts(trainer)
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=tmp)
        rng_file = tmp / f"rng-rank{_rank()}.pt"
        with open(rng_file, "wb") as f:
            torch.save(rng_states(), f)
        _barrier()
        if _rank() == 0:
            files = {p.name: [p.stat().st_size, sha256_file(p)] for p in sorted(tmp.iterdir()) if p.is_file()}
            meta = {"step": trainer.step, "tokens": trainer.tokens, "world_size": trainer.env.world_size,
                    "model": dataclasses.asdict(trainer.model_cfg), "config": config, "extra": extra, "files": files}
            write_text_atomic(tmp / META_FILE, json.dumps(meta, indent=1, sort_keys=True))
            shutil.rmtree(final, ignore_errors=True)
            tmp.rename(final)
            for old in self.candidates()[self.keep :]:
                shutil.rmtree(old, ignore_errors=True)
        _barrier()
        return final

    def restore(self, trainer: Trainer, ckpt: Checkpoint) -> None:
        """Load model, optimizer, step and RNG from `ckpt` into `trainer` (collective)."""
        load_weights(trainer, ckpt, optimizer=True)
        trainer.step, trainer.tokens = ckpt.step, int(ckpt.meta["tokens"])
        rng_file = ckpt.path / f"rng-rank{_rank()}.pt"
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


def load_weights(trainer: Trainer, ckpt: Checkpoint, optimizer: bool) -> None:
    """Load the model (and, with `optimizer`, the optimizer state) of `ckpt` into `trainer` (collective)."""
    if optimizer:
        model_sd, optim_sd = state_dicts(trainer)
        state = {"model": model_sd, "optim": optim_sd}
    else:  # not state_dicts(): its get_state_dict would give a fresh AdamW a first (empty) step
        state = {"model": get_model_state_dict(trainer.model)}
    try:
        dcp.load(state, checkpoint_id=ckpt.path)
    except Exception as e:  # noqa: BLE001 - DCP raises many types for a mismatched checkpoint
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise UserError(f"{ckpt.path}: cannot load into this model/optimizer: {first}") from None
    if optimizer and sharded_optimizer(trainer.optimizer) is None:
        set_state_dict(trainer.model, trainer.optimizer, model_state_dict=state["model"], optim_state_dict=state["optim"])
    else:  # weights only, or ZeRO-1, whose optimizer shard was loaded in place
        set_model_state_dict(trainer.model, state["model"])


def state_dicts(trainer: Trainer) -> tuple[dict, dict]:
    """Model and optimizer state keyed by parameter name, the same layout for every parallel mode.

    ZeRO-1 is not covered by `get_state_dict`: each process gives the AdamW state of the parameters
    it owns (creating it empty before the first step, so that a load can fill it in place), and DCP
    joins the processes' keys into the same `state` / `param_groups` layout DDP and FSDP2 write.
    """
    zero = sharded_optimizer(trainer.optimizer)
    if zero is None:
        return get_state_dict(trainer.model, trainer.optimizer)
    names = {id(p): n for n, p in unwrap(trainer.model).named_parameters()}
    state = {}
    for group in zero.param_groups:
        for p in group["params"]:
            s = zero.state[p]
            if not s:
                s.update(step=torch.zeros(()), exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
            state[names[id(p)]] = s
    groups = [{**{k: v for k, v in g.items() if k != "params"}, "params": [names[id(p)] for p in g["params"]]}
              for g in trainer.optimizer.param_groups]  # fmt: skip
    return get_model_state_dict(trainer.model), {"state": state, "param_groups": groups}


def loader_state_of(path: str | Path) -> dict:
    """The mixture loader state saved in a run directory's newest valid checkpoint, or in the
    checkpoint directory `path` itself: what a mixture's `replay: {from: ...}` continues from."""
    path = Path(path)
    if (path / META_FILE).exists():
        ckpt = verify(path)
    else:
        ckpt = Checkpoints(path / "checkpoints", keep=1).latest_valid()
        if ckpt is None:
            raise UserError(f"{path}: no valid checkpoint to replay from (expected {path}/checkpoints/step-*/)")
    return ckpt.meta["extra"]["loader"]


def rng_states() -> dict:
    states = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        states["cuda"] = torch.cuda.get_rng_state()
    return states


def set_rng_states(states: dict) -> None:
    torch.set_rng_state(states["torch"])
    if "cuda" in states and torch.cuda.is_available():
        torch.cuda.set_rng_state(states["cuda"])
