"""How a pipeline's stages run: the same jobs on local processes (`local`) or as Ray tasks (`ray`).

    with open_runner("ray", workers=None, ray_address="auto") as runner:
        runner.check_paths([f.path for f in files], out_dir)
        scans = runner.run(scan_part, jobs, "scan", weights=[job.nbytes for job in jobs], unit="B")

A stage is a list of independent jobs: a module-level function applied to small picklable job
descriptions, whose real output is files (with their own resume markers). A runner only decides
where each job runs. Every runner hands jobs out largest first (by `weights`), runs at most
`workers` at a time, feeds one progress bar per stage as jobs finish, and returns the results in
job order, so what a stage produces never depends on the executor or the number of workers. A
`UserError` raised by a job reaches the caller unchanged (the one-line message users see).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol, TypeVar

from pretrainkit.errors import UserError
from pretrainkit.progress import progress_bar

J = TypeVar("J")
R = TypeVar("R")
EXECUTORS = ("local", "ray")


class JobRunner(Protocol):
    workers: int

    def __enter__(self) -> JobRunner: ...

    def __exit__(self, *exc) -> None: ...

    def run(
        self,
        fn: Callable[[J], R],
        jobs: Sequence[J],
        desc: str,
        weights: Sequence[float] | None = None,
        unit: str = "job",
    ) -> list[R]:
        """fn(job) for every job, results in job order."""

    def check_paths(self, inputs: Sequence[str], out_dir: Path) -> None:
        """Fail with a UserError if a job could not read `inputs` or write into `out_dir`."""


def open_runner(executor: str = "local", workers: int | None = None, ray_address: str | None = None) -> JobRunner:
    """A runner (enter it with `with`). workers=None: every core (local) or every CPU of the cluster (ray)."""
    if workers is not None and workers < 1:
        raise UserError(f"--workers must be at least 1, got {workers}")
    if executor == "local":
        if ray_address:
            raise UserError("--ray-address needs --executor ray")
        from pretrainkit.dataprep.executors.local import LocalRunner

        return LocalRunner(workers or os.cpu_count() or 1)
    if executor == "ray":
        from pretrainkit.dataprep.executors.ray import RayRunner

        return RayRunner(workers, ray_address)
    raise UserError(f"--executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")


def largest_first(weights: Sequence[float]) -> list[int]:
    return sorted(range(len(weights)), key=lambda i: -weights[i])


def stage_progress(desc: str, weights: Sequence[float], unit: str):
    return progress_bar(total=sum(weights), desc=desc, unit=unit, unit_scale=True, leave=False)


def limit_threads(threads: int) -> None:
    """Keep a worker's native thread pools to the CPUs it was given (the parallelism comes from the
    workers). Must run before the pools start: at the worker's start, before its first job."""
    for name in ("RAYON_NUM_THREADS", "OMP_NUM_THREADS"):  # tokenizers (Rust rayon); numpy's BLAS
        os.environ[name] = str(threads)
