"""All processes agree on an outcome: `together` runs a piece of work on each, exchanges how it went, and
every process raises the same one-line error if it failed anywhere.

    together(lambda: write_my_share(tmp), tmp)          # collective; AgreedError on every process if any failed
    values = together(lambda: read_header(path), path)  # each process's result, by rank

Without the exchange a process whose work failed leaves while its peers wait in the next collective
for it (a hang until the timeout), and gloo processes that exit without a clean shutdown intermittently
abort; an `AgreedError` is raised by all of them at once, so they can still meet for `shutdown()`.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException

from pretrainkit.errors import UserError, os_error

LOW_SPACE = 1 << 20  # bytes free under which a failed write is taken for a full disk


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def _chain(e: BaseException) -> Iterator[BaseException]:
    """`e`, what caused it, and (for DCP's CheckpointException) every process's exception."""
    seen, todo = set(), [e]
    while todo:
        err = todo.pop(0)
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        yield err
        todo += [err.__cause__, err.__context__]
        if isinstance(err, CheckpointException):
            todo += [exc for exc, _ in err.failures.values()]


def failure_message(e: BaseException, where: Path) -> str:
    """One line for a failed write under `where`. A full disk inside DCP surfaces as torch's zip writer's
    "unexpected pos" with no errno, so a directory left without free space is named as such."""
    for err in _chain(e):
        if isinstance(err, UserError):
            return str(err)
        if isinstance(err, OSError) and err.errno is not None:
            return str(os_error(err, where))
    with contextlib.suppress(OSError):
        if shutil.disk_usage(where if where.exists() else where.parent).free < LOW_SPACE:
            return f"{where}: no space left on device"
    lines = [ln for ln in str(e).splitlines() if ln.strip()]
    return f"{where}: {type(e).__name__}: {lines[-1] if lines else ''}"


class AgreedError(UserError):
    """A UserError that every process of the run raises together, after exchanging outcomes: they can
    still meet for a clean shutdown (gloo processes that exit without one intermittently abort)."""


def together(work: Callable[[], Any], where: Path, main_only: bool = False, group: Any = None) -> list[Any]:
    """Run `work` on every process (or on rank 0 only) and gather the results (over `group`, a group of
    every process; by default the training's). If it failed anywhere, every process raises the same
    AgreedError (the lowest failing rank's), so none waits for a peer that has left."""
    try:
        outcome = (None, work() if rank() == 0 or not main_only else None)
    except (Exception, CheckpointException) as e:  # noqa: BLE001 - reported as one line, on every process
        interrupt = next((err for err in _chain(e) if isinstance(err, KeyboardInterrupt)), None)
        if interrupt is not None:  # Ctrl-C (or SIGTERM) inside DCP's save or load is an interrupt, not a failure
            raise type(interrupt)() from e
        outcome = (failure_message(e, where), None)
    outcomes = [outcome]
    if world() > 1:
        outcomes = [None] * world()
        dist.all_gather_object(outcomes, outcome, group=group)
    for problem, _ in outcomes:
        if problem:
            raise AgreedError(problem)
    return [value for _, value in outcomes]
