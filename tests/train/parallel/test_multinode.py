"""Training across nodes: two torchrun "nodes" on this machine (`--nnodes 2`, c10d rendezvous on the
loopback) give the losses, grad norms, validation losses and final weights of one node with as many
processes, bit for bit: one process per node under FSDP2 against `ptk train --nproc 2`, then resumed
from its step-8 checkpoint on two nodes; with `run_dir` in a bucket (a real S3 server on the loopback,
a work folder per node for its mirror), killed (-9) during a save and resumed from the bucket on two
nodes with empty work folders, then on one node; two per node under HSDP (sharded within a node,
replicated across) against `--nproc 4`; a loss spike rolled back on two nodes with `run_dir` in the
bucket, against the same spike rolled back on one node.

What this cannot show on one machine: a real network between the nodes, hostnames other than the
loopback, run directories on a network filesystem.
"""

from __future__ import annotations

import json
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fixtures.corpora import DATA, need_data
from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.remote.staging import WORK_DIR_ENV
from pretrainkit.shards import write_shards
from pretrainkit.train.checkpoint.export import checkpoint_model, find_checkpoint

# FSDP2: all-gathers and reduce-scatters cross the nodes every step, not only DDP's all-reduce. On the
# CPU (gloo) even where a GPU is: several processes cannot share one under NCCL.
RUN = {
    "device": "cpu",
    "parallel": "fsdp",
    "max_steps": 12,
    "checkpoint": {"every": 4, "keep": 3},
    "eval": {"every": 6, "batches": 1},
}
RESUME_FROM = 8
RUN_SEQ_LEN, RUN_BATCH = 32, 8  # the kit's (tests/train/conftest.py)
SAVING = "outputs/*/checkpoints/.tmp-step-*/*"  # in a work folder: a checkpoint being written into a mirror


