"""`ptk eval --per-document`: every document's mean loss, ranked. Planted documents in a corpus of speeches
(gibberish, a German text, a template repeated 30 times) come to the top under a model trained briefly on
the corpus: the gibberish first, the template copies above nine speeches in ten, the German text above
three in four. The
rows add up to the eval's figures, name each document as `ptk trace` does, and are the same from the
shards and from the text they came from."""

from __future__ import annotations

import json
import math
import random
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

from fixtures.corpora import DATA
from pretrainkit.cli import main
from pretrainkit.shards.tokenizer import train_tokenizer
from pretrainkit.train.evaluation.per_document import DocumentLosses, histogram

GERMAN = (
    "Es war einmal ein kleines Dorf am Rande eines großen Waldes. Die Leute dort standen früh auf, gingen auf "
    "die Felder und kehrten erst am Abend zurück, wenn die Sonne hinter den Bergen verschwunden war. Im Winter "
    "lag der Schnee so hoch, dass die Kinder nicht zur Schule gehen konnten, und die Alten erzählten am Ofen "
    "Geschichten von Wölfen, Räubern und verzauberten Brunnen, in denen man sein eigenes Schicksal sehen konnte."
)
TEMPLATE = "Subscribe to our newsletter and get 10% off your first order! Unsubscribe at any time."
COPIES = 30


@pytest.fixture(scope="module")
def planted(tmp_path_factory, session_kit, one_thread_module) -> dict:
    """plays.jsonl: speeches with the planted documents among them, its shards, a 40-step run on them."""
    root = tmp_path_factory.mktemp("planted")
    speeches = [s for s in (DATA / "tinyshakespeare" / "input.txt").read_text()[:60_000].split("\n\n") if s.strip()]
    rng = random.Random(0)
    gibberish = "".join(rng.choice("qxzjkvbwy0123456789#$%&*+=<>{}[]^~") for _ in range(300))
    docs = speeches[:100] + [gibberish] + speeches[100:200] + [GERMAN] + speeches[200:] + [TEMPLATE] * COPIES
    rng.shuffle(docs)
    lines = {what: docs.index(what) + 1 for what in (gibberish, GERMAN)}  # the line each was read from
    with open(root / "plays.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": d}, ensure_ascii=False) + "\n" for d in docs)
    train_tokenizer(docs, vocab_size=400).save(str(root / "tok.json"))
    tokenize = [
        "tokenize",
        str(root / "plays.jsonl"),
        "--tokenizer",
        str(root / "tok.json"),
        "-o",
        str(root / "shards"),
    ]
    assert main(tokenize) == 0
    (root / "mix.yaml").write_text(
        yaml.safe_dump({"seed": 1, "sources": [{"name": "plays", "shards": "shards", "weight": 1}]})
    )
    config = session_kit.config(
        root,
        data={"mixture": str(root / "mix.yaml"), "seq_len": 64},
        max_steps=40,
        batch={"global_size": 8, "micro_size": 8},
        checkpoint={"every": 0},
        eval={"every": 0},
    )
    assert main(["train", str(config)]) == 0
    return {"root": root, "docs": docs, "lines": lines, "gibberish": gibberish}


