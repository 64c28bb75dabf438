"""`--executor ray` on a Ray cluster of two nodes started on this machine as on a real one (`ray start
--head`, then `ray start --address HEAD:PORT` for a second node; one CPU each): `ptk dedup` and `ptk
tokenize` write the bytes and print the summary `--executor local` does, and their tasks ran on both
nodes (a worker of each node's raylet was seen running a `ptk` task).

Nodes without a shared filesystem: the second node runs in a mount namespace of its own, where an
empty tmpfs covers the work folder (`Cluster.work`) of the drivers that use it, as another machine's
disk would at that path. With URL inputs and output, its tasks work in their own copy of the staged
output, carried through the bucket (a real S3 server on the loopback).

What one machine cannot show: a network between the nodes (both have this machine's address: Ray
turns 127.0.0.1 into it).
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from fixtures.corpora import write_jsonl

pytestmark = pytest.mark.slow  # two Ray nodes start for each test: the Ray tier, out of make test-fast

RAY = str(Path(sys.executable).with_name("ray"))
# Token authentication, as a real cluster has it: every node and driver gets the cluster's token
# (here in the environment of the processes a test starts, not in ~/.ray, which is the user's).
# Without RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER (test_ray.py sets it to 0 in this process, for its local
# instance on the loopback): with it at 0 a second node refuses to start.
RAY_ENV = {
    **{k: v for k, v in os.environ.items() if k != "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"},
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(32),
}
# `ray start` waits for its node; a bound for a hang, not for speed.
START_SECONDS = 120


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Cluster:
    address: str
    temp_dir: str  # every process of the cluster names it (or is a child of one that does)
    env: dict[str, str]  # of the nodes and the drivers: the cluster's token, the S3 server's variables
    work: str  # a work folder that the second node does not share with the first (a tmpfs of its own there)

    def processes(self, table: dict[int, tuple[int, str]]) -> set[int]:
        """The cluster's processes: those whose command line names its temp dir, and their descendants
        (Ray's workers retitle themselves `ray::...`). Found in /proc, not by `ray stop`, which stops
        every Ray process of the machine (other tests' and other users' instances too)."""
        found = {pid for pid in table if self.temp_dir in _cmdline(pid)}
        frontier = found
        while frontier:
            frontier = {pid for pid, (ppid, _) in table.items() if ppid in frontier} - found
            found |= frontier
        return found

    def raylets(self, table: dict[int, tuple[int, str]]) -> set[int]:
        return {pid for pid in self.processes(table) if table[pid][1].endswith("/raylet")}


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace")
    except OSError:
        return ""


def start_node(cluster: Cluster, *args: str, own_work: bool = False) -> None:
    """`ray start` for one node, with every port it would take by default (and a second node on this
    machine would then find in use) taken from the free ones. `own_work`: in a mount namespace where an
    empty tmpfs covers `cluster.work` (the node's processes stay in it after `ray start` returns)."""
    temp_dir = cluster.temp_dir
    cmd = [
        RAY,
        "start",
        *args,
        "--num-cpus=1",
        "--object-store-memory=100000000",
        "--disable-usage-stats",
        f"--temp-dir={temp_dir}",
        f"--dashboard-agent-listen-port={free_port()}",
    ]
    if own_work:
        mount = f"mount -t tmpfs ptk-node-work {shlex.quote(cluster.work)} && exec {shlex.join(cmd)}"
        cmd = ["unshare", "--map-root-user", "--mount", "--propagation", "private", "sh", "-c", mount]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=START_SECONDS, env=cluster.env)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.fixture(scope="module")
def cluster(process_table, s3_server_session) -> Iterator[Cluster]:
    # Ray's sockets live under the temp dir and a socket path has at most 107 bytes: a short one.
    temp_dir = tempfile.mkdtemp(prefix="ptkray", dir="/tmp")
    port = free_port()
    work = Path(temp_dir) / "work"
    work.mkdir()
    env = {**RAY_ENV, **s3_server_session.environment()}
    cluster = Cluster(f"127.0.0.1:{port}", temp_dir, env, str(work))
    try:
        # Ray turns 127.0.0.1 into this machine's network address for every node and driver, as it
        # would another node's: both nodes and the drivers meet there.
        start_node(
            cluster,
            "--head",
            f"--port={port}",
            "--include-dashboard=false",
            f"--ray-client-server-port={free_port()}",
            f"--dashboard-port={free_port()}",
        )
        start_node(cluster, f"--address={cluster.address}", own_work=True)
        assert len(cluster.raylets(process_table())) == 2
        yield cluster
    finally:
        stop(cluster, process_table)
        shutil.rmtree(temp_dir, ignore_errors=True)


def stop(cluster: Cluster, process_table) -> None:
    """SIGKILL to every process of the cluster (what `ray stop --force` does, to this cluster alone)."""
    deadline = time.monotonic() + START_SECONDS
    while (left := cluster.processes(process_table())) and time.monotonic() < deadline:
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
    assert not left, f"the Ray cluster's processes outlived SIGKILL: {sorted(left)}"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, reuters_docs) -> Path:
    """1200 Reuters articles in 4 files, each with an exact copy: 4 scan jobs for 2 nodes."""
    inputs = tmp_path_factory.mktemp("ray2-corpus") / "in"
    for i in range(4):
        docs = reuters_docs[:1200][i::4]
        write_jsonl(docs + [(f"{doc_id}-dup", text) for doc_id, text in docs], inputs / f"part{i}.jsonl")
    return inputs


