"""`ptk tokenize` on real corpora: lossless, counts add up, identical for any --workers, crash-safe."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from fixtures.corpora import DATA, need_data
from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.shards import ShardSet
from pretrainkit.shards.tokenizer import load_tokenizer, train_tokenizer

ROOT = Path(__file__).resolve().parents[3]


def _paragraphs(name: str) -> list[str]:
    path = need_data(DATA / "wikitext2" / name)
    return [ln.strip() for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict:
    """wiki.jsonl (WikiText-2 paragraphs + 2 unusable lines), the Clough-Stevenson texts, a tokenizer."""
    root = tmp_path_factory.mktemp("corpus")
    texts = _paragraphs("valid.txt")
    with open(root / "wiki.jsonl", "w", encoding="utf-8") as f:
        for i, t in enumerate(texts):
            f.write(json.dumps({"id": f"w{i}", "text": t}) + "\n")
        f.write("{not json\n")
        f.write('{"id": "no-text"}\n')
    clough = need_data(DATA / "clough_stevenson_plagiarism" / "texts")
    train_tokenizer(texts, 2048).save(str(root / "tok.json"))
    return {
        "root": root,
        "texts": texts,
        "inputs": [str(root / "wiki.jsonl"), str(clough)],
        "tok": str(root / "tok.json"),
    }


def _tokenize(corpus, out: Path, *extra: str) -> int:
    return main(
        ["tokenize", *corpus["inputs"], "--tokenizer", corpus["tok"], "-o", str(out), "--shard-size", "32K", *extra]
    )


def _files(d: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def test_round_trip_and_accounting(tmp_path, corpus, capsys):
    assert _tokenize(corpus, tmp_path / "s") == 0
    assert "2563 records: 2544 tokenized, 19 rejected" in capsys.readouterr().out
    ss = ShardSet.open(tmp_path / "s")
    assert len(ss.manifest["shards"]) > 5 and ss.verify() == []
    tok = load_tokenizer(corpus["tok"]).tokenizer
    for i, text in enumerate(corpus["texts"]):
        assert tok.decode(ss.document(i).tolist()) == text
    assert ss.document_id(0) == "w0" and ss.tokenizer.eos_id == 0
    assert ss.tokenizer == load_tokenizer(corpus["tok"]).info and ss.tokenizer.vocab_fingerprint is not None
    rejected = [json.loads(ln) for ln in (tmp_path / "s" / "rejected.jsonl").read_text().splitlines()]
    # sources are relative to the common directory of the two inputs (here far apart: long names, never ambiguous)
    (wiki,) = [r for r in rejected if r["source"].endswith("/wiki.jsonl") and r["line"] == len(corpus["texts"]) + 2]
    assert wiki["reason"].startswith("missing text field")
    assert sum(r["reason"].startswith("invalid UTF-8") for r in rejected) == 17  # cp1252 files
    records = ss.manifest["provenance"]["records"]
    assert records == {"input": len(corpus["texts"]) + 2 + 100, "tokenized": ss.num_docs, "rejected": len(rejected)}
    assert ss.manifest["provenance"]["inputs"][0]["path"].endswith("/wiki.jsonl")


def test_identical_bytes_for_any_worker_count(tmp_path, corpus):
    for fmt in ("arrow", "webdataset"):
        assert _tokenize(corpus, tmp_path / f"{fmt}1", "--format", fmt, "--workers", "1") == 0
        assert _tokenize(corpus, tmp_path / f"{fmt}3", "--format", fmt, "--workers", "3") == 0
        assert _files(tmp_path / f"{fmt}1") == _files(tmp_path / f"{fmt}3")


def test_webdataset_is_at_most_1_2x_arrow_and_reads_back(tmp_path, corpus):
    assert _tokenize(corpus, tmp_path / "a", "--shard-size", "1M") == 0
    assert _tokenize(corpus, tmp_path / "w", "--shard-size", "1M", "--format", "webdataset") == 0
    arrow, wds = ShardSet.open(tmp_path / "a"), ShardSet.open(tmp_path / "w")
    assert wds.manifest["totals"]["bytes"] <= 1.2 * arrow.manifest["totals"]["bytes"]
    np.testing.assert_array_equal(wds.read_tokens(0, wds.stream_length), arrow.read_tokens(0, arrow.stream_length))


def test_bad_inputs_give_one_line_errors(tmp_path, corpus, capsys):
    cases = [
        (
            ["tokenize", corpus["inputs"][0], "--tokenizer", str(tmp_path / "none.json"), "-o", str(tmp_path / "o")],
            "none.json: tokenizer file not found",
        ),
        (
            ["tokenize", str(tmp_path / "missing.jsonl"), "--tokenizer", corpus["tok"], "-o", str(tmp_path / "o")],
            "missing.jsonl: no such file or directory",
        ),
        (
            ["tokenize", corpus["tok"], "--tokenizer", corpus["tok"], "-o", str(tmp_path / "o")],
            "tok.json: unsupported input format",
        ),
        (
            ["tokenize", corpus["inputs"][0], "--tokenizer", corpus["tok"], "-o", str(corpus["root"])],
            "wiki.jsonl: input lies inside the output directory",
        ),
    ]
    for argv, message in cases:
        assert main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith("ptk: error: ") and message in err and "\n" not in err
    with pytest.raises(SystemExit):
        main(["tokenize", corpus["inputs"][0], "--tokenizer", corpus["tok"], "-o", "x", "--shard-size", "lots"])
    with pytest.raises(UserError):
        load_tokenizer(corpus["inputs"][0])


@pytest.mark.slow
def test_killed_run_then_rerun_is_byte_identical(tmp_path, corpus):
    """kill -9 while shards are being written; the killed directory is refused; a rerun completes identically."""
    big = tmp_path / "big.jsonl"
    lines = (corpus["root"] / "wiki.jsonl").read_text().splitlines()[:-2]
    big.write_text("\n".join(lines * 6) + "\n")
    argv = ["tokenize", str(big), "--tokenizer", corpus["tok"], "--shard-size", "16K", "--batch-size", "1K"]
    assert main([*argv, "-o", str(tmp_path / "ref")]) == 0
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pretrainkit.cli", *argv, "-o", str(out)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while len(list(out.glob("shard-*.arrow"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.005)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "manifest.json").exists(), "run finished before the kill; make the input larger"
    assert len(list(out.glob("shard-*.arrow"))) < len(list((tmp_path / "ref").glob("shard-*.arrow")))
    with pytest.raises(UserError, match="manifest.json: missing"):
        ShardSet.open(out)
    finished = {p: p.stat().st_ino for p in out.glob("shard-*.arrow") if (out / ".work" / f"{p.stem}.json").exists()}
    assert finished
    assert main([*argv, "-o", str(out)]) == 0
    assert _files(out) == _files(tmp_path / "ref")
    assert {p: p.stat().st_ino for p in finished} == finished  # resumed: the finished shards were not rewritten


def test_a_long_document_encoded_in_pieces_gives_the_tokens_of_the_whole(corpus):
    """Documents over `piece_chars` are encoded in pieces (bounded memory, issue 13 item 7), cut only
    where the tokenizer gives the same tokens either way; a tokenizer whose normalizer prepends to
    every piece (so no cut is safe) still gets the whole document's tokens."""
    from tokenizers import Tokenizer, normalizers

    from pretrainkit.dataprep.tokenize.corpus import _Encoder
    from pretrainkit.shards.tokenizer import load_tokenizer

    text = " ".join(corpus["texts"])[:400_000] + " <|endoftext|> ends nothing"
    tok = load_tokenizer(corpus["tok"]).tokenizer
    prepending = Tokenizer.from_str(tok.to_str())
    prepending.normalizer = normalizers.Prepend("_")

    def encode(tokenizer, piece_chars):
        chunks = []
        lengths = _Encoder(tokenizer, np.dtype(np.uint16), piece_chars=piece_chars)(
            ["short one", text, "another"], chunks.append
        )
        return lengths, np.concatenate(chunks)

    for tokenizer in (tok, prepending):
        whole, pieces = encode(tokenizer, 10**9), encode(tokenizer, 5000)
        np.testing.assert_array_equal(pieces[0], whole[0])
        np.testing.assert_array_equal(pieces[1], whole[1])
    assert len(list(_Encoder(tok, np.dtype(np.uint16), piece_chars=5000)._pieces(text))) >= 70
    assert len(list(_Encoder(prepending, np.dtype(np.uint16), piece_chars=5000)._pieces(text))) == 1


