"""SIGTERM to `ptk dedup` or `ptk tokenize` with 2 workers, as a scheduler sends it: to the command alone
(Kubernetes) or to its whole process group (Slurm). The command stops its workers, prints one line
and no traceback from any process, exits with status 143, and the same command then finishes with
outputs byte-identical to an uninterrupted run's."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fixtures.signals import catches_sigterm
from pretrainkit.dataprep.tokenize.tokenizer import train_tokenizer

HANG_SECONDS = 600  # a bound for a hang, never for speed


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, reuters_docs) -> dict[str, Path]:
    from fixtures.corpora import write_jsonl

    root = tmp_path_factory.mktemp("sigterm")
    for i in range(4):  # doubled: more work, and duplicates to find
        docs = reuters_docs[i::4]
        write_jsonl(docs + [(f"{doc_id}-again", text) for doc_id, text in docs], root / "in" / f"part{i}.jsonl")
    train_tokenizer([text for _, text in reuters_docs[:300]], 512).save(str(root / "tok.json"))
    return {"corpus": root / "in", "tok": root / "tok.json", "root": root}


def command(name: str, inputs: dict[str, Path], out: Path) -> list[str]:
    argv = [sys.executable, "-m", "pretrainkit.cli", name, str(inputs["corpus"]), "-o", str(out), "--workers", "2"]
    return argv + (["--tokenizer", str(inputs["tok"])] if name == "tokenize" else [])


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def uninterrupted(inputs):
    """name -> the outputs of an uninterrupted run (made once per command)."""
    made: dict[str, dict[str, bytes]] = {}

    def outputs(name: str) -> dict[str, bytes]:
        if name not in made:
            out = inputs["root"] / f"clean-{name}"
            subprocess.run(command(name, inputs, out), check=True, capture_output=True)
            made[name] = snapshot(out)
        return made[name]

    return outputs


def processes_of(out: Path, process_table) -> set[int]:
    """The command and its workers (forks with its command line), by the output folder they name."""
    return {pid for pid in process_table() if str(out) in _cmdline(pid)}


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    return ""


@pytest.mark.parametrize("to", ["the command", "its process group"])
@pytest.mark.parametrize("name", ["dedup", "tokenize"])
def test_sigterm_stops_the_workers_in_one_line_and_the_same_command_resumes(
    tmp_path, inputs, uninterrupted, process_table, processes_started_by, name, to
):
    expected = uninterrupted(name)
    out = tmp_path / "out"
    proc = subprocess.Popen(
        command(name, inputs, out), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        deadline = time.monotonic() + HANG_SECONDS
        # Mid-run: a first job finished (its files in the work folder beside the plan stamp), 2 workers up.
        while not (
            len(list((out / ".work").glob("*"))) > 1 and len(started := processes_started_by(proc.pid)["workers"]) == 2
        ):
            assert proc.poll() is None and time.monotonic() < deadline, "the command never got under way"
            time.sleep(0.005)
        if to == "the command":
            os.kill(proc.pid, signal.SIGTERM)
        else:
            os.killpg(proc.pid, signal.SIGTERM)
        _, err = proc.communicate(timeout=HANG_SECONDS)
        assert proc.returncode == 143, err[-3000:]
        assert err.splitlines() == [f"ptk {name}: stopped by SIGTERM; the same command resumes"]
        assert not processes_of(out, process_table), "a worker outlived the stopped command"
        assert not started & set(process_table()), "a worker a forkserver started outlived the stopped command"
    finally:
        with contextlib.suppress(ProcessLookupError):  # whatever is left of the session, even when the test fails
            os.killpg(proc.pid, signal.SIGKILL)
    rerun = subprocess.run(command(name, inputs, out), capture_output=True, text=True)
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot(out) == expected


def test_sigterm_to_the_group_while_a_worker_waits_for_work_never_hangs(inputs, tmp_path: Path) -> None:
    """One input file: each stage has one job, so the other worker waits for work when the group's SIGTERM
    comes (with multiprocessing.Pool, a worker gone holding its queue's lock left the pool's end waiting
    for ever; test_local_runner.py makes each moment certain). At several moments of the run, counted
    from when the command handles SIGTERM: each ends (143, or 0 if it had finished)."""
    single = tmp_path / "single.jsonl"
    single.write_bytes((inputs["corpus"] / "part0.jsonl").read_bytes())
    for i, moment in enumerate((0.1, 0.3, 0.6, 0.9)):
        out = tmp_path / f"out{i}"
        victim = subprocess.Popen(
            [sys.executable, "-m", "pretrainkit.cli", "dedup", str(single), "-o", str(out), "--workers", "2"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        if catches_sigterm(victim.pid):
            time.sleep(moment)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(victim.pid, signal.SIGTERM)
        try:
            _, err = victim.communicate(timeout=HANG_SECONDS)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(victim.pid, signal.SIGKILL)
        assert victim.returncode in (0, 143) and "Traceback" not in err, (moment, victim.returncode, err[-2000:])