@pytest.fixture(scope="module")
def one_thread_module():
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_planted_documents_rank_where_they_should(planted, capsys) -> None:
    root, docs = planted["root"], planted["docs"]
    out = root / "ranked.jsonl"
    run, shards = str(root / "run"), str(root / "shards")
    tok = str(root / "tok.json")
    assert main(["eval", run, "--shards", shards, "--tokenizer", tok, "--per-document", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    rows = read_rows(out)
    assert len(rows) == len(docs) == report["per_document"]["documents"]
    assert [r["loss"] for r in rows] == sorted((r["loss"] for r in rows), reverse=True)
    assert list(rows[0]) == ["id", "source", "shard", "index", "input", "line", "tokens", "loss"]
    # The gibberish first, found as `ptk trace` finds a document: its input file and line.
    top = rows[0]
    line = planted["lines"][planted["gibberish"]]
    assert (top["id"], top["input"], top["line"]) == (f"plays.jsonl:{line}", "plays.jsonl", line)
    assert top["source"] == "shards" and top["shard"].endswith(".arrow")
    speeches = [r["loss"] for r in rows if docs[r["line"] - 1] not in (GERMAN, TEMPLATE, planted["gibberish"])]
    # Every copy of the template above nine speeches in ten (the model is too small and too briefly trained to
    # learn it by heart, which would put the copies last instead), the German text above three in four.
    high = statistics.quantiles(speeches, n=10)[-1]
    assert [r["loss"] > high for r in rows if docs[r["line"] - 1] == TEMPLATE] == [True] * COPIES
    (german,) = [r for r in rows if docs[r["line"] - 1] == GERMAN]
    assert german["loss"] > statistics.quantiles(speeches, n=4)[-1]
    # The rows are the eval's own figures, document by document.
    source = report["sources"]["shards"]
    assert sum(r["tokens"] for r in rows) == source["tokens"]
    assert math.fsum(r["loss"] * r["tokens"] for r in rows) / source["tokens"] == pytest.approx(
        source["loss"], rel=1e-5
    )
    bins = report["per_document"]["histogram"]
    assert sum(b["documents"] for b in bins) == len(rows) and bins[0]["lo"] == pytest.approx(rows[-1]["loss"], rel=1e-3)
    assert not [p.name for p in root.iterdir() if p.name.startswith(".")]  # written atomically: no temporary left


def test_text_input_gives_the_same_ranking_and_the_table_shows_the_histogram(planted, capsys) -> None:
    root = planted["root"]
    text_out, shard_out = root / "text.jsonl", root / "ranked-table.jsonl"
    tok, run = str(root / "tok.json"), str(root / "run")
    text_args = ["--text", str(root / "plays.jsonl"), "--per-document", str(text_out)]
    assert main(["eval", run, "--tokenizer", tok, *text_args]) == 0
    table = capsys.readouterr().out
    shard_args = ["--shards", str(root / "shards"), "--per-document", str(shard_out)]
    assert main(["eval", run, "--tokenizer", tok, *shard_args]) == 0
    capsys.readouterr()
    text, shards = read_rows(text_out), read_rows(shard_out)
    assert [(r["id"], r["input"], r["line"], r["tokens"], r["loss"]) for r in text] == [
        (r["id"], r["input"], r["line"], r["tokens"], r["loss"]) for r in shards
    ]
    assert all(r["shard"] is None and r["index"] == r["line"] - 1 for r in text)
    assert "documents by mean loss (nats/token)" in table
    assert f"wrote {len(text):,} documents by mean loss, highest first, to {text_out}" in table


def test_document_losses_split_the_stream_at_each_documents_eos() -> None:
    losses = DocumentLosses(np.array([2, 0, 3]))  # targets: 3, 1 and 4
    for chunk in ([1.0, 2.0], [4.0, 8.0, 16.0], [32.0, 64.0, 128.0]):
        losses.add(np.array(chunk))
    assert losses.nats.tolist() == [7.0, 8.0, 240.0] and losses.seen == 8
    assert histogram([{"loss": 1.0}, {"loss": 1.0}]) == [{"lo": 0.5, "hi": 1.5, "documents": 2}]


def test_an_unwritable_output_is_one_line_before_any_scoring(planted, capsys, tmp_path) -> None:
    (tmp_path / "dir.jsonl").mkdir()
    root = planted["root"]
    code = main(
        ["eval", str(root / "run"), "--shards", str(root / "shards"), "--per-document", str(tmp_path / "dir.jsonl")]
    )
    assert code == 2 and "dir.jsonl: is a directory (the output here is a file)" in capsys.readouterr().err
