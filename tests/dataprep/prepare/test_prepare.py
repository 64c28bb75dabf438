"""`ptk prepare`: dedup + tokenize in one pipeline, accounted for and identical for any --workers."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
import zstandard

from fixtures.corpora import DATA, need_data
from pretrainkit.cli import main
from pretrainkit.shards import ShardSet
from pretrainkit.shards.tokenizer import train_tokenizer

CLOUGH = DATA / "clough_stevenson_plagiarism" / "texts"


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> str:
    need_data(CLOUGH)
    path = tmp_path_factory.mktemp("tok") / "tok.json"
    texts = [p.read_bytes().decode("utf-8", errors="replace") for p in sorted(CLOUGH.iterdir())]
    train_tokenizer(texts, 1000).save(str(path))
    return str(path)


def _prepare(out: Path, tokenizer: str, workers: int) -> int:
    return main(
        [
            "prepare",
            str(CLOUGH),
            "--tokenizer",
            tokenizer,
            "-o",
            str(out),
            "--threshold",
            "0.5",
            "--shard-size",
            "8K",
            "--batch-size",
            "2K",
            "--workers",
            str(workers),
        ]
    )


@pytest.mark.slow
def test_prepare_keeps_what_dedup_kept_and_is_worker_independent(tmp_path, tokenizer, capsys):
    assert _prepare(tmp_path / "a", tokenizer, 1) == 0
    assert "tokenized" in capsys.readouterr().out
    ss = ShardSet.open(tmp_path / "a" / "shards")
    assert ss.verify() == []
    dedup = ss.manifest["provenance"]["dedup"]
    assert dedup["input_docs"] == 100
    assert (
        dedup["input_docs"]
        == dedup["kept_docs"] + dedup["exact_duplicates"] + dedup["near_duplicates"] + dedup["rejected"]
    )
    assert dedup["near_duplicates"] > 0  # the copy-paste answers
    assert ss.num_docs == dedup["kept_docs"] == ss.manifest["provenance"]["records"]["tokenized"]
    assert len(ss.manifest["provenance"]["inputs"]) == 100  # the raw inputs, not the dedup parts
    kept_ids = []
    for part in sorted((tmp_path / "a" / "dedup").glob("part-*.jsonl.zst")):
        text = io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(part.read_bytes()), encoding="utf-8").read()
        kept_ids += [json.loads(line)["id"] for line in text.splitlines()]
    assert [ss.document_id(i) for i in range(ss.num_docs)] == kept_ids

    assert _prepare(tmp_path / "b", tokenizer, 2) == 0
    for name in ["manifest.json", "rejected.jsonl"] + [s["file"] for s in ss.manifest["shards"]]:
        assert (tmp_path / "a" / "shards" / name).read_bytes() == (tmp_path / "b" / "shards" / name).read_bytes()


def test_prepare_checks_the_tokenizer_before_deduplicating(tmp_path, capsys):
    need_data(CLOUGH)
    assert main(["prepare", str(CLOUGH), "--tokenizer", str(tmp_path / "none.json"), "-o", str(tmp_path / "o")]) == 2
    assert "none.json: tokenizer file not found" in capsys.readouterr().err
    assert not (tmp_path / "o" / "dedup").exists()
