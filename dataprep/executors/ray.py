"""The Ray executor: every job of a stage is one Ray task, on any node of a cluster.

    with RayRunner(workers=None, address="auto") as runner:      # or address=None: a local instance
        scans = runner.run(scan_part, jobs, "scan", weights=[job.nbytes for job in jobs], unit="B")

The jobs, their files and their resume markers are the local executor's; only where they run
changes, so the outputs are byte-identical to `--executor local`. Each task declares
`cpus_per_task` CPUs (1: a job is single-threaded, and its native thread pools are held to that),
at most `workers` tasks are in flight (default: the cluster's CPUs), and a task runs in the driver's
working directory, so relative paths mean the same on every node: inputs and outputs must be on a
filesystem every node mounts at the same path, or be URLs, whose staging folder is then carried to
the nodes that do not see it through the bucket (`executors.mirror`). A task whose worker dies (killed, out of memory, a
lost node) is run again by Ray, up to `TASK_RETRIES` times; the job rewrites its files from the
start under new temporary names, so a retried job leaves the same bytes. A job that raises (bad
input) fails the run with its own one-line message, and the other tasks end (cancelled, or with the
connection the runner opened and shuts down).

Address: `address` (`--ray-address`), else `RAY_ADDRESS`, else a local Ray instance started for
the run (on the loopback interface) and shut down after it. A driver that is already connected
(`ray.init()` before) is used as it is and left connected.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import sys
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from pretrainkit.dataprep.executors import J, R, largest_first, limit_threads, stage_progress
from pretrainkit.dataprep.executors.mirror import DriverCopy, Mirror, NodeResult, forget, plan_mirror, run_on_node
from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from pretrainkit.sigterm import reclaim_sigterm

RAY_MISSING = "--executor ray needs Ray, which is not installed: pip install 'pretrainkit[ray]'"
TASK_RETRIES = 3
SHARED_FS = (
    "with --executor ray, inputs and outputs must be URLs (s3://...) or on a filesystem every node mounts "
    "at the same path (NFS, Lustre, a mounted bucket)"
)


def import_ray():
    try:
        import ray
    except ImportError:
        raise UserError(RAY_MISSING) from None
    return ray


def _node() -> str:
    import ray

    return f"Ray node {ray.util.get_node_ip_address()}"


def _run_job(fn: Callable, job: Any, cwd: str, cpus: int, mirror: Mirror | None) -> Any:
    """The body of every task: the driver's working directory, the declared threads, then the job (on a
    node without the driver's files, in the node's copy of the output's tree: `executors.mirror`)."""
    limit_threads(cpus)
    if mirror is not None and not mirror.sees_driver_files():
        with contextlib.suppress(OSError):  # the paths in a carried tree's jobs are absolute
            os.chdir(cwd)
        try:
            return NodeResult(*run_on_node(mirror, fn, job, _node()))
        except FileNotFoundError as e:
            raise UserError(f"{e.filename}: not found on {_node()}, which has no shared filesystem") from None
    try:
        os.chdir(cwd)
    except OSError:
        raise UserError(f"{_node()} cannot enter the driver's working directory {cwd}: {SHARED_FS}") from None
    try:
        return fn(job)
    except FileNotFoundError as e:
        raise UserError(f"{e.filename}: not found on {_node()}: {SHARED_FS}") from None


def _probe(cwd: str, probe: str, token: str, inputs: Sequence[str]) -> tuple[str, bool] | None:
    """On one node: can it see the driver's probe file and the inputs, and write beside the probe?
    None, or what it cannot do and whether that is because it does not see the driver's files."""
    try:
        os.chdir(cwd)
        seen = Path(probe).read_text()
    except OSError:
        seen = None
    if seen != token:
        return (
            f"{_node()} does not see the output directory the driver writes ({Path(probe).parent}): {SHARED_FS}",
            True,
        )
    for path in inputs:
        if not os.path.exists(path):
            return f"{path}: not found on {_node()}: {SHARED_FS}", True
    try:
        write_text_atomic(f"{probe}.{uuid.uuid4().hex}", token)
    except OSError as e:
        return f"{Path(probe).parent}: {_node()} cannot write there ({e.strerror or e})", False
    return None


