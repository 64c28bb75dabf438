"""Issue 13's data-side cases as a user meets them through `ptk`: a dedup output fed to tokenize,
runs where every record was rejected, special-token text inside documents."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from pretrainkit.cli import main
from pretrainkit.shards import ShardSet
from pretrainkit.shards.tokenizer import load_tokenizer, train_tokenizer


def write_corpus(path: Path, texts: list[str]) -> Path:
    path.write_text("".join(json.dumps({"id": f"d{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


WORDS = (
    "river stone market winter paper lamp garden letter engine cloud harbor violin meadow ticket "
    "candle mirror forest bridge orbit pepper saddle tunnel velvet anchor basket copper dragon "
    "falcon glacier hammer island jacket kettle ladder magnet needle oyster pillow quartz"
).split()
TEXTS = [" ".join(random.Random(i).choices(WORDS, k=60)) for i in range(40)]
TEXTS += [TEXTS[0], TEXTS[1] + " again"]  # an exact and a near duplicate


@pytest.fixture()
def tok(tmp_path) -> str:
    path = tmp_path / "tok.json"
    train_tokenizer(TEXTS, 400).save(str(path))
    return str(path)


def test_tokenize_and_tokenizer_train_read_only_the_kept_records_of_a_dedup_output(tmp_path, tok, capsys):
    src = write_corpus(tmp_path / "a.jsonl", TEXTS)
    assert main(["dedup", str(src), "-o", str(tmp_path / "clean"), "--workers", "1"]) == 0
    stats = json.loads((tmp_path / "clean" / "stats.json").read_text())
    assert stats["exact_duplicates"] + stats["near_duplicates"] == 2
    capsys.readouterr()
    assert (
        main(["tokenize", str(tmp_path / "clean"), "--tokenizer", tok, "-o", str(tmp_path / "s"), "--workers", "1"])
        == 0
    )
    out, err = capsys.readouterr()
    assert f"{stats['kept_docs']} records: {stats['kept_docs']} tokenized, 0 rejected" in out
    assert "duplicates.jsonl" in err and "rejected.jsonl" in err  # named as ignored
    manifest = ShardSet.open(tmp_path / "s").manifest
    assert [i["path"] for i in manifest["provenance"]["inputs"]] == ["part-00000.jsonl.zst"]
    assert (
        main(["tokenizer", "train", str(tmp_path / "clean"), "-o", str(tmp_path / "t2.json"), "--vocab-size", "300"])
        == 0
    )
    assert f"trained on {stats['kept_docs']} documents (0 rejected" in capsys.readouterr().out


def last_error(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert err and err[-1].startswith("ptk: error: ")
    return err[-1]


def test_a_run_where_every_record_was_rejected_fails_naming_the_reasons(tmp_path, tok, capsys):
    src = write_corpus(tmp_path / "a.jsonl", TEXTS)
    assert main(["dedup", str(src), "-o", str(tmp_path / "clean"), "--text-field", "body", "--workers", "1"]) == 2
    err = last_error(capsys)
    assert f"all {len(TEXTS)} records were rejected" in err
    assert f"missing text field 'body' (fields: id, text): {len(TEXTS)}" in err and "rejected.jsonl" in err
    assert json.loads((tmp_path / "clean" / "stats.json").read_text())["rejected"] == len(
        TEXTS
    )  # the accounting is kept

    assert main(["tokenize", str(src), "--tokenizer", tok, "-o", str(tmp_path / "s"), "--text-field", "body"]) == 2
    assert f"all {len(TEXTS)} records were rejected" in last_error(capsys)
    assert not (tmp_path / "s" / "manifest.json").exists()  # no 0-token shard set

    argv = [
        "tokenizer",
        "train",
        str(src),
        "-o",
        str(tmp_path / "t.json"),
        "--vocab-size",
        "300",
        "--text-field",
        "body",
    ]
    assert main(argv) == 2
    assert "missing text field 'body' (fields: id, text)" in last_error(capsys)
    assert not (tmp_path / "t.json").exists()

    (tmp_path / "empty.jsonl").write_text("")
    assert main(["dedup", str(tmp_path / "empty.jsonl"), "-o", str(tmp_path / "e"), "--workers", "1"]) == 2
    assert "no records" in last_error(capsys)


def test_a_literal_special_token_in_a_document_is_text_not_a_boundary(tmp_path, tok):
    eos = load_tokenizer(tok)
    texts = ["before <|endoftext|> after, in one document", "second document"]
    src = write_corpus(tmp_path / "a.jsonl", texts)
    assert main(["tokenize", str(src), "--tokenizer", tok, "-o", str(tmp_path / "s"), "--workers", "1"]) == 0
    ss = ShardSet.open(tmp_path / "s")
    assert ss.num_docs == 2
    first = ss.document(0).tolist()
    assert eos.eos_id not in first
    assert eos.tokenizer.decode(first) == texts[0]
    stream = ss.read_tokens(0, ss.stream_length).tolist()
    assert stream.count(eos.eos_id) == 2  # only the pipeline's document ends
    assert main(["tokenize", str(src), "--tokenizer", tok, "-o", str(tmp_path / "s2"), "--workers", "2"]) == 0
    assert ShardSet.open(tmp_path / "s2").document(0).tolist() == first


def test_generated_ids_are_the_shard_ids_after_prepare(tmp_path, tok):
    """A record without an id is `<file>:<line>` in dedup's output and in the shards (issue 13 item 1)."""
    for sub in ("x", "y"):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "data.jsonl").write_text(
            json.dumps({"text": f"{sub}: {TEXTS[0 if sub == 'x' else 5]}"})
            + "\n"
            + json.dumps({"id": None, "text": TEXTS[9 if sub == "x" else 12]})
            + "\n"
        )
    argv = [
        "prepare",
        str(tmp_path / "x" / "data.jsonl"),
        str(tmp_path / "y" / "data.jsonl"),
        "--tokenizer",
        tok,
        "-o",
        str(tmp_path / "p"),
        "--workers",
        "1",
    ]
    assert main(argv) == 0
    ss = ShardSet.open(tmp_path / "p" / "shards")
    assert [ss.document_id(i) for i in range(ss.num_docs)] == [
        "x/data.jsonl:1",
        "x/data.jsonl:2",
        "y/data.jsonl:1",
        "y/data.jsonl:2",
    ]
