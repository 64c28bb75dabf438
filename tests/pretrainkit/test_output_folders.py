"""`pretrainkit.output_folders`: which command owns a folder (marker, or an older output's files) and
the flock a run holds on it, against real processes (a live holder, one killed with SIGKILL)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from pretrainkit.errors import UserError
from pretrainkit.output_folders import (
    DEDUP,
    EXPORT,
    LOCK_NAME,
    MARKER_NAME,
    PREPARE,
    TOKENIZE,
    TRAIN,
    InUse,
    check_folder,
    output_folder,
    owner,
    probe_lock,
    publish,
)

ROOT = Path(__file__).resolve().parents[2]
HOLDER = """
import sys
from pretrainkit.output_folders import DEDUP, output_folder
with output_folder(sys.argv[1], DEDUP):
    print("held", flush=True)
    sys.stdin.read()
"""


def hold(folder: Path) -> subprocess.Popen:
    """A process that holds `folder` as a dedup output until its stdin closes."""
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout.readline() == "held\n"
    return proc


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def enter(folder: Path) -> None:
    with output_folder(folder, DEDUP):
        pass


def test_a_run_marks_its_folder_and_another_command_is_refused(tmp_path):
    out = tmp_path / "out"
    with output_folder(out, DEDUP):
        (out / "stats.json").write_text("{}")
        assert (out / LOCK_NAME).is_file()
    assert json.loads((out / MARKER_NAME).read_text()) == {"format": 1, "output_of": "ptk dedup"}
    assert not (out / LOCK_NAME).exists()  # removed on a clean exit
    assert owner(out) == "ptk dedup"
    with output_folder(out, DEDUP):  # its own kind: a rerun
        pass
    before = files(out)
    with pytest.raises(UserError) as e:
        with output_folder(out, TOKENIZE):
            pytest.fail("entered")
    assert str(e.value) == (
        f"{out}: holds a ptk dedup output; ptk tokenize writes only into an empty folder or a ptk tokenize output"
    )
    assert files(out) == before


def test_the_marker_is_the_same_bytes_whoever_writes_it(tmp_path):
    for name in ("a", "b"):
        with output_folder(tmp_path / name, TOKENIZE):
            (tmp_path / name / "manifest.json").write_text("{}")
    assert (tmp_path / "a" / MARKER_NAME).read_bytes() == (tmp_path / "b" / MARKER_NAME).read_bytes()


def test_a_run_that_writes_nothing_leaves_the_folder_as_it_was(tmp_path):
    new, empty = tmp_path / "new", tmp_path / "empty"
    empty.mkdir()
    for folder in (new, empty):
        with pytest.raises(RuntimeError):
            with output_folder(folder, DEDUP):
                raise RuntimeError("failed before its first file")
    assert not new.exists()
    assert empty.is_dir() and not list(empty.iterdir())


def test_a_folder_of_user_files_is_refused_untouched_except_by_a_run_dir(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    for kind in (DEDUP, TOKENIZE, PREPARE, EXPORT):
        with pytest.raises(UserError, match=r"holds files of no ptk output \(notes.txt\); " + kind.name):
            with output_folder(mine, kind):
                pytest.fail("entered")
    assert sorted(p.name for p in mine.iterdir()) == ["notes.txt"]  # no lock or marker left there
    with output_folder(mine, TRAIN):  # `ptk init` puts the configs in the run directory
        (mine / "metrics.jsonl").write_text("")
    assert owner(mine) == "ptk train"
    with pytest.raises(UserError, match="holds a ptk train output; ptk dedup writes only into an empty folder"):
        check_folder(mine, DEDUP)


@pytest.mark.parametrize(
    "layout, kind",
    [
        ({"stats.json": "", "index/meta.json": "", "part-00000.jsonl.zst": ""}, DEDUP),
        ({".work/plan.sha256": "", ".work/parts/x": ""}, DEDUP),  # an interrupted dedup
        ({"manifest.json": "", "shard-00000.arrow": ""}, TOKENIZE),
        ({".work/plan.sha256": "", ".work/encoded-00000.json": ""}, TOKENIZE),  # an interrupted tokenize
        ({"dedup/stats.json": "", "shards/manifest.json": ""}, PREPARE),
        ({"model.safetensors": "", "pretrainkit_model.json": ""}, EXPORT),
        ({"config.json": "", "tokenizer_config.json": "", "model.safetensors": ""}, EXPORT),
        ({"run.yaml": "", "metrics.jsonl": "", "checkpoints/step-00000004/meta.json": ""}, TRAIN),
    ],
)
def test_an_output_of_an_earlier_version_is_known_by_its_files(tmp_path, layout, kind):
    out = tmp_path / "old"
    for name, text in layout.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    assert owner(out) == kind.name
    with output_folder(out, kind):  # a rerun or resume into it
        pass
    assert json.loads((out / MARKER_NAME).read_text())["output_of"] == kind.name
    other = DEDUP if kind is not DEDUP else TOKENIZE
    with pytest.raises(UserError, match=f"holds a {kind.name} output"):
        check_folder(out, other)


def test_a_folder_in_use_is_refused_with_the_holders_pid_and_host(tmp_path):
    out = tmp_path / "out"
    proc = hold(out)
    try:
        before = files(out)
        for attempt in (enter, probe_lock):
            with pytest.raises(InUse) as e:
                attempt(out)
            assert str(e.value) == f"{out} is in use by pid {proc.pid} (host {socket.gethostname()})"
        assert files(out) == before
    finally:
        proc.communicate("")
    assert proc.returncode == 0
    enter(out)  # free once the holder has ended


def test_a_holder_killed_with_sigkill_leaves_no_stale_lock(tmp_path):
    out = tmp_path / "out"
    proc = hold(out)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (out / LOCK_NAME).is_file()  # the file stays; its lock went with the process
    with output_folder(out, DEDUP):
        assert json.loads((out / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (out / LOCK_NAME).exists()


def test_a_hold_is_reentrant_and_forked_children_do_not_keep_it(tmp_path):
    out = tmp_path / "out"
    with output_folder(out, DEDUP):
        with output_folder(out, DEDUP):  # an inner stage of the same run
            probe_lock(out)
        with pytest.raises(UserError, match="holds a ptk dedup output; ptk tokenize"):
            check_folder(out, TOKENIZE)
        child = os.fork()
        if child == 0:  # a worker forked while the folder is held, outliving the run
            time.sleep(30)
            os._exit(0)
        (out / "stats.json").write_text("{}")
    try:
        proc = hold(out)  # the run has ended: the folder is free, though its worker lives on
        proc.communicate("")
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)


def test_publishing_a_built_folder_keeps_the_marker_and_the_lock(tmp_path):
    out, built = tmp_path / "hf", tmp_path / ".tmp-hf"
    with output_folder(out, EXPORT):
        (out / "old.safetensors").write_text("old")
        built.mkdir()
        (built / "model.safetensors").write_text("new")
        publish(built, out)
        assert sorted(p.name for p in out.iterdir()) == [LOCK_NAME, MARKER_NAME, "model.safetensors"]
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from pretrainkit.output_folders import probe_lock; probe_lock(sys.argv[1])",
                str(out),
            ],
            capture_output=True,
            text=True,
            cwd=ROOT,
        )
        assert f"{out} is in use by pid {os.getpid()}" in probe.stderr
    assert sorted(p.name for p in out.iterdir()) == [MARKER_NAME, "model.safetensors"]
