"""`TrainLoader`: one rank's micro-batches of the global order, through a PyTorch DataLoader.

    loader = TrainLoader(sampler, rank=r, world_size=w, micro_size=m, num_workers=2, pin_memory=True)
    loader.load_state_dict(state)         # optional, before iterating: resume exactly there, O(1)
    for inputs, targets in loader:        # int64 [m, seq_len] each
        ...
        state = loader.state_dict()       # JSON-serialisable; save it in the checkpoint

Global batch k gives rank r its rows [r*B/w, (r+1)*B/w), in micro-batches of m rows, in order,
then batch k+1, and so on without end (stop when training stops). Worker i of n computes this
rank's micro-batches i, i+n, i+2n, ...; the DataLoader hands them out round-robin, so the rank
sees the same micro-batches in the same order whatever `num_workers` is.
`state_dict()` describes the position after the last micro-batch handed to the caller (not what
workers prefetched): batch index, micro-batch index within it, and per source its stream position
and the mixture fingerprint. Resuming on a different world size or micro size is fine at a batch
boundary. A state saved for another mixture (or seq_len / batch size) is refused unless the
mixture was loaded with `allow_mixture_change=True`; then the new order starts at the saved
batch with every source whose shard set matches continuing from its saved position.
"""

from __future__ import annotations

import functools
import itertools
import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, get_worker_info

from pretrainkit.errors import UserError
from pretrainkit.mixtures.mixture import STATE_VERSION
from pretrainkit.mixtures.sampler import MixtureSampler, to_inputs_targets
from pretrainkit.processes import take_environment

WORKER_START = "forkserver"  # how loader workers start (see TrainLoader.__iter__)

_STATE_KEYS = {
    "version": int,
    "fingerprint": str,
    "seq_len": int,
    "global_batch_size": int,
    "first_batch": int,
    "batch": int,
    "micro_batch": int,
    "world_size": int,
    "micro_size": int,
    "sources": list,
}
_SOURCE_KEYS = {"name": str, "shards_fingerprint": str, "stream_seed": int, "start_token": int, "next_token": int}


class _RankMicroBatches(IterableDataset):
    """This rank's micro-batches from (batch, micro) on; each worker takes every n-th one."""

    def __init__(self, sampler: MixtureSampler, rank: int, world_size: int, micro_size: int, batch: int, micro: int):
        self.sampler = sampler
        self.rank_rows = sampler.global_batch_size // world_size
        self.first_row = rank * self.rank_rows
        self.micro_size = micro_size
        self.per_batch = self.rank_rows // micro_size
        self.start = batch * self.per_batch + micro

    def __iter__(self) -> Iterator[torch.Tensor]:
        """Each micro-batch's rows of seq_len + 1 tokens; in a worker as int32, a quarter of the bytes
        that inputs and targets in int64 would be to send to the loader's process, which makes them
        (`_inputs_targets`): at 64 x 2048 tokens that transfer, not the reading, bounded the loader."""
        info = get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        try:
            for u in itertools.count(self.start + worker, workers):
                k, j = divmod(u, self.per_batch)
                lo = self.first_row + j * self.micro_size
                tokens, _ = self.sampler.rows(k, lo, lo + self.micro_size)
                yield torch.from_numpy(tokens.astype(np.int32) if info is not None else tokens)
        except UserError as e:
            if info is None:
                raise
            yield _WorkerError(str(e))


@dataclass(frozen=True)
class _WorkerError:
    """A UserError met in a loader worker (a bucket that does not answer, a corrupt record batch), sent
    as an item and raised again in the loader's process: raised in the worker, it would reach the
    caller with the worker's traceback as its message, not as one line."""

    message: str