def test_urls_go_into_the_shards_only_of_a_corpus_that_has_them(tmp_path, corpus, monkeypatch):
    """Records' `url` fields (`ptk extract` writes them) reach the shards, a url per document (None for one
    without, or whose url is not a string UTF-8 can write), in both formats, across encode jobs of which
    some saw no url; an Arrow record batch decodes alone with its url column, as a streamed set reads it.
    A corpus without urls has no url column and no `urls` in its samples or manifest."""
    from pretrainkit.dataprep.tokenize import corpus as tokenize_module
    from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions, tokenize_corpus
    from pretrainkit.shards.arrow_format import LENGTH, TOKENS, URL, ArrowShardReader, decode_record_batch
    from pretrainkit.shards.batch_ranges import BatchRanges, sidecar_name
    from pretrainkit.shards.webdataset_format import decode_meta

    monkeypatch.setattr(tokenize_module, "ENCODE_JOB_BYTES", 16 << 10)  # many jobs; those of b.jsonl see no url
    texts, inputs, urls = corpus["texts"], tmp_path / "in", {}
    inputs.mkdir()
    with open(inputs / "a.jsonl", "w", encoding="utf-8") as f:
        for i, text in enumerate(texts[:300]):
            record: dict = {"id": f"a{i}", "text": text}
            if i % 3 == 0:
                record["url"] = urls[f"a{i}"] = f"https://example.org/wiki/é/{i}"
            elif i % 3 == 1:  # no url: a null, a number, one with a lone surrogate (escaped) that UTF-8 cannot write
                record["url"] = [None, 7, "https://example.org/\ud800"][i % 9 // 3]
            f.write(json.dumps(record) + "\n")
    with open(inputs / "b.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": f"b{i}", "text": text}) + "\n" for i, text in enumerate(texts[300:600]))
    expected = {f"a{i}": urls.get(f"a{i}") for i in range(300)} | {f"b{i}": None for i in range(300)}
    options = {"shard_tokens": 4096, "batch_tokens": 512}
    for fmt in ("arrow", "webdataset"):
        out = tmp_path / fmt
        tokenize_corpus([str(inputs)], out, corpus["tok"], TokenizeOptions(format=fmt, **options))
        ss = ShardSet.open(out)
        assert ss.manifest["urls"] is True and ss.has_urls and ss.verify() == [] and len(ss.manifest["shards"]) > 4
        assert {ss.document_id(i): ss.document_url(i) for i in range(ss.num_docs)} == expected
        if fmt == "arrow":  # each batch alone, from its sidecar range (a streamed set's reads)
            for entry in ss.manifest["shards"]:
                data = (out / entry["file"]).read_bytes()
                ranges = BatchRanges.decode((out / sidecar_name(entry["file"])).read_bytes(), entry["file"])
                reader = ArrowShardReader(str(out / entry["file"]))
                for i in range(ranges.num_batches):
                    chunk = data[ranges.offsets[i] : ranges.offsets[i] + ranges.sizes[i]]
                    lengths = decode_record_batch(chunk, np.uint16, (LENGTH, TOKENS), urls=True).column(0)
                    assert np.array_equal(lengths.to_numpy(), reader.lengths(i))
                    assert decode_record_batch(chunk, np.uint16, (URL,), urls=True).column(0).to_pylist() == (
                        reader.urls(i)
                    )

    # Without urls: the shards and manifest of before.
    (inputs / "a.jsonl").unlink()
    for fmt in ("arrow", "webdataset"):
        out = tmp_path / f"{fmt}-plain"
        tokenize_corpus([str(inputs)], out, corpus["tok"], TokenizeOptions(format=fmt, **options))
        ss = ShardSet.open(out)
        assert "urls" not in ss.manifest and not ss.has_urls and ss.document_url(0) is None
        for entry in ss.manifest["shards"]:
            if fmt == "arrow":
                schema = pa.ipc.open_file(str(out / entry["file"])).schema
                assert schema.names == ["id", "length", "tokens"]
            else:
                with tarfile.open(out / entry["file"]) as tar:
                    metas = [decode_meta(tar.extractfile(m).read()) for m in tar if m.name.endswith(".json.gz")]
                assert metas and all(set(meta) == {"ids", "lengths"} for meta in metas)