@contextlib.contextmanager
def task_parents(process_table) -> Iterator[set[int]]:
    """The parents (raylets) of the Ray workers seen running a `ptk` task while the block runs."""
    seen: set[int] = set()
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.update(ppid for ppid, title in process_table().values() if title.startswith("ray::ptk "))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        yield seen
    finally:
        done.set()
        watcher.join()


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def summary(proc: subprocess.CompletedProcess, out: str | Path) -> list[str]:
    """The summary a command printed, its output folder as OUT and its timings left out."""
    return [
        line
        for line in proc.stdout.replace(str(out), "OUT").splitlines()
        if not re.search(r"( in|took) +[\d.]+ s\b", line)
    ]


def ptk(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "pretrainkit.cli", *args, "--workers", "2"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=START_SECONDS, env=env or RAY_ENV)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


@pytest.mark.parametrize("command", ["dedup", "tokenize"])
def test_two_ray_nodes_write_what_local_writes(tmp_path, cluster, corpus, reuters_docs, process_table, command):
    from pretrainkit.shards.tokenizer import train_tokenizer

    args = [command, str(corpus)]
    if command == "tokenize":
        train_tokenizer([text for _, text in reuters_docs[:300]], 512).save(str(tmp_path / "tok.json"))
        args += ["--tokenizer", str(tmp_path / "tok.json"), "--shard-size", "20K"]
    local = ptk(*args, "-o", str(tmp_path / "local"))
    with task_parents(process_table) as parents:
        remote = ptk(*args, "-o", str(tmp_path / "ray"), "--executor", "ray", "--ray-address", cluster.address)
    assert cluster.raylets(process_table()) <= parents, "the tasks did not run on both nodes"
    assert summary(local, tmp_path / "local") and summary(remote, tmp_path / "ray") == summary(
        local, tmp_path / "local"
    )
    assert snapshot(tmp_path / "ray") == snapshot(tmp_path / "local")


def objects(s3, prefix: str) -> dict[str, bytes]:
    bucket = s3.bucket.removeprefix("s3://")
    return {k[len(prefix) + 1 :]: v for k, v in s3.objects(bucket).items() if k.startswith(prefix + "/")}


def apart_raylet(cluster: Cluster, process_table) -> int:
    """The raylet of the node with a mount namespace of its own (the second node)."""
    own = os.readlink("/proc/self/ns/mnt")
    (apart,) = [pid for pid in cluster.raylets(process_table()) if os.readlink(f"/proc/{pid}/ns/mnt") != own]
    return apart


