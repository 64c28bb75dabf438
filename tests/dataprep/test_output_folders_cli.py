"""`ptk dedup`, `tokenize` and `prepare` write only into an empty folder or their own kind of output,
and one run at a time: another command's output, a folder of the user's files and a folder another
run is writing are refused in one line, touching nothing; a rerun into its own output still works."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures.corpora import write_jsonl
from pretrainkit.cli import main
from pretrainkit.shards.tokenizer import train_tokenizer
from pretrainkit.stage_layout import LOCK_NAME, MARKER_NAME

ROOT = Path(__file__).resolve().parents[2]
# `ptk dedup ARGS` that stops, holding its output folder, before its first stage until stdin gets a line.
PAUSED_DEDUP = """
import sys
from pretrainkit.dataprep.dedup import pipeline
real_scan = pipeline.scan
def scan(*args, **kwargs):
    print("holding", flush=True)
    sys.stdin.readline()
    return real_scan(*args, **kwargs)
pipeline.scan = scan
from pretrainkit.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, reuters_docs) -> dict[str, str]:
    root = tmp_path_factory.mktemp("owners")
    path = write_jsonl(reuters_docs[:300], root / "in" / "reuters.jsonl")
    with open(path, "a", encoding="utf-8") as f:
        f.write("{not json\n")  # one rejected record: rejected.jsonl is not empty
    train_tokenizer([text for _, text in reuters_docs[:300]], 600).save(str(root / "tok.json"))
    return {"input": str(path), "tok": str(root / "tok.json")}


def files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def dedup(corpus, out: Path, *extra: str) -> int:
    return main(["dedup", corpus["input"], "-o", str(out), "--workers", "1", *extra])


def tokenize(corpus, out: Path) -> int:
    return main(["tokenize", corpus["input"], "--tokenizer", corpus["tok"], "-o", str(out), "--workers", "1"])


def one_error(capsys) -> str:
    err = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("ptk: note:")]
    assert len(err) == 1 and err[0].startswith("ptk: error: "), err
    return err[0].removeprefix("ptk: error: ")


def test_tokenize_into_a_dedup_output_is_refused_leaving_it_as_it_was(tmp_path, corpus, capsys):
    out = tmp_path / "d"
    assert dedup(corpus, out) == 0
    assert json.loads((out / "stats.json").read_text())["rejected"] == 1
    before = files(out)
    capsys.readouterr()
    assert tokenize(corpus, out) == 2
    assert one_error(capsys) == (
        f"{out}: holds a ptk dedup output; ptk tokenize writes only into an empty folder or a ptk tokenize output"
    )
    assert files(out) == before  # rejected.jsonl among them: the stats still describe the folder


def test_dedup_into_a_shard_set_or_a_prepare_output_is_refused(tmp_path, corpus, capsys):
    shards, prepared = tmp_path / "s", tmp_path / "p"
    assert tokenize(corpus, shards) == 0
    prepare = ["prepare", corpus["input"], "--tokenizer", corpus["tok"], "-o", str(prepared), "--workers", "1"]
    assert main(prepare) == 0
    for folder, kind in ((shards, "ptk tokenize"), (prepared, "ptk prepare")):
        before = files(folder)
        capsys.readouterr()
        assert dedup(corpus, folder) == 2
        assert one_error(capsys).startswith(f"{folder}: holds a {kind} output; ptk dedup writes only into")
        assert files(folder) == before
    assert main(["shards", "verify", str(shards)]) == 0  # the marker is no stray file to a reader
    assert main(["shards", "verify", str(prepared / "shards")]) == 0


def test_a_folder_of_the_users_files_is_refused(tmp_path, corpus, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    for command in (dedup, tokenize):
        assert command(corpus, mine) == 2
        assert one_error(capsys) == (
            f"{mine}: holds files of no ptk output (notes.txt); ptk {command.__name__} writes only into "
            f"an empty folder or a ptk {command.__name__} output"
        )
    assert files(mine) == {"notes.txt": b"keep me"}


def test_prepare_refuses_a_stage_folder_of_another_kind_before_its_dedup(tmp_path, corpus, capsys):
    prepared = tmp_path / "p"
    (prepared / "shards").mkdir(parents=True)
    (prepared / "shards" / "stats.json").write_text("{}")  # a dedup output where the shards go
    prepare = ["prepare", corpus["input"], "--tokenizer", corpus["tok"], "-o", str(prepared), "--workers", "1"]
    assert main(prepare) == 2
    assert one_error(capsys).startswith(f"{prepared / 'shards'}: holds a ptk dedup output; ptk tokenize")
    assert not (prepared / "dedup").exists()


def test_a_rerun_into_its_own_output_gives_the_same_bytes(tmp_path, corpus):
    for command in (dedup, tokenize):
        out = tmp_path / command.__name__
        assert command(corpus, out) == 0
        first = files(out)
        assert MARKER_NAME in first and LOCK_NAME not in first
        assert command(corpus, out) == 0
        assert files(out) == first


def test_dedup_reads_a_marked_dedup_output_as_its_kept_records(tmp_path, corpus, capsys):
    out, again = tmp_path / "d", tmp_path / "again"
    assert dedup(corpus, out) == 0
    assert (out / MARKER_NAME).is_file()
    capsys.readouterr()
    assert dedup({"input": str(out)}, again) == 0
    assert MARKER_NAME not in capsys.readouterr().err  # neither read nor named as ignored
    stats = json.loads((again / "stats.json").read_text())
    assert stats["input_docs"] == json.loads((out / "stats.json").read_text())["kept_docs"]


def test_a_second_dedup_into_a_folder_in_use_is_refused_and_the_first_finishes(tmp_path, corpus, capsys):
    reference, out = tmp_path / "reference", tmp_path / "out"
    assert dedup(corpus, reference) == 0
    first = subprocess.Popen(
        [sys.executable, "-c", PAUSED_DEDUP, "dedup", corpus["input"], "-o", str(out), "--workers", "1"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert first.stdout.readline() == "holding\n"
        during = files(out)
        capsys.readouterr()
        assert dedup(corpus, out) == 2
        assert one_error(capsys) == f"{out} is in use by pid {first.pid} (host {socket.gethostname()})"
        assert files(out) == during  # its work directory untouched
        stdout, stderr = first.communicate("\n", timeout=600)
    finally:
        first.kill()
    assert first.returncode == 0, stderr
    assert files(out) == files(reference)
