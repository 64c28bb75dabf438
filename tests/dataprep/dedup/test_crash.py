"""Crash safety: `kill -9` of `ptk dedup` at several moments, then the same command again, gives
byte-identical outputs to an uninterrupted run and leaves no temporary files."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pretrainkit.files import TMP_MARK


def command(inputs: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "pretrainkit.cli", "dedup", str(inputs), "-o", str(out), "--workers", "2"]


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_killed_runs_resume_to_identical_output(tmp_path, reuters_docs):
    from fixtures.corpora import write_jsonl

    inputs = tmp_path / "in"
    for i in range(4):
        docs = reuters_docs[i::4]
        write_jsonl(
            docs + [(f"{doc_id}-again", text) for doc_id, text in docs], inputs / f"part{i}.jsonl"
        )  # doubled: more work, more duplicates
    clean = tmp_path / "clean"
    start = time.monotonic()
    subprocess.run(command(inputs, clean), check=True, capture_output=True)
    duration = time.monotonic() - start
    expected = snapshot(clean)

    for fraction in (0.2, 0.4, 0.6, 0.8, 0.95):
        out = tmp_path / f"killed-{fraction}"
        proc = subprocess.Popen(
            command(inputs, out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        time.sleep(duration * fraction)
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        rerun = subprocess.run(command(inputs, out), capture_output=True, text=True)
        assert rerun.returncode == 0, rerun.stderr
        got = snapshot(out)
        assert got == expected, f"kill at {fraction:.0%} of the run: outputs differ"
        assert not [p for p in out.rglob("*") if TMP_MARK in p.name]