def node_files(cluster: Cluster, raylet: int) -> list[str]:
    """The files under the work folder as the node of `raylet` sees it (through its mount namespace)."""
    root = Path(f"/proc/{raylet}/root{cluster.work}")
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_nodes_without_a_shared_filesystem_write_what_local_writes(
    tmp_path, s3, cluster, corpus, reuters_docs, process_table
):
    """`ptk prepare --tokenizer` (its dedup and tokenize stages in one output tree) from and to a bucket."""
    from pretrainkit.remote.staging import WORK_DIR_ENV, publish
    from pretrainkit.shards.tokenizer import train_tokenizer

    (tmp_path / "tok").mkdir()
    train_tokenizer([text for _, text in reuters_docs[:300]], 512).save(str(tmp_path / "tok" / "tok.json"))
    publish(tmp_path / "tok", f"{s3.bucket}/tok")
    publish(corpus, f"{s3.bucket}/in")
    options = ["--shard-size", "20K", "--tokenizer"]
    args = ["prepare", f"{s3.bucket}/in", *options, f"{s3.bucket}/tok/tok.json"]
    local_args = ["prepare", str(corpus), *options, str(tmp_path / "tok" / "tok.json")]
    apart = apart_raylet(cluster, process_table)
    assert not node_files(cluster, apart)

    local = ptk(*local_args, "-o", str(tmp_path / "local"), env=cluster.env)
    env = {**cluster.env, WORK_DIR_ENV: cluster.work}
    with task_parents(process_table) as parents:
        remote = ptk(*args, "-o", f"{s3.bucket}/out", "--executor", "ray", "--ray-address", cluster.address, env=env)
    assert cluster.raylets(process_table()) <= parents, "the tasks did not run on both nodes"
    assert summary(remote, f"{s3.bucket}/out") == summary(local, tmp_path / "local")

    want = {k: v for k, v in snapshot(tmp_path / "local").items() if k != ".pretrainkit-lock"}
    got = {
        k: v.replace(f"{s3.bucket}/tok".encode(), str(tmp_path / "tok").encode()) for k, v in objects(s3, "out").items()
    }
    assert got == want, "the same objects as the local run's files, the work area removed"
    assert not node_files(cluster, apart), "the node's copy is removed after success"
    assert not any(Path(cluster.work).rglob("*.jsonl*")), "and the driver's"


def test_nodes_without_a_shared_filesystem_resume_after_kill_9(
    tmp_path, s3, cluster, corpus, reuters_docs, process_table
):
    """The driver killed once both it and the second node hold work files: the same command ends with
    the local run's bytes (the node's copy of the killed run is discarded, not trusted). Then a later
    corpus deduplicated against the first's index in the bucket."""
    from pretrainkit.remote.staging import WORK_DIR_ENV, publish

    publish(corpus, f"{s3.bucket}/in")
    local = ptk("dedup", str(corpus), "-o", str(tmp_path / "local"), env=cluster.env)
    apart = apart_raylet(cluster, process_table)
    argv = ["dedup", f"{s3.bucket}/in", "-o", f"{s3.bucket}/out", "--executor", "ray", "--ray-address", cluster.address]
    env = {**cluster.env, WORK_DIR_ENV: cluster.work}
    cmd = [sys.executable, "-m", "pretrainkit.cli", *argv, "--workers", "2"]
    process = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while process.poll() is None and not (
            any(Path(cluster.work, "outputs").glob("*/.work/*/*")) and node_files(cluster, apart)
        ):
            time.sleep(0.005)
        process.send_signal(signal.SIGKILL)
    finally:
        process.wait(60)
    assert process.returncode == -signal.SIGKILL, "the run ended before it was killed"
    assert "stats.json" not in objects(s3, "out")

    remote = ptk(*argv, env=env)
    assert summary(remote, f"{s3.bucket}/out") == summary(local, tmp_path / "local")
    assert objects(s3, "out") == {k: v for k, v in snapshot(tmp_path / "local").items() if k != ".pretrainkit-lock"}
    assert not node_files(cluster, apart)

    # a later corpus against that index in the bucket (a folder the nodes fetch file by file)
    later = write_jsonl(reuters_docs[1000:1400], tmp_path / "later" / "c.jsonl").parent
    publish(later, f"{s3.bucket}/later")
    ptk("dedup", str(later), "-o", str(tmp_path / "local-later"), "--against", str(tmp_path / "local" / "index"))
    later_argv = [*argv[:1], f"{s3.bucket}/later", "-o", f"{s3.bucket}/later-out", *argv[4:]]
    ptk(*later_argv, "--against", f"{s3.bucket}/out/index", env=env)
    want = {k: v for k, v in snapshot(tmp_path / "local-later").items() if k != ".pretrainkit-lock"}
    got = objects(s3, "later-out")
    assert b'"against_docs": 0' not in got["stats.json"]
    index = (f"{s3.bucket}/out".encode(), str(tmp_path / "local").encode())
    assert {k: v.replace(*index) for k, v in got.items()} == want
