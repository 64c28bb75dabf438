"""Faults on the output side of dedup, tokenize, prepare and tokenizer train: a full disk, a read-only
directory, `-o` naming a file. Each is one line naming the path, no temporaries, and (disk full) a
rerun with space resumes to the same bytes. Full and read-only file systems are real: a small
tmpfs mounted in a private mount namespace (`unshare -rm`, no root needed)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from fixtures.namespaces import in_namespace
from pretrainkit.cli import main
from pretrainkit.files import TMP_MARK
from pretrainkit.shards.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parents[2]


def snapshot(out: Path) -> dict[str, bytes]:
    """The files under `out` but those a user left there (USER_FILES)."""
    files = (p for p in sorted(out.rglob("*")) if p.is_file())
    return {name: p.read_bytes() for p in files if (name := p.relative_to(out).as_posix()) not in USER_FILES}


def ptk(*args: str) -> str:
    return " ".join([sys.executable, "-m", "pretrainkit.cli", *args])


# Look like temporaries, are not ours; planted beside the output (a folder holding them is no output to write into).
USER_FILES = ("notes/draft.tmp-v2.txt", "notes/x.tmp-123", "draft.tmp-v2.txt")


def plant_user_files(where: Path) -> str:
    """Shell lines that write USER_FILES under `where` (another run's temporary among them)."""
    return "".join(f"mkdir -p {(where / f).parent}; echo 'keep me' > {where / f}\n" for f in USER_FILES)


def list_user_files(where: Path, when: str) -> str:
    """Shell lines that print `<when> <file>: keep me` for each of USER_FILES still under `where`."""
    return "".join(f"cat {where / f} | sed 's|^|{when} {f}: |'\n" for f in USER_FILES)


def assert_user_files_kept(stdout: str, when: str) -> None:
    for f in USER_FILES:
        assert f"{when} {f}: keep me" in stdout, (when, f, stdout)


def find_temporaries(where: Path) -> str:
    """Shell line printing `left: PATH` for each temporary under `where` but the user's."""
    return f"find {where} -name '*{TMP_MARK}*' ! -path '*/notes/*' ! -name draft.tmp-v2.txt | sed 's/^/left: /'"


@pytest.fixture()
def corpus(tmp_path, reuters_docs) -> Path:
    from fixtures.corpora import write_jsonl

    for i in range(3):
        write_jsonl(reuters_docs[i:1800:3], tmp_path / "in" / f"part{i}.jsonl")
    return tmp_path / "in"


def test_a_full_disk_in_dedup_is_one_line_leaves_no_temporaries_and_a_rerun_resumes(tmp_path, corpus):
    reference = tmp_path / "reference"
    assert main(["dedup", str(corpus), "-o", str(reference), "--workers", "2"]) == 0
    need_kb = sum(len(b) for b in snapshot(reference).values()) // 1024
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = in_namespace(
        f"""
mount -t tmpfs -o size={need_kb // 3}k tmpfs {mnt}
{plant_user_files(mnt)}
{ptk("dedup", str(corpus), "-o", str(mnt / "out"), "--workers", "2")} 2> {tmp_path}/full.err
echo "full rc $?"
{find_temporaries(mnt)}
{list_user_files(mnt, "failed")}
ls {mnt}/out/.work | head -3 | sed 's/^/work: /'
mount -o remount,size={need_kb * 4}k {mnt}
{ptk("dedup", str(corpus), "-o", str(mnt / "out"), "--workers", "2")} > /dev/null 2> {tmp_path}/rerun.err
echo "rerun rc $?"
{list_user_files(mnt, "rerun")}
cp -r {mnt}/out {tmp_path}/resumed
""",
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    err = (tmp_path / "full.err").read_text().strip().splitlines()
    assert "full rc 2" in r.stdout, (r.stdout, err)
    assert len([line for line in err if not line.startswith("ptk: note:")]) == 1, err
    assert err[-1].startswith("ptk: error: ") and "no space left on device" in err[-1] and str(mnt / "out") in err[-1]
    assert "left: " not in r.stdout  # no temporaries
    assert "work: " in r.stdout  # the finished jobs are kept for the rerun
    assert "rerun rc 0" in r.stdout, (tmp_path / "rerun.err").read_text()
    assert_user_files_kept(r.stdout, "failed")
    assert_user_files_kept(r.stdout, "rerun")
    assert snapshot(tmp_path / "resumed") == snapshot(reference)


def test_a_full_disk_in_tokenize_is_one_line_and_leaves_no_temporaries(tmp_path, corpus):
    tok = tmp_path / "tok.json"
    train_tokenizer(
        [json.loads(line)["text"] for line in (corpus / "part0.jsonl").read_text().splitlines()], 1000
    ).save(str(tok))
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    tokenize_cmd = ptk(
        "tokenize", str(corpus), "--tokenizer", str(tok), "-o", str(mnt / "s"), "--shard-size", "16K", "--workers", "2"
    )
    r = in_namespace(
        f"""
mount -t tmpfs -o size=64k tmpfs {mnt}
{plant_user_files(mnt)}
{tokenize_cmd} 2> {tmp_path}/err
echo "rc $?"
{find_temporaries(mnt)}
{list_user_files(mnt, "failed")}
""",
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    err = [line for line in (tmp_path / "err").read_text().strip().splitlines() if not line.startswith("ptk: note:")]
    assert "rc 2" in r.stdout and len(err) == 1, err
    assert "no space left on device" in err[0] and str(mnt / "s") in err[0]
    assert "left: " not in r.stdout
    assert_user_files_kept(r.stdout, "failed")


def test_a_read_only_output_directory_is_one_line(tmp_path, corpus):
    tok = tmp_path / "tok.json"
    train_tokenizer(["some text for a tokenizer"] * 5, 300).save(str(tok))
    ro = tmp_path / "ro"
    ro.mkdir()
    commands = {
        "dedup": ptk("dedup", str(corpus), "-o", str(ro / "out")),
        "dedup-here": ptk("dedup", str(corpus), "-o", str(ro)),
        "tokenize": ptk("tokenize", str(corpus), "--tokenizer", str(tok), "-o", str(ro / "s")),
        "prepare": ptk("prepare", str(corpus), "--tokenizer", str(tok), "-o", str(ro / "p")),
        "tokenizer": ptk("tokenizer", "train", str(corpus), "-o", str(ro / "t.json"), "--vocab-size", "300"),
    }
    script = f"mount -t tmpfs -o ro tmpfs {ro}\n" + "".join(
        f'{cmd} 2> {tmp_path}/{name}.err; echo "{name} $?"\n' for name, cmd in commands.items()
    )
    r = in_namespace(script, tmp_path)
    assert r.returncode == 0, r.stderr
    for name in commands:
        assert f"{name} 2" in r.stdout, (name, r.stdout)
        err = (tmp_path / f"{name}.err").read_text().strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ptk: error: ") and "read-only file system" in err[0], (name, err)
        assert str(ro) in err[0]


def test_output_naming_an_existing_file_or_directory_is_one_line(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one two three four five six"}\n')
    tok = tmp_path / "tok.json"
    train_tokenizer(["some text for a tokenizer"] * 5, 300).save(str(tok))
    a_file = tmp_path / "taken.txt"
    a_file.write_text("not a directory")
    cases = [
        ["dedup", str(src), "-o", str(a_file)],
        ["tokenize", str(src), "--tokenizer", str(tok), "-o", str(a_file)],
        ["prepare", str(src), "--tokenizer", str(tok), "-o", str(a_file)],
        ["dedup", str(src), "-o", str(a_file / "below")],
        ["tokenizer", "train", str(src), "-o", str(tmp_path), "--vocab-size", "300"],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("ptk: error: "), (argv, err)
        assert ("not a directory" in err[0] and str(a_file) in err[0]) or (
            "is a directory" in err[0] and str(tmp_path) in err[0]
        ), err
    assert a_file.read_text() == "not a directory"


def test_a_full_disk_in_tokenizer_train_removes_no_file_of_the_users(tmp_path, corpus):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    r = in_namespace(
        f"""
mount -t tmpfs -o size=24k tmpfs {mnt}
{plant_user_files(mnt)}
{ptk("tokenizer", "train", str(corpus), "-o", str(mnt / "tok.json"), "--vocab-size", "2000")} 2> {tmp_path}/err
echo "rc $?"
{list_user_files(mnt, "failed")}
find {mnt} -name 'tok.json*' | sed 's/^/left: /'
""",
        tmp_path,
    )
    assert r.returncode == 0, r.stderr
    err = (tmp_path / "err").read_text().strip().splitlines()
    assert "rc 2" in r.stdout and len(err) == 1, (r.stdout, err)
    assert err[0].startswith("ptk: error: ") and "no space left on device" in err[0] and str(mnt) in err[0]
    assert_user_files_kept(r.stdout, "failed")
    assert "left: " not in r.stdout  # neither the tokenizer nor its temporary


def test_an_unwritable_special_directory_for_the_tokenizer_is_one_line(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one two three four five six"}\n')
    assert main(["tokenizer", "train", str(src), "-o", "/proc/tok.json", "--vocab-size", "300"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ptk: error: /proc/tok.json"), err
