"""Every command that reads from a bucket, and every one that writes to one, meeting an endpoint that
takes connections and never answers (a stopped server): one line naming the URL and saying the endpoint
did not answer, a non-zero exit, in (1 + retries) x timeout seconds plus backoff, not the 417 s of
s3fs's and botocore's retry loops nested with no word. In-process: the command is `main` as `ptk` runs it."""

from __future__ import annotations

import dataclasses
import re
import time
from pathlib import Path

import pytest
import s3fs
import yaml

from fixtures.fault_commands import COMMANDS, Command, Workspace, error_line, output_of, run_in_process
from fixtures.s3_server import frozen_endpoint
from pretrainkit.remote.limits import RETRIES_ENV, TIMEOUT_ENV
from pretrainkit.remote.staging import WORK_DIR_ENV

TIMEOUT_S, RETRIES = 0.25, 1
# (1 + RETRIES) x TIMEOUT_S and at most 1 s of backoff, plus the command's own start (a training run's: seconds
# on a busy machine): far from the minutes of a wait with no limit (tests/remote/test_transfer.py times it closely).
BOUND_S = 60
BUCKET = "s3://frozen"
# What a command may read from a bucket: these workspace inputs given as URLs, or named by the files it reads.
IN_BUCKET = ("crawl", "corpus", "shards", "run")
# (`ptk init --shards` takes a local folder only.)
READERS = [c for c in COMMANDS if set(c.reads) & {*IN_BUCKET, "mixture", "checkpoints"} and c.name != "init"]
WRITERS = [c for c in COMMANDS if c.folder_kind]  # the commands whose output folder may be in a bucket


@pytest.fixture
def frozen(monkeypatch, tmp_path: Path) -> str:
    """The standard AWS variables pointing at an endpoint that never answers, short limits for requests."""
    with frozen_endpoint() as endpoint:
        for name, value in {
            "AWS_ENDPOINT_URL": endpoint,
            "AWS_ACCESS_KEY_ID": "frozen",
            "AWS_SECRET_ACCESS_KEY": "frozen",
            "AWS_DEFAULT_REGION": "us-east-1",
            TIMEOUT_ENV: str(TIMEOUT_S),
            RETRIES_ENV: str(RETRIES),
            WORK_DIR_ENV: str(tmp_path / "work"),
        }.items():
            monkeypatch.setenv(name, value)
        s3fs.S3FileSystem.clear_instance_cache()
        yield endpoint
    s3fs.S3FileSystem.clear_instance_cache()


def given_up(argv: list[str], capsys) -> str:
    """The one line `ptk argv` ends with, checked to come within BOUND_S with exit status 2."""
    began = time.monotonic()
    code, _, err = run_in_process(argv, capsys)
    took = time.monotonic() - began
    assert code == 2, err[-3000:]
    assert took < BOUND_S, f"{took:.1f} s"
    return error_line(err)


def in_bucket(ws: Workspace, tmp_path: Path) -> Workspace:
    """`ws` with its corpus, crawl, shard set and run in the bucket, and a mixture and a training config
    that name the shard set there."""
    urls = {name: f"{BUCKET}/{name}" for name in IN_BUCKET}
    mixture = yaml.safe_load(ws.mixture.read_text())
    mixture["sources"][0]["shards"] = urls["shards"]
    (tmp_path / "mixture.yaml").write_text(yaml.safe_dump(mixture))
    config = yaml.safe_load(ws.config.read_text())
    config["data"]["mixture"] = str(tmp_path / "mixture.yaml")
    (tmp_path / "train.yaml").write_text(yaml.safe_dump(config))
    return dataclasses.replace(ws, **urls, mixture=tmp_path / "mixture.yaml", config=tmp_path / "train.yaml")


def did_not_answer(url: str) -> str:
    """The line for a request to `url` that got no answer: any object or prefix under `url`."""
    return (
        rf"{re.escape(url)}(/\S*)?: cannot \w+: the endpoint did not answer in {TIMEOUT_S:g} s \(a request is "
        rf"tried {1 + RETRIES} times at most; {TIMEOUT_ENV}, {RETRIES_ENV} set this\)"
    )


@pytest.mark.timeout(120)  # before the limits, each of these waited 417 s
@pytest.mark.parametrize("command", READERS, ids=str)
def test_an_input_in_a_bucket_that_does_not_answer_is_one_line(
    command: Command, workspace, frozen, tmp_path: Path, capsys, one_thread
) -> None:
    out = output_of(command, tmp_path / "out")
    line = given_up(command.argv(in_bucket(workspace, tmp_path), out), capsys)
    assert re.fullmatch(rf"ptk: error: (\S+: )*{did_not_answer(BUCKET)}", line), line  # a mixture's: its file first
    assert not out.exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("command", WRITERS, ids=str)
def test_an_output_in_a_bucket_that_does_not_answer_is_one_line(
    command: Command, workspace, frozen, tmp_path: Path, capsys, one_thread
) -> None:
    out = output_of(command, tmp_path)
    url = f"{BUCKET}/{out.name}"
    argv = [arg.replace(str(out), url) for arg in command.argv(workspace, out)]
    line = given_up(argv, capsys)
    assert re.fullmatch(rf"ptk: error: {did_not_answer(url)}", line), line