class TrainLoader:
    def __init__(
        self,
        sampler: MixtureSampler,
        rank: int,
        world_size: int,
        micro_size: int,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int = 2,
    ):
        B = sampler.global_batch_size
        if world_size < 1 or not 0 <= rank < world_size:
            raise UserError(f"rank {rank} is not in world size {world_size}")
        if B % world_size or (B // world_size) % micro_size or micro_size < 1:
            raise UserError(
                f"global batch size {B} must split evenly into {world_size} ranks of micro-batches of {micro_size} "
                f"(B / world_size / micro_size must be a whole number)"
            )
        self.sampler = sampler
        self.rank, self.world_size, self.micro_size = rank, world_size, micro_size
        self.num_workers, self.pin_memory, self.prefetch_factor = num_workers, pin_memory, prefetch_factor
        self.per_batch = B // world_size // micro_size
        self.batch, self.micro = sampler.first_batch, 0

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        dataset = _RankMicroBatches(self.sampler, self.rank, self.world_size, self.micro_size, self.batch, self.micro)
        # Workers start from forkserver's single-threaded process, not forked from this one: a fork
        # copies the locks that this process's threads (a streamed set's prefetch, fsspec's event loop,
        # Arrow's allocator) hold at that moment, and a worker that then takes one hangs or crashes.
        # That process was started once, with the environment of that moment: each worker takes this
        # one's (a bucket's credentials and endpoint may have been set since).
        extra = (
            {
                "prefetch_factor": self.prefetch_factor,
                "multiprocessing_context": WORKER_START,
                "worker_init_fn": functools.partial(_take_environment, dict(os.environ)),
            }
            if self.num_workers
            else {}
        )
        # Its own generator for the workers' base seed, which a DataLoader draws at each iterator from the
        # global one otherwise: a resumed run would then be a draw ahead of the run it continues.
        loader = DataLoader(
            dataset, batch_size=None, num_workers=self.num_workers, generator=torch.Generator(), **extra
        )
        it = iter(loader)
        pin = self.pin_memory and torch.cuda.is_available()  # as a DataLoader does: without CUDA, nothing to pin for
        while True:
            # Checked here, in the caller's process, so that max_epochs ends training with a one-line
            # UserError rather than a worker's wrapped traceback.
            self.sampler.check_batch(self.batch)
            rows = next(it)
            if isinstance(rows, _WorkerError):
                raise UserError(rows.message)
            item = _inputs_targets(rows, pin)
            self.micro += 1
            if self.micro == self.per_batch:
                self.batch, self.micro = self.batch + 1, 0
            yield item

    def state_dict(self) -> dict:
        s = self.sampler
        return {
            "version": STATE_VERSION,
            "fingerprint": s.fingerprint,
            "seq_len": s.seq_len,
            "global_batch_size": s.global_batch_size,
            "first_batch": s.first_batch,
            "batch": self.batch,
            "micro_batch": self.micro,
            "world_size": self.world_size,
            "micro_size": self.micro_size,
            "sources": s.positions(self.batch),
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue at the saved position (before iterating); see the module docstring for mismatches."""
        _check_state(state)
        old = self.sampler
        same_shape = state["seq_len"] == old.seq_len and state["global_batch_size"] == old.global_batch_size
        saved_mix = old.mix.with_saved_starts(state, "start_token")
        if same_shape and saved_mix is not None and saved_mix.fingerprint == state["fingerprint"]:
            sampler = MixtureSampler(saved_mix, old.seq_len, old.global_batch_size, state["first_batch"])
        elif old.mix.allow_mixture_change:
            if state["micro_batch"] != 0:
                raise UserError(
                    "loader state: a changed mixture can only be resumed at a batch boundary (micro_batch 0)"
                )
            rebased = old.mix.with_saved_starts(state, "next_token", require_all=False)
            sampler = MixtureSampler(rebased, old.seq_len, old.global_batch_size, state["batch"])
        else:
            changes = [
                f"{what} {a} -> {b}"
                for what, a, b in (
                    ("fingerprint", state["fingerprint"][:12], old.fingerprint[:12]),
                    ("seq_len", state["seq_len"], old.seq_len),
                    ("global batch", state["global_batch_size"], old.global_batch_size),
                )
                if a != b
            ]
            raise UserError(
                f"loader state was saved for another mixture or batch shape than {old.mix.path} "
                f"({', '.join(changes) or 'its sources start elsewhere'}); "
                f"load the mixture with allow_mixture_change=True to accept an intended change"
            )
        if state["micro_batch"] and (state["world_size"], state["micro_size"]) != (self.world_size, self.micro_size):
            raise UserError(
                f"loader state stops inside batch {state['batch']} (micro-batch {state['micro_batch']}) "
                f"with world size {state['world_size']} and micro size {state['micro_size']}; "
                "resume with the same ones or from a batch boundary"
            )
        self.sampler = sampler
        self.batch, self.micro = state["batch"], state["micro_batch"]


def _check_state(state: object) -> None:
    def fail(problem: str) -> UserError:
        return UserError(f"loader state: {problem}")

    if not isinstance(state, dict):
        raise fail(f"expected a dict, got {type(state).__name__}")
    for key, kind in _STATE_KEYS.items():
        if not isinstance(state.get(key), kind) or isinstance(state.get(key), bool):
            raise fail(f"key {key!r} missing or not a {kind.__name__}")
    if state["version"] != STATE_VERSION:
        raise fail(f"version {state['version']}, this pretrainkit reads version {STATE_VERSION}")
    for i, entry in enumerate(state["sources"]):
        if not isinstance(entry, dict) or not all(isinstance(entry.get(k), t) for k, t in _SOURCE_KEYS.items()):
            raise fail(f"sources[{i}]: needs " + ", ".join(f"{k!r} ({t.__name__})" for k, t in _SOURCE_KEYS.items()))


def _inputs_targets(rows: torch.Tensor, pin_memory: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """(inputs, targets) int64 from rows of seq_len + 1 tokens; in pinned memory with `pin_memory`.
    Converted by numpy, in this thread: torch's conversion of a tensor this size is parallel, and its
    threads wait for cores that the workers hold (3.7 ms a micro-batch of 64 x 2048, against 0.3)."""
    inputs, targets = to_inputs_targets(rows.numpy())
    return (inputs.pin_memory(), targets.pin_memory()) if pin_memory else (inputs, targets)


def _take_environment(environment: dict[str, str], worker_id: int) -> None:
    """In a loader worker: the environment of the process that made the loader."""
    take_environment(environment)
