"""A storage URL given for what a command writes locally: one line naming it and the argument, exit 2,
and nothing written (it was the local folder `s3:/b/x`, written with exit 0, or a traceback)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrainkit.cli import main

CASES = {
    "tokenizer train": (["tokenizer", "train", "{corpus}", "-o", "s3://b/tok.json", "--vocab-size", "300"], "output"),
    "report": (["report", "{corpus}", "-o", "gs://b/report.png"], "output"),
    "init": (["init", "s3://b/first", "--shards", "{corpus}"], "run_name"),
    "scaling fit": (["scaling", "fit", "{corpus}", "-o", "az://b/law.json"], "output"),
    "eval": (["eval", "{corpus}", "--text", "{corpus}", "--per-document", "s3://b/losses.jsonl"], "per_document"),
}


@pytest.mark.parametrize("case", CASES)
def test_a_url_for_a_local_output_is_one_line(case: str, tmp_path: Path, monkeypatch, capsys) -> None:
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "a document"}) + "\n")
    monkeypatch.chdir(tmp_path)
    argv, argument = CASES[case]
    url = next(a for a in argv if "://" in a)
    assert main([a.format(corpus=corpus) for a in argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ptk: error: {url}: ptk {case} writes {argument} to a local path, not a URL " + (
        "(what takes URLs: docs/object-storage.md)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.jsonl"]  # no local folder named s3: or gs:
