"""`kill -9` of `ptk dedup`, `ptk tokenize` or `ptk prepare` takes its local worker processes with it (and
the forkserver that started them, where one did)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time

import pytest

from pretrainkit.shards.tokenizer import train_tokenizer


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, reuters_docs) -> dict[str, str]:
    from fixtures.corpora import write_jsonl

    root = tmp_path_factory.mktemp("lifetime")
    write_jsonl(reuters_docs, root / "reuters.jsonl")
    train_tokenizer([text for _, text in reuters_docs[:300]], 512).save(str(root / "tok.json"))
    return {"corpus": str(root / "reuters.jsonl"), "tok": str(root / "tok.json")}


@pytest.mark.parametrize("command", ["dedup", "tokenize", "prepare"])
def test_workers_die_with_the_killed_command(tmp_path, inputs, processes_started_by, kill_parent, command):
    argv = [
        sys.executable,
        "-m",
        "pretrainkit.cli",
        command,
        inputs["corpus"],
        "-o",
        str(tmp_path / "out"),
        "--workers",
        "2",
    ]
    if command != "dedup":
        argv += ["--tokenizer", inputs["tok"]]
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while len((started := processes_started_by(proc.pid))["workers"]) < 2:
            assert proc.poll() is None and time.monotonic() < deadline, "the command never had its 2 workers"
            time.sleep(0.005)
        alive = kill_parent(proc, started["workers"] | started["helpers"])
        assert not alive, f"workers {sorted(alive)} outlived their killed parent"
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of the session, even when the test fails
            os.killpg(proc.pid, signal.SIGKILL)
