"""The local runner from a parent with threads: it never forks from it (a fork copies the locks its
threads hold) but starts its workers from the forkserver, which gives the same results, never hangs
after Ray and tokenizers started their threads here, and whose workers die with a parent killed by
SIGKILL as forked ones do, and one whose start its dying parent cut short exits without a word; a
single-threaded parent still forks them (the cheaper start), and a dataprep
command's own process is one: its imports start no thread."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from fixtures.runner_parent import encode, encode_jobs, held_marks, parent_pid
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.processes import start_method, thread_count

ROOT = Path(__file__).resolve().parents[3]
# `ptk` as its console runs it, with the start method of each runner it starts written to the file $METHODS.
SPIED_CONSOLE = """
import json, os, sys
from pretrainkit import cli, processes
methods, start_method = [], processes.start_method
processes.start_method = lambda: methods.append(start_method()) or methods[-1]
sys.argv = ["ptk", *sys.argv[1:]]
try:
    cli.console()
finally:
    with open(os.environ["METHODS"], "w") as out:
        json.dump(methods, out)
"""
TEXTS = [f"record {i}: the quick brown fox jumps over the lazy dog {i * 7} times" for i in range(64)]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> tuple[str, str]:
    """A tiny BPE tokenizer trained here, and the texts as JSON: (tokenizer path, texts path)."""
    root = tmp_path_factory.mktemp("threaded-parent")
    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=120, special_tokens=["[UNK]"]))
    tokenizer.save(str(root / "tok.json"))
    (root / "texts.json").write_text(json.dumps(TEXTS), encoding="utf-8")
    return str(root / "tok.json"), str(root / "texts.json")


@contextlib.contextmanager
def runner_parent(mode: str, inputs: tuple[str, str]):
    """`fixtures/runner_parent.py` started in `mode`: (the process, its report); killed with its group at the end."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.Popen(
        [sys.executable, "-m", "fixtures.runner_parent", mode, *inputs],
        stdout=subprocess.PIPE,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        line = proc.stdout.readline()
        assert line, f"the {mode} parent ended without its report, status {proc.wait()}"
        yield proc, json.loads(line)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()


@pytest.mark.parametrize("mode", ["single", "threaded"])
def test_a_single_threaded_parent_forks_its_workers_a_threaded_one_does_not(inputs, process_table, kill_parent, mode):
    with runner_parent(mode, inputs) as (proc, report):
        assert report["method"] == {"single": "fork", "threaded": "forkserver"}[mode]
        forked = [p == report["pid"] for p in report["parents"]]
        assert forked == [mode == "single"] * 2  # a forkserver's workers are the server's children
        assert report["encoded"] == [encode(job) for job in encode_jobs(inputs[0], TEXTS)]
        workers = {pid for pid, (ppid, _) in process_table().items() if ppid in report["parents"]}
        assert len(workers) == 2
        if mode == "threaded":  # a SIGTERM to the group never ends the server in the middle of a start
            os.kill(report["parents"][0], signal.SIGTERM)
            time.sleep(0.5)
            assert report["parents"][0] in process_table(), "the forkserver died of SIGTERM"
        marks = [Path(mark) for mark in held_marks(inputs[1], report["pid"])]
        deadline = time.monotonic() + 30
        while not all(mark.exists() for mark in marks):
            assert time.monotonic() < deadline, "the workers never started their last jobs"
            time.sleep(0.01)
        # Killed in the middle of its workers' jobs: the workers die with it, however they started.
        alive = kill_parent(proc, workers)
        assert not alive, f"workers {sorted(alive)} outlived their killed parent ({mode})"


def test_a_dataprep_command_forks_its_workers(tmp_path: Path):
    """numpy's OpenBLAS pool and Arrow's jemalloc thread, which their imports start, would make it start a
    forkserver first (half a second a command)."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"text": f"{text} {text}"}) + "\n" for text in TEXTS), encoding="utf-8")
    quiet = ("OPENBLAS_NUM_THREADS", "JE_ARROW_MALLOC_CONF")
    env = {name: value for name, value in os.environ.items() if name not in quiet}
    env.update(METHODS=str(tmp_path / "methods.json"), PYTHONPATH=str(ROOT))
    argv = ["dedup", str(corpus), "-o", str(tmp_path / "out"), "--workers", "2"]
    done = subprocess.run([sys.executable, "-c", SPIED_CONSOLE, *argv], capture_output=True, text=True, env=env)
    assert done.returncode == 0, done.stderr
    methods = json.loads((tmp_path / "methods.json").read_text())
    assert methods and set(methods) == {"fork"}, methods


@pytest.mark.ray_in_process
@pytest.mark.timeout(240)  # a hung worker fails the test here, not at the suite's bound
def test_runners_after_ray_and_a_tokenizers_batch_never_hang_and_give_the_single_threaded_results(inputs, monkeypatch):
    with runner_parent("single", inputs) as (_, report):
        expected = report["encoded"]  # from a parent that forked its workers
    tokenizer, _ = inputs
    Tokenizer.from_file(tokenizer).encode_batch(TEXTS)  # tokenizers' native pool, started in this process
    monkeypatch.setenv("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # read at Ray's import: the loopback only
    import ray

    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR)
    try:
        assert thread_count() > 1 and start_method() == "forkserver"
        for _ in range(20):
            with LocalRunner(2) as runner:
                assert runner.run(encode, encode_jobs(tokenizer, TEXTS), "encode") == expected
                assert os.getpid() not in runner.run(parent_pid, [0, 1], "parents")
    finally:
        ray.shutdown()


# A start cut short: the forkserver forks a child, and the process that asked for it dies before it sends
# the child its start-up data (its write end closed unwritten). Prints the child's exit status.
ORPHANED_START = """
import multiprocessing, multiprocessing.forkserver as forkserver, os
multiprocessing.set_forkserver_preload(["pretrainkit.forkserver_setup"])
status, data = forkserver._forkserver.connect_to_new_process([])
with os.fdopen(status, "rb") as reply:
    pid = forkserver.read_signed(reply.fileno())
    os.close(data)
    print(forkserver.read_signed(reply.fileno()))  # the server sends the exit status
"""


def test_a_worker_whose_parent_died_before_its_start_data_exits_without_a_traceback():
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run(
        [sys.executable, "-c", ORPHANED_START], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (done.stdout, done.stderr) == ("1\n", "")
