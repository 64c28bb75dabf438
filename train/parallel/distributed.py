"""The process group a training process runs in: rank, world size, device, backend, clean shutdown.

    env = init_distributed("auto")     # torchrun's RANK/WORLD_SIZE/... or a single local process
    ...
    shutdown()                         # barrier, then end_process_groups()
    exit_process(0)                    # the end of a process torchrun started

Under torchrun (or any launcher setting MASTER_ADDR) the group is created from the environment; a
plain single process gets a world of one on an in-process store, so every code path (FSDP2 included)
runs the same way with one process or many. CUDA uses NCCL, CPU uses gloo.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from typing import NoReturn

import torch
import torch.distributed as dist

from pretrainkit.errors import UserError


@dataclass(frozen=True)
class DistEnv:
    rank: int
    world_size: int
    local_rank: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def select_device(preference: str, local_rank: int) -> torch.device:
    if preference == "cuda" and not torch.cuda.is_available():
        raise UserError("device: cuda was asked for but no CUDA device is available")
    if preference == "cuda" or (preference == "auto" and torch.cuda.is_available()):
        return torch.device("cuda", local_rank % max(1, torch.cuda.device_count()))
    return torch.device("cpu")


def launched() -> bool:
    """Whether a launcher (torchrun, or any setting MASTER_ADDR) started this process as one of a group."""
    return "MASTER_ADDR" in os.environ


def init_distributed(device_preference: str = "auto") -> DistEnv:
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    device = select_device(device_preference, local_rank)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        backend = "nccl" if device.type == "cuda" else "gloo"
        if launched():
            dist.init_process_group(backend, device_id=device if device.type == "cuda" else None)
        else:
            dist.init_process_group(backend, store=dist.HashStore(), rank=0, world_size=1)
    return DistEnv(dist.get_rank(), dist.get_world_size(), local_rank, device)


def shutdown() -> None:
    """Barrier before destroy: without it gloo processes intermittently abort at exit."""
    if dist.is_initialized():
        dist.barrier()
        end_process_groups()


def end_process_groups() -> None:
    """`destroy_process_group()`, except in a process a launcher started (`python -m pretrainkit.train` under
    torchrun, which ends with os._exit): there the groups stay alive until the process ends. Destroying
    a gloo group joins its worker threads while holding the GIL, and a worker still releasing the
    tensors of the last collective waits for the GIL: both processes of a finished or failed run then
    hang at exit (seen under load, a worker in ~AsyncAllgatherWork, the main thread in
    ~ProcessGroupGloo). Never destroyed, the groups cannot deadlock; the process's end frees them."""
    if dist.is_initialized() and not launched():
        dist.destroy_process_group()


def exit_process(code: int) -> NoReturn:
    """End a training process (every rank past `shutdown`, or failed) without the interpreter's
    teardown: with the process groups left alive (`end_process_groups`), tearing them down there
    could deadlock as above, and gloo's and DTensor's C++ threads intermittently abort a run that
    succeeded (SIGABRT, "terminate called without an active exception"). Files must be closed."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