class RayRunner:
    def __init__(self, workers: int | None = None, address: str | None = None, cpus_per_task: int = 1):
        self.workers = workers or 0
        self.address = address or os.environ.get("RAY_ADDRESS") or None
        self.cpus_per_task = cpus_per_task
        self._ray = None
        self._owns_connection = False
        self._session = uuid.uuid4().hex
        self._carried: DriverCopy | None = None  # the output's tree, for nodes without the driver's files
        self._carried_to: list[str] = []  # those nodes' IDs

    def __enter__(self) -> RayRunner:
        if self.address is None:
            # Ray binds the instance it starts to the machine's network address unless told this;
            # an instance for one run needs no more than the loopback interface.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        ray = import_ray()
        if not ray.is_initialized():
            try:
                ray.init(
                    address=self.address, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR
                )
            except ConnectionError as e:
                raise UserError(f"--ray-address {self.address}: no Ray cluster there ({e})") from None
            finally:
                reclaim_sigterm()  # a SIGTERM stops the command as it does locally (its tasks end with it)
            self._owns_connection = True
        self._ray = ray
        cpus = int(ray.cluster_resources().get("CPU", 0))
        if cpus < self.cpus_per_task:
            self.__exit__(None, None, None)
            raise UserError(f"the Ray cluster has {cpus} CPUs; a task needs {self.cpus_per_task}")
        if not self.workers:
            self.workers = cpus // self.cpus_per_task
        self._task = ray.remote(num_cpus=self.cpus_per_task, max_retries=TASK_RETRIES)(_run_job)
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if self._carried is not None:
            if exc_type is None:  # after a failure they stay; a rerun's first task on the node discards them
                try:
                    self._on_each(self._carried_to, forget, self._carried.mirror)
                except Exception as e:  # the outputs are whole: a node lost since keeps its copy
                    print(
                        f"ptk: note: copies of the work on Ray nodes not removed ({type(e).__name__})", file=sys.stderr
                    )
            self._carried.close()
            self._carried = None
        if self._owns_connection:
            self._ray.shutdown()
            self._owns_connection = False

    def run(
        self,
        fn: Callable[[J], R],
        jobs: Sequence[J],
        desc: str,
        weights: Sequence[float] | None = None,
        unit: str = "job",
    ) -> list[R]:
        ray = self._ray
        weights = list(weights) if weights is not None else [1.0] * len(jobs)
        results: list = [None] * len(jobs)
        task = self._task.options(name=f"ptk {desc}")  # what `ray status` and the dashboard show
        cwd = os.getcwd()
        if self._carried:
            self._carried.publish()
        mirror = self._carried.mirror if self._carried else None
        pending: dict = {}
        with stage_progress(desc, weights, unit) as bar:

            def collect_one() -> None:
                (ref,), _ = ray.wait(list(pending), num_returns=1)
                i = pending.pop(ref)
                results[i] = self._result(ref, desc, i)
                bar.update(weights[i])

            try:
                for i in largest_first(weights):
                    while len(pending) >= self.workers:
                        collect_one()
                    pending[task.remote(fn, jobs[i], cwd, self.cpus_per_task, mirror)] = i
                while pending:
                    collect_one()
            except BaseException:
                # A connection of our own is shut down next (__exit__), which ends the tasks it owns; a
                # caller's stays, so its tasks are cancelled here. A cancel racing a task's reply crashed
                # Ray's core worker in the driver (a failed check in TaskManager::CompletePendingTask, exit
                # status 1, once in a SIGTERM test), and force=True as a worker's reply arrived too.
                if not self._owns_connection:
                    for ref in pending:
                        ray.cancel(ref)
                raise
        return results

    def _result(self, ref, desc: str, index: int) -> Any:
        ray = self._ray
        try:
            value = ray.get(ref)
            if isinstance(value, NodeResult):
                self._carried.take(value.files)
                return value.result
            return value
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, UserError):
                raise e.cause from None
            raise e.cause from e  # a bug: the remote traceback is in `e`
        except (
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.OutOfMemoryError,
            ray.exceptions.LocalRayletDiedError,
        ) as e:
            raise UserError(
                f"{desc}: job {index} failed: its Ray worker died {TASK_RETRIES + 1} times "
                f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
            ) from None

    def check_paths(self, inputs: Sequence[str], out_dir: Path) -> None:
        """Every node with CPUs sees the driver's files, or the output is a URL's staging folder and every
        input a URL, which the nodes that do not see them are then given through the bucket
        (`executors.mirror`). A probe file the driver writes into `out_dir` is read on each node, which
        also checks `inputs` and writes a file the driver then sees."""
        token = uuid.uuid4().hex
        probe = out_dir / f".ray-probe-{token}"
        try:
            out_dir.mkdir(parents=True, exist_ok=True)
            write_text_atomic(probe, token)
        except OSError as e:
            raise UserError(f"{out_dir}: cannot write the output directory ({e.strerror or e})") from None
        try:
            nodes = [
                n["NodeID"] for n in self._ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0
            ]
            problems = dict(zip(nodes, self._on_each(nodes, _probe, os.getcwd(), str(probe), token, list(inputs))))
            replies = list(out_dir.glob(f"{probe.name}.*"))
        finally:
            for p in out_dir.glob(f"{probe.name}*"):
                p.unlink()
        for problem, unseen in filter(None, problems.values()):
            if not unseen:  # a node that sees the files but cannot write there: carrying cannot help
                raise UserError(problem)
        apart = [node for node, problem in problems.items() if problem]
        if apart:
            self._carry_to(apart, problems[apart[0]][0], inputs, out_dir)
        elif len(replies) < len(nodes):
            raise UserError(
                f"{out_dir}: files written there by {len(nodes) - len(replies)} of {len(nodes)} Ray nodes "
                f"are not visible to the driver: {SHARED_FS}"
            )

    def _carry_to(self, nodes: list[str], problem: str, inputs: Sequence[str], out_dir: Path) -> None:
        """Carry the output's tree to `nodes`, which do not see the driver's files (`problem`), or fail."""
        mirror = plan_mirror(inputs, out_dir, self._session)
        if isinstance(mirror, str):
            raise UserError(f"{problem} ({mirror})")
        if self._carried is None:
            self._carried = DriverCopy(mirror)
        elif self._carried.mirror.tree == mirror.tree:  # a later stage of the same command
            inputs = tuple(dict.fromkeys(self._carried.mirror.inputs + mirror.inputs))
            self._carried.mirror = dataclasses.replace(self._carried.mirror, inputs=inputs)
        else:
            raise UserError(f"{out_dir}: a second output folder in one Ray run of nodes without a shared filesystem")
        self._carried_to = sorted(set(self._carried_to) | set(nodes))

    def _on_each(self, nodes: Sequence[str], fn: Callable, *args: Any) -> list:
        """fn(*args) on each node (a task that takes no CPU), the results in `nodes`' order."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        task = self._ray.remote(num_cpus=0, max_retries=TASK_RETRIES)(fn)
        on = [task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False)) for node in nodes]
        return self._ray.get([t.remote(*args) for t in on])