def free_port() -> int:
    """A port nothing listens on now (the kernel's pick for port 0), for the rendezvous store."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_command(config: Path, port: int, node: int, nproc_per_node: int) -> list[str]:
    """What each node of a cluster runs (docs/clusters.md), with the loopback for the first node's
    hostname. The first node hosts the rendezvous store (`is_host`), as the node named in the
    endpoint does on a cluster; here both nodes are 127.0.0.1, so it is said outright."""
    return [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nnodes=2",
        f"--nproc_per_node={nproc_per_node}",
        "--rdzv_backend=c10d",
        f"--rdzv_endpoint=127.0.0.1:{port}",
        f"--rdzv_id={config.parent.name}",
        f"--rdzv_conf=is_host={int(node == 0)}",
        "--local_addr=127.0.0.1",  # the address the workers' process group meets at (rank 0's node)
        "-m",
        "pretrainkit.train",
        str(config),
    ]


@pytest.fixture
def two_nodes(kit, monkeypatch) -> Iterator:
    """`run(config)`: both nodes of a run started, waited for, and their logs returned; every process a
    test started is killed at the end, whatever happened (torchrun and its workers, found by config).
    `work`: a work folder per node (where a run_dir URL's mirror is), as on two machines; `kill_when`:
    every process of both nodes killed at once (kill -9) as soon as it returns True."""
    started: list[Path] = []

    def run(
        config: Path,
        nproc_per_node: int = 1,
        work: tuple[Path, Path] | None = None,
        kill_when: Callable[[], bool] | None = None,
    ) -> list[str]:
        started.append(config)
        port = free_port()
        logs = [config.parent / f"node{node}.log" for node in range(2)]
        nodes = []
        for node, log in enumerate(logs):
            with open(log, "wb") as out, monkeypatch.context() as env:
                if work is not None:
                    env.setenv(WORK_DIR_ENV, str(work[node]))
                nodes.append(
                    kit.start(node_command(config, port, node, nproc_per_node), stdout=out, stderr=subprocess.STDOUT)
                )
        # Until both end, or one fails (its peer would wait for it in the rendezvous until torch's timeout);
        # the deadline is a bound for a hang, not for speed.
        deadline = time.monotonic() + kit.hang_seconds
        killed = False
        while not all(p.poll() == 0 for p in nodes) and not any(p.returncode for p in nodes):
            assert time.monotonic() < deadline, "the nodes did not end"
            if kill_when is not None and kill_when():
                kit.kill_processes(str(config))
                killed = all(p.wait() == -signal.SIGKILL for p in nodes)
                break
            time.sleep(0.005 if kill_when else 0.1)
        texts = [log.read_text(errors="replace") for log in logs]
        report = "\n".join(
            f"node {i} (exit status {p.returncode}): {t[-2000:]}" for i, (p, t) in enumerate(zip(nodes, texts))
        )
        assert killed if kill_when else all(p.returncode == 0 for p in nodes), report
        return texts

    yield run
    for config in started:  # torchrun and its workers each name the config on their command line
        kit.kill_processes(str(config))


def trained(rows: list[dict]) -> list[tuple]:
    return [(r["step"], r["loss"], r["grad_norm"], r["lr"]) for r in rows]


def validated(run_dir: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]


@pytest.fixture(scope="module")
def one_node(session_kit, tmp_path_factory) -> Path:
    """The reference: the run on one node of two processes (`ptk train --nproc 2`), its run_dir."""
    config = session_kit.config(tmp_path_factory.mktemp("one"), **RUN)
    proc = session_kit.ptk(config, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [r["step"] for r in session_kit.rows(config.parent / "run")] == list(range(1, 13))
    return config.parent / "run"


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    model, _ = checkpoint_model(find_checkpoint(run_dir))
    return model.state_dict()


def assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = final_weights(a), final_weights(b)
    assert wa.keys() == wb.keys()
    for name in wa:
        assert torch.equal(wa[name], wb[name]), name


@pytest.mark.distributed
def test_two_nodes_match_one_node_and_resume_across_nodes(kit, two_nodes, one_node, tmp_path: Path) -> None:
    reference = kit.rows(one_node)
    two = kit.config(tmp_path / "two", **RUN)
    logs = two_nodes(two)
    assert (logs[0] + logs[1]).count("ptk train: steps 1-12 of 12") == 1  # rank 0 says how the run went
    assert trained(kit.rows(tmp_path / "two" / "run")) == trained(reference)  # bitwise
    assert validated(tmp_path / "two" / "run") == validated(one_node)
    assert_same_weights(tmp_path / "two" / "run", one_node)

    # The two-node run as if stopped after its step-8 checkpoint, resumed on two nodes.
    shutil.copytree(tmp_path / "two" / "run", tmp_path / "resumed" / "run")
    for ckpt in (tmp_path / "resumed" / "run" / "checkpoints").iterdir():
        if int(ckpt.name.split("-")[1]) > RESUME_FROM:
            shutil.rmtree(ckpt)
    resumed = kit.config(tmp_path / "resumed", **RUN)
    logs = two_nodes(resumed)
    assert "step-0000008 (step 8)\nptk train: steps 9-12 of 12" in logs[0] + logs[1]
    assert trained(kit.rows(tmp_path / "resumed" / "run")) == trained(reference)
    assert_same_weights(tmp_path / "resumed" / "run", one_node)


def bucket_run(kit, s3, url: str, into: Path) -> tuple[list[str], Path]:
    """The bucket's run at `url`: its complete checkpoints (each checked against its meta.json), and a
    local copy of it to read."""
    files = kit.objects(s3, url)
    for rel, data in files.items():
        (into / rel).parent.mkdir(parents=True, exist_ok=True)
        (into / rel).write_bytes(data)
    return kit.whole_checkpoints(files), into


@pytest.mark.distributed
def test_two_nodes_with_a_run_dir_in_a_bucket_match_one_node_and_resume_from_the_bucket(
    kit, two_nodes, one_node, s3, tmp_path: Path, monkeypatch
) -> None:
    url = f"{s3.bucket}/runs/two"
    config = kit.config(tmp_path, **RUN, run_dir=url)
    work = (tmp_path / "work0", tmp_path / "work1")

    def saving_from_step_8() -> bool:  # a node's processes writing (or hashing, publishing) checkpoint 8 or 12
        return any(int(p.parent.name.rsplit("-", 1)[1]) >= 8 for w in work for p in w.glob(SAVING))

    # kill -9 of both nodes during a save: what the bucket holds is whole (step 4 at least, as pushed).
    two_nodes(config, work=work, kill_when=saving_from_step_8)
    assert "step-0000004" in kit.whole_checkpoints(kit.objects(s3, url))
    # Resumed on two nodes with empty work folders (two other machines): each fetches the checkpoint whole.
    for folder in work:
        shutil.rmtree(folder)
    logs = two_nodes(config, work=work)
    assert "ptk train: resuming from" in logs[0] + logs[1]
    checkpoints, run = bucket_run(kit, s3, url, tmp_path / "bucket")
    assert checkpoints == ["step-0000004", "step-0000008", "step-0000012"]  # every node's part, whole
    assert not [p for p in run.rglob("*") if ".tmp" in p.name]
    assert trained(kit.rows(run)) == trained(kit.rows(one_node))  # bitwise
    assert validated(run) == validated(one_node)
    assert_same_weights(run, one_node)
    # Each node's mirror kept its own part of a checkpoint it wrote only: the bucket holds the run.
    parts = [sorted(p.name for p in w.glob("outputs/*/checkpoints/step-0000012/*.distcp")) for w in work]
    assert parts == [["__0_0.distcp"], []]

    # As if stopped after step 8, resumed on one node in the first node's work folder: its mirror holds
    # parts of checkpoints, so the bucket's run is fetched, and no part is taken for a corrupt checkpoint.
    bucket = s3.bucket.removeprefix("s3://")
    newest = [{"Key": k} for k in s3.keys(bucket) if "/step-0000012/" in k]
    s3.client().delete_objects(Bucket=bucket, Delete={"Objects": newest})
    monkeypatch.setenv(WORK_DIR_ENV, str(work[0]))
    proc = kit.ptk(config, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "step-0000008 (step 8)\nptk train: steps 9-12 of 12" in proc.stderr and "corrupt" not in proc.stderr
    checkpoints, run = bucket_run(kit, s3, url, tmp_path / "one-node")
    assert checkpoints == ["step-0000004", "step-0000008", "step-0000012"]
    assert trained(kit.rows(run)) == trained(kit.rows(one_node))
    assert_same_weights(run, one_node)


@pytest.mark.distributed
def test_hsdp_over_two_nodes_of_two_processes_matches_one_node_of_four(kit, two_nodes, tmp_path: Path) -> None:
    # The layout for nodes: shards within a node, replicas across (dp_replicate = nodes); torchrun
    # numbers a node's processes consecutively, so ranks 0-1 share one node and 2-3 the other.
    hsdp = {**RUN, "parallel": {"data": "hsdp", "dp_replicate": 2}, "max_steps": 4, "eval": {"every": 4, "batches": 1}}
    one = kit.config(tmp_path / "one", **hsdp)
    proc = kit.ptk(one, nproc=4)
    assert proc.returncode == 0, proc.stderr[-3000:]
    two = kit.config(tmp_path / "two", **hsdp)
    two_nodes(two, nproc_per_node=2)
    assert trained(kit.rows(tmp_path / "two" / "run")) == trained(kit.rows(tmp_path / "one" / "run"))
    assert validated(tmp_path / "two" / "run") == validated(tmp_path / "one" / "run")
    assert_same_weights(tmp_path / "two" / "run", tmp_path / "one" / "run")


NOISE = 200  # the noise document's bytes are 200-255: Shakespeare's text has none (EOS is 256)


@pytest.fixture(scope="module")
def spiking_mixture(tmp_path_factory) -> tuple[Path, list[int]]:
    """Shakespeare's speeches (byte tokens) and one document of random high bytes, in a mixture whose seed
    puts that document in global batches after the first checkpoint and the spike detector's history:
    (the mixture file, the batches holding some of it)."""
    root = tmp_path_factory.mktemp("spiking")
    text = need_data(DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:8_000]  # ~3 runs' worth
    docs = [np.frombuffer(s.encode(), np.uint8).astype(np.uint16) for s in text.split("\n\n") if s.strip()]
    docs.append(np.random.default_rng(0).integers(NOISE, 256, 400).astype(np.uint16))
    write_shards(docs, root / "speeches", vocab_size=257, eos_id=256, tokenizer_sha256="b" * 64)
    mix = root / "mix.yaml"
    for seed in range(100):
        source = {"name": "speeches", "shards": "speeches", "weight": 1}
        mix.write_text(
            yaml.safe_dump({"seed": seed, "holdout": {"fraction": 0.02, "min_tokens": 1024}, "sources": [source]})
        )
        sampler = MixtureSampler(load_mixture(mix), seq_len=RUN_SEQ_LEN, global_batch_size=RUN_BATCH)
        tokens = [sampler.batch(k)[0] for k in range(RUN["max_steps"])]
        noisy = [k for k, t in enumerate(tokens) if ((t >= NOISE) & (t < 256)).any()]
        if noisy and 5 <= noisy[0] <= 6:
            return mix, noisy
    raise AssertionError("no seed below 100 puts the noise document after step 5")


@pytest.mark.distributed
def test_a_spike_rolled_back_on_two_nodes_with_a_run_dir_in_a_bucket_matches_one_node(
    kit, two_nodes, spiking_mixture, s3, tmp_path: Path
) -> None:
    """Each node restores the checkpoint before the spike from its own mirror and the bucket: the same
    events, losses and weights as the rollback on one node of two processes."""
    mixture, noisy = spiking_mixture
    spiky = {
        **RUN,
        "data": {"mixture": str(mixture), "seq_len": RUN_SEQ_LEN},
        "spikes": {"action": "rollback", "window": 3, "min_history": 3},
    }
    one = kit.config(tmp_path / "one", **spiky)
    proc = kit.ptk(one, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    events = spike_events(tmp_path / "one" / "run")
    assert events and events[0]["action"] == "rollback" and events[0]["batch"] in noisy, events
    assert events[0]["rollback_to"] == 4

    url = f"{s3.bucket}/runs/spiky"
    two = kit.config(tmp_path / "two", **spiky, run_dir=url)
    two_nodes(two, work=(tmp_path / "work0", tmp_path / "work1"))
    checkpoints, run = bucket_run(kit, s3, url, tmp_path / "bucket")
    assert spike_events(run) == events
    assert trained(kit.rows(run)) == trained(kit.rows(tmp_path / "one" / "run"))  # bitwise
    assert_same_weights(run, tmp_path / "one" / "run")


def spike_events(run_dir: Path) -> list[dict]:
    rows = [json.loads(line) for line in (run_dir / "events.jsonl").read_text().splitlines()]
    keys = ("step", "batch", "action", "rollback_to")
    return [{k: r[k] for k in keys if k in r} for r in rows]
