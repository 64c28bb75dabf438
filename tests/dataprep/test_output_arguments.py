"""`-o` naming what cannot be an output: an existing file for a command that writes a folder, a folder
for one that writes a file, a folder where nothing may be written. One line naming the path, exit 2.

A full disk and a read-only folder, for every command that writes, are the fault suite's
(tests/faults/test_disk.py)."""

from __future__ import annotations

import argparse

import pytest

from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.remote.staging import UrlArguments, local_arguments
from pretrainkit.shards.tokenizer import train_tokenizer


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


def test_an_unwritable_special_directory_for_the_tokenizer_is_one_line(tmp_path, capsys):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one two three four five six"}\n')
    assert main(["tokenizer", "train", str(src), "-o", "/proc/tok.json", "--vocab-size", "300"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("ptk: error: /proc/tok.json"), err


def test_an_output_inside_an_input_folder_is_refused_before_anything_is_written(tmp_path, capsys):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.jsonl").write_text('{"id": "a", "text": "one two three four five six seven eight"}\n')
    (tmp_path / "evals.jsonl").write_text('{"id": "q", "text": "one two three four five six seven eight"}\n')
    (folder / "page.html").write_text("<html><body><p>one two three</p></body></html>\n")
    tok = tmp_path / "tok.json"
    train_tokenizer(["some text for a tokenizer"] * 5, 300).save(str(tok))
    out = folder / "sub" / "out"
    for command, options in (
        (["extract"], []),
        (["filter"], []),
        (["dedup", "--paragraphs"], []),
        (["dedup"], []),
        (["decontaminate"], ["--eval", str(tmp_path / "evals.jsonl")]),
        (["tokenize"], ["--tokenizer", str(tok)]),
        (["prepare"], ["--tokenizer", str(tok)]),
    ):
        argv = [*command, str(folder), "-o", str(out), *options]
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert err == [f"ptk: error: {out}: output lies inside the input folder {folder}; choose another -o"], argv
        assert not (folder / "sub").exists(), argv


def test_an_output_url_under_an_input_url_is_refused_before_anything_is_fetched():
    spec = UrlArguments(inputs=("inputs",), output="output")
    args = argparse.Namespace(inputs=["s3://bucket/raw/"], output="s3://bucket/raw/out", work_dir=None)
    with pytest.raises(UserError, match=r"^s3://bucket/raw/out: output lies inside the input folder s3://bucket/raw/"):
        with local_arguments(args, spec):
            pass
