"""`ptk trace` and `batch_sha256`: each step's logged hash is the hash of the tokens the trainer consumed, and
`ptk trace` gives the same hash, those tokens, and the documents they come from (down to the input line of
a record tokenize read), on 1 process, on 2, after a resume on another world size, and on both sides of a
resume with a changed mixture and seq_len."""

from __future__ import annotations

import io
import json
from pathlib import Path

import numpy as np
import pytest
import torch
import zstandard

from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.mixtures.sampler import rows_sha256
from pretrainkit.shards import ShardSet
from pretrainkit.train.config import load_config
from pretrainkit.train.loop.run import run_training
from pretrainkit.train.reports.trace import trace_step


def train_recording(config: Path) -> dict[int, np.ndarray]:
    """Train in this process; the rows (seq_len + 1 tokens each) every global batch gave the trainer, by batch."""
    consumed: dict[int, np.ndarray] = {}

    def record(batch: int, micro: list) -> list:
        consumed[batch] = torch.cat([torch.cat([x, y[:, -1:]], dim=1) for x, y in micro]).numpy()
        return micro

    run_training(load_config(config), str(config), transform=record)
    return consumed


def logged_hashes(run: Path) -> dict[int, str]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["batch_sha256"] for r in rows if "loss" in r}


@pytest.fixture(scope="module")
def tokenized(hf_corpus, tmp_path_factory) -> tuple[Path, list[dict], Path]:
    """A mixture over `ptk tokenize`'s shards of a JSONL corpus (every third record with an id of its own,
    the others named `plays.jsonl:LINE` by tokenize), small record batches and shards; the records; the
    tokenizer's folder."""
    from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions, tokenize_corpus

    tokenizer, speeches = hf_corpus
    root = tmp_path_factory.mktemp("traced")
    records = [{"id": f"speech-{i}", "text": t} if i % 3 == 0 else {"text": t} for i, t in enumerate(speeches[:400])]
    (root / "corpus").mkdir()
    (root / "corpus" / "plays.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    options = TokenizeOptions(shard_tokens=8192, batch_tokens=1024)
    tokenize_corpus([str(root / "corpus")], root / "shards", str(tokenizer), options)
    mix = root / "mix.yaml"
    mix.write_text("seed: 5\nsources:\n  - {name: plays, shards: shards, weight: 1}\n")
    return mix, records, tokenizer


def test_trace_gives_the_consumed_tokens_their_hash_and_their_documents(kit, tokenized, tmp_path, capsys) -> None:
    from tokenizers import Tokenizer

    mix, records, tokenizer = tokenized
    encoder = Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    config = kit.config(
        tmp_path, data={"mixture": str(mix)}, max_steps=6, checkpoint={"every": 3, "keep": 1}, eval={"every": 0}
    )
    consumed = train_recording(config)
    run = tmp_path / "run"
    logged = logged_hashes(run)
    assert sorted(logged) == list(range(1, 7)) and sorted(consumed) == list(range(6))
    shards = ShardSet.open(mix.parent / "shards")
    eos = shards.tokenizer.eos_id
    seen_lines, seen_ids = 0, 0
    for step in range(1, 7):
        trace = trace_step(str(run), step, tokens=True)
        rows = np.array(trace["tokens"])
        assert trace["batch"] == step - 1 and (rows == consumed[step - 1]).all()
        assert trace["batch_sha256"] == logged[step] == rows_sha256(consumed[step - 1])
        assert len(trace["windows"]) == 8
        for window, tokens in zip(trace["windows"], rows):
            pieces = []
            for s in window["segments"]:
                doc = np.append(shards.document(s["index"]), eos)  # the document's tokens, then its EOS
                pieces.append(doc[s["start"] : s["end"]])
                assert 0 <= s["start"] < s["end"] <= len(doc) and s["shard"].startswith("shard-")
                if s["input"] is None:  # a record with an id of its own
                    assert s["line"] is None and s["id"].startswith("speech-")
                    seen_ids += 1
                else:  # tokenize's name for it: the input and line it was read from
                    assert s["id"] == f"plays.jsonl:{s['line']}" and s["input"] == "plays.jsonl"
                    record = records[s["line"] - 1]
                    encoded = encoder.encode(record["text"], add_special_tokens=False).ids
                    assert "id" not in record and shards.document(s["index"]).tolist() == encoded
                    seen_lines += 1
            assert (np.concatenate(pieces) == tokens).all()  # the pieces make up the window exactly
            inner = window["segments"][1:-1]  # whole documents between the window's first and last piece
            assert all(s["start"] == 0 and s["end"] == len(shards.document(s["index"])) + 1 for s in inner)
    assert seen_lines and seen_ids

    # The command: JSON equal to the function's, the table, one-line errors.
    assert main(["trace", str(run), "--step", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == trace_step(str(run), 4)
    assert main(["trace", str(run), "--step", "4"]) == 0
    table = capsys.readouterr().out.splitlines()
    first = trace_step(str(run), 4)["windows"][0]["segments"][0]
    assert table[0] == f"step 4: global batch 3, 8 windows, batch_sha256 {logged[4]}"
    assert table[1] == "window 0" and table[2].split() == ["source", "shard", "index", "id", "from", "tokens"]
    origin = f"{first['input']}:{first['line']}" if first["input"] else "-"
    assert table[3].split() == [
        "plays",
        first["shard"],
        str(first["index"]),
        first["id"],
        origin,
        f"{first['start']}-{first['end']}",
    ]
    assert main(["trace", str(run), "--step", "4", "--tokens"]) == 0
    tokens = trace_step(str(run), 4, tokens=True)["tokens"]
    shown = [line for line in capsys.readouterr().out.splitlines() if line.startswith("  tokens: ")]
    assert shown == ["  tokens: " + " ".join(map(str, row)) for row in tokens]
    for argv, message in (
        (["trace", str(run), "--step", "7"], f"--step 7: {run} trains steps 1 to 6 (max_steps)"),
        (["trace", str(tmp_path), "--step", "1"], f"{tmp_path}: no config.yaml: not a training run's folder"),
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err
    events = run / "events.jsonl"
    for text, problem in (("not json\n{}\n", "not a JSON row"), ('{"action": "rollback"}\n{}\n', "a rollback without")):
        events.write_text(text)
        assert main(["trace", str(run), "--step", "1"]) == 2
        assert f"{events}: line 1: {problem}" in capsys.readouterr().err
    events.write_text('{"step": 2, "action": "skip"}\n{"step": 3, "act')  # a running run's half-written row
    assert trace_step(str(run), 2)["batch"] == 1
    with pytest.raises(SystemExit):
        main(["trace", str(run), "--step", "0"])
    assert "--step: must be" in capsys.readouterr().err


def test_two_processes_then_one_log_the_hashes_trace_gives(kit, tmp_path) -> None:
    config = kit.config(tmp_path, max_steps=4, checkpoint={"every": 2, "keep": 1}, eval={"every": 0})
    done = kit.ptk(config, nproc=2)
    assert done.returncode == 0, done.stderr[-3000:]
    config = kit.config(tmp_path, max_steps=6, checkpoint={"every": 2, "keep": 1}, eval={"every": 0})
    consumed = train_recording(config)  # resumed at step 4 on one process
    run = tmp_path / "run"
    logged = logged_hashes(run)
    assert sorted(logged) == list(range(1, 7)) and sorted(consumed) == [4, 5]
    for step in range(1, 7):
        trace = trace_step(str(run), step, tokens=step > 4)
        assert trace["batch_sha256"] == logged[step]
        if step > 4:
            assert (np.array(trace["tokens"]) == consumed[step - 1]).all()


def test_a_resume_with_a_changed_mixture_and_seq_len_is_traced_on_both_sides_of_the_change(kit, tmp_path) -> None:
    shards = kit.mixture.parent
    first, second = tmp_path / "mix-a.yaml", tmp_path / "mix-b.yaml"  # the same shard sets, new weights
    first.write_text(kit.mixture.read_text().replace("shards: ", f"shards: {shards}/"))
    second.write_text(first.read_text().replace("weight: 0.7", "weight: 0.2").replace("weight: 0.3", "weight: 0.8"))
    steps = {"checkpoint": {"every": 3, "keep": 1}, "eval": {"every": 0}}
    consumed = train_recording(kit.config(tmp_path, data={"mixture": str(first)}, max_steps=3, **steps))
    changed = {"mixture": str(second), "seq_len": 16, "allow_mixture_change": True}
    consumed |= train_recording(kit.config(tmp_path, data=changed, max_steps=6, **steps))
    run = tmp_path / "run"
    logged = logged_hashes(run)
    assert sorted(logged) == list(range(1, 7)) and sorted(consumed) == list(range(6))
    assert [len(consumed[b][0]) for b in range(6)] == [33] * 3 + [17] * 3
    for step in range(1, 7):
        trace = trace_step(str(run), step, tokens=True)
        assert trace["batch"] == step - 1 and trace["batch_sha256"] == logged[step]
        assert (np.array(trace["tokens"]) == consumed[step - 1]).all()

    # Resumed again, with no change: the change stays logged once, where it happened.
    consumed |= train_recording(kit.config(tmp_path, data=changed, max_steps=8, **steps))
    changes = [json.loads(line) for line in (run / "mixture_changes.jsonl").read_text().splitlines()]
    assert [(c["step"], c["batch"], c["config"]["data"]["mixture"]) for c in changes] == [(3, 3, str(first))]
    logged = logged_hashes(run)
    assert [trace_step(str(run), step)["batch_sha256"] for step in range(1, 9)] == [logged[s] for s in range(1, 9)]

    # The mixture of the steps before the change edited in place: named, not traced as another order.
    first.write_text(second.read_text())
    with pytest.raises(UserError, match=f"mixture_changes.jsonl: the steps up to 3 trained on {first} with fingerpr"):
        trace_step(str(run), 2)
    assert trace_step(str(run), 5)["batch_sha256"] == logged[5]
    (run / "mixture_changes.jsonl").write_text('{"step": 3, "batch": 3}\n')
    with pytest.raises(UserError, match="mixture_changes.jsonl: line 1: a change without step, batch, config and"):
        trace_step(str(run), 5)


def test_documents_keep_their_input_line_through_prepare_and_own_ids_have_none(hf_corpus, tmp_path) -> None:
    """`ptk prepare` (dedup, then tokenize): a record read without an id is traced to its raw input file (in a
    subfolder) and line, though dedup dropped records before it; a record with an id of its own has none."""
    from pretrainkit.shards.tokenizer import load_tokenizer
    from pretrainkit.train.reports.trace import document_fields, provenance_inputs

    tokenizer, speeches = hf_corpus
    (tmp_path / "corpus" / "sub").mkdir(parents=True)
    plain = speeches[:60] + speeches[:5]  # the last five repeat the first: dedup drops them
    (tmp_path / "corpus" / "sub" / "a.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in plain))
    own = {f"own-{i}": t for i, t in enumerate(speeches[100:140])}
    (tmp_path / "corpus" / "b.jsonl").write_text(
        "".join(json.dumps({"id": k, "text": t}) + "\n" for k, t in own.items())
    )
    (tmp_path / "pipeline.yaml").write_text(f"stages:\n  - dedup\n  - tokenize: {{tokenizer: {tokenizer}}}\n")
    out = tmp_path / "out"
    assert (
        main(["prepare", str(tmp_path / "corpus"), "-o", str(out), "--pipeline", str(tmp_path / "pipeline.yaml")]) == 0
    )
    shards = ShardSet.open(out / "shards")
    encode = load_tokenizer(tokenizer).tokenizer.encode
    inputs, traced = provenance_inputs(shards), set()
    for doc in range(shards.num_docs):
        fields = document_fields(shards, inputs, doc)
        tokens = shards.document(doc).tolist()
        if fields["input"] is None:
            assert fields["line"] is None and encode(own[fields["id"]], add_special_tokens=False).ids == tokens
        else:
            assert fields["input"] == "sub/a.jsonl" and fields["id"] == f"sub/a.jsonl:{fields['line']}"
            assert encode(plain[fields["line"] - 1], add_special_tokens=False).ids == tokens
            traced.add(fields["line"])
    assert traced == set(range(1, 61)) and shards.num_docs == 60 + len(own)


def test_a_crawled_page_is_traced_to_its_url(kit, hf_corpus, tmp_path, capsys) -> None:
    """Rust book pages in a WARC, through `ptk extract` and a filter (which keeps its records' fields) to
    tokenize, beside a JSONL corpus and an HTML file without urls: each segment of a page has the page's
    url, each of another document no `url` key; every segment's tokens are its document's."""
    from tokenizers import Tokenizer

    from fixtures.warc import write_crawl

    tokenizer, speeches = hf_corpus
    crawl = write_crawl(tmp_path / "crawl")  # 12 pages in two WARCs, and c.html (no url)
    assert main(["extract", str(crawl), "-o", str(tmp_path / "extract"), "--workers", "1"]) == 0
    filters = tmp_path / "filters.yaml"  # the language step alone: it keeps every page, adding `lang`
    filters.write_text("filters:\n  - language: {languages: null, min_score: null}\n")
    filtered = ["filter", str(tmp_path / "extract"), "-o", str(tmp_path / "filter"), "--filters", str(filters)]
    assert main([*filtered, "--workers", "1"]) == 0
    (tmp_path / "plays").mkdir()
    plays = [{"text": t} for t in speeches[:200]]
    (tmp_path / "plays" / "plays.jsonl").write_text("".join(json.dumps(r) + "\n" for r in plays))
    inputs = [str(tmp_path / "filter"), str(tmp_path / "plays"), "-o", str(tmp_path / "shards")]
    assert main(["tokenize", *inputs, "--tokenizer", str(tokenizer), "--workers", "1"]) == 0
    capsys.readouterr()
    pages = {}  # id -> the extracted record (id, url, date, text), of the pages the filter kept
    for part in sorted((tmp_path / "filter").glob("part-*.jsonl.zst")):
        for line in io.TextIOWrapper(zstandard.ZstdDecompressor().stream_reader(part.read_bytes()), "utf-8"):
            record = json.loads(line)
            pages[record["id"]] = record
    with_url = {i: r["url"] for i, r in pages.items() if r["url"] is not None}  # c.html's is null
    assert len(with_url) == 12 and pages["c.html"]["url"] is None and all("lang" in r for r in pages.values())

    mix = tmp_path / "mix.yaml"
    mix.write_text("seed: 5\nsources:\n  - {name: web, shards: shards, weight: 1}\n")
    config = kit.config(tmp_path, data={"mixture": str(mix)}, max_steps=4, checkpoint={"every": 4, "keep": 1})
    run_training(load_config(config), str(config))
    shards, encoder = ShardSet.open(tmp_path / "shards"), Tokenizer.from_file(str(tokenizer / "tokenizer.json"))
    seen: dict[bool, int] = {True: 0, False: 0}
    for step in range(1, 5):
        assert main(["trace", str(tmp_path / "run"), "--step", str(step), "--json"]) == 0
        trace = json.loads(capsys.readouterr().out)
        for s in (s for window in trace["windows"] for s in window["segments"]):
            fields = ["source", "shard", "index", "id", "input", "line", "url", "start", "end"]
            assert list(s) == [f for f in fields if f != "url" or s["id"] in with_url]  # "url" only for a page
            assert s.get("url") == with_url.get(s["id"])
            seen["url" in s] += 1
            if s["id"] in pages:  # the tokens of the page's (filtered) text
                text = pages[s["id"]]["text"]
                assert shards.document(s["index"]).tolist() == encoder.encode(text, add_special_tokens=False).ids
    assert seen[True] and seen[False]
