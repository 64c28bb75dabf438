"""`RunDir` in-process: a local run folder (its files' paths, its lock, how far a stopped run got) and a
run folder in a bucket (a real S3 server on the loopback): its mirror, pushed to the bucket and pulled on
another machine (an empty work folder) whole, less the lock and the checkpoints being written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from pretrainkit.errors import UserError
from pretrainkit.remote import staging
from pretrainkit.remote.transfer import list_tree, read_bytes
from pretrainkit.stage_layout import LOCK_NAME, MARKER_NAME
from pretrainkit.train.rundir.mirror import RunMirror
from pretrainkit.train.rundir.names import PUSHED_FILE, TMP_PREFIX, checkpoint_name
from pretrainkit.train.rundir.run_dir import RunDir


def write_checkpoint(run: RunDir, step: int, data: bytes) -> str:
    """A sealed checkpoint as `train/checkpoint/checkpoints.py` leaves one: its files, then `meta.json`
    listing each with its size and sha256. Returns its folder relative to the run."""
    folder = run.checkpoints / checkpoint_name(step)
    folder.mkdir(parents=True)
    (folder / "__0_0.distcp").write_bytes(data)
    files = {"__0_0.distcp": [len(data), hashlib.sha256(data).hexdigest()]}
    (folder / "meta.json").write_text(json.dumps({"step": step, "files": files}))
    return folder.relative_to(run.local).as_posix()


def log_steps(run: RunDir, steps: range, tail: str = "") -> None:
    run.metrics.write_text("".join(json.dumps({"step": s, "loss": 1.0}) + "\n" for s in steps) + tail)


def test_a_local_run_dir_names_its_files_holds_its_lock_and_says_how_far_a_run_got(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    assert run.url is None and run.local == tmp_path / "run"
    assert (run.checkpoints, run.metrics, run.events, run.config_file, run.base_file) == tuple(
        tmp_path / "run" / name
        for name in ("checkpoints", "metrics.jsonl", "events.jsonl", "config.yaml", "init_from.json")
    )
    assert run.checkpoint_mirror(owner=True) is None
    run.pull(), run.push()  # nothing to sync for a local folder
    run.check("run.yaml")
    assert run.local.is_dir() and run.last_logged_step() is None
    assert run.interrupted_message() == (
        "ptk train: interrupted before its first step; no step is lost: the same command resumes the run"
    )

    with run.holding("run.yaml", main=True):
        assert (run.local / LOCK_NAME).is_file() and (run.local / MARKER_NAME).is_file()
        write_checkpoint(run, 4, b"weights")
        log_steps(run, range(1, 7), tail='{"step": 7, "lo')  # a row cut short by a kill is not counted
        assert RunDir(tmp_path / "run").last_logged_step() == 6
    assert RunDir(tmp_path / "run").interrupted_message("stopped by SIGTERM") == (
        "ptk train: stopped by SIGTERM at step 6; 2 steps since the last checkpoint (step-0000004) will be "
        "redone when the same command resumes the run"
    )

    (tmp_path / "file").write_text("not a folder")
    with pytest.raises(UserError, match=r"^run.yaml: run_dir: .*file"):
        RunDir(tmp_path / "file").check("run.yaml")


def test_a_run_dir_in_a_bucket_is_trained_in_a_mirror_pushed_and_pulled_whole(s3, tmp_path, monkeypatch) -> None:
    url = f"{s3.bucket}/runs/base"
    monkeypatch.setenv(staging.WORK_DIR_ENV, str(tmp_path / "machine-a"))
    run = RunDir(url)
    assert run.url == url and run.local.is_relative_to(tmp_path / "machine-a")
    assert RunDir(url).local == run.local  # every process of a machine trains in the same mirror
    mirror = run.checkpoint_mirror(owner=True)
    assert isinstance(mirror, RunMirror) and (mirror.local, mirror.url, mirror.owner) == (run.local, url, True)

    run.check("run.yaml")  # the mirror made and checked; the bucket holds nothing yet
    with run.holding("run.yaml", main=True):
        first = write_checkpoint(run, 2, b"step two")
        newest = write_checkpoint(run, 4, b"step four")
        (run.checkpoints / f"{TMP_PREFIX}{checkpoint_name(6)}").mkdir()
        (run.checkpoints / f"{TMP_PREFIX}{checkpoint_name(6)}" / "__0_0.distcp").write_bytes(b"being written")
        log_steps(run, range(1, 6))
        run.push()
        pushed = list_tree(url)
        assert sorted(pushed) == sorted(
            [MARKER_NAME, "metrics.jsonl"]
            + [f"{c}/{n}" for c in (first, newest) for n in ("__0_0.distcp", "meta.json")]
        )
        assert read_bytes(f"{url}/{newest}/__0_0.distcp") == b"step four"
        assert (run.local / PUSHED_FILE).read_text() == url + "\n"

    # Another machine: an empty work folder, into whose mirror the bucket's run is fetched.
    monkeypatch.setenv(staging.WORK_DIR_ENV, str(tmp_path / "machine-b"))
    elsewhere = RunDir(url)
    assert elsewhere.local.is_relative_to(tmp_path / "machine-b")
    elsewhere.check("run.yaml")
    elsewhere.pull()
    assert elsewhere.last_logged_step() == 5
    for ckpt in (first, newest):
        for name in ("__0_0.distcp", "meta.json"):
            assert (elsewhere.local / ckpt / name).read_bytes() == (run.local / ckpt / name).read_bytes()
    assert not any(p.name.startswith(TMP_PREFIX) for p in elsewhere.checkpoints.iterdir())
    assert elsewhere.interrupted_message() == (
        "ptk train: interrupted at step 5; 1 step since the last checkpoint (step-0000004) will be redone when "
        "the same command resumes the run"
    )
