"""`ptk eval` on a real tokenizer, real shards and a trained model: every token scored once, the same
numbers from shards and from the raw text they came from, from a run dir and from its export."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import torch
import yaml

from fixtures.corpora import DATA
from pretrainkit.cli import main
from pretrainkit.shards.tokenizer import load_tokenizer, train_tokenizer
from pretrainkit.train.evaluation.scoring import score_documents, stream_windows
from pretrainkit.train.model.llama import ModelConfig, Transformer


@pytest.mark.parametrize("seq_len", [1, 3, 8, 64])
def test_every_token_after_the_leading_eos_is_a_target_exactly_once(seq_len: int) -> None:
    rng = np.random.default_rng(seq_len)
    docs = [rng.integers(1, 50, size=n) for n in (5, 1, 17, 2, 40, 3)]
    stream = np.concatenate([[0]] + [np.append(d, 0) for d in docs])
    windows = list(stream_windows(docs, eos_id=0, seq_len=seq_len))
    assert all(len(w) == seq_len + 1 for w in windows[:-1]) and 2 <= len(windows[-1]) <= seq_len + 1
    targets = np.concatenate([w[1:] for w in windows])
    assert np.array_equal(targets, stream[1:])
    assert all(a[-1] == b[0] for a, b in zip(windows, windows[1:]))  # each window continues the last


def test_a_window_as_long_as_the_stream_gives_the_plain_loss() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=4, max_seq_len=64)).eval()
    docs = [np.arange(1, 12), np.arange(5, 25)]
    stream = torch.tensor(np.concatenate([[0], docs[0], [0], docs[1], [0]]))
    with torch.no_grad():
        expected = torch.nn.functional.cross_entropy(model(stream[None, :-1])[0], stream[1:]).item()
    lengths = np.array([len(d) for d in docs])
    score = score_documents(model, docs, lengths, 0, seq_len=63, batch_size=4, device=torch.device("cpu"))
    assert score.tokens == 33 and score.loss == pytest.approx(expected, rel=1e-6)
    short = score_documents(model, docs, lengths, 0, seq_len=5, batch_size=3, device=torch.device("cpu"))
    assert short.tokens == 33 and short.loss != pytest.approx(expected, rel=1e-6)  # less context, another loss


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> dict:
    """A BPE tokenizer, shards of Shakespeare and WikiText-2 written by `ptk tokenize`, a 10-step run."""
    shakespeare, wiki = DATA / "tinyshakespeare" / "input.txt", DATA / "wikitext2" / "valid.txt"
    root = tmp_path_factory.mktemp("eval")
    plays = [s for s in shakespeare.read_text(encoding="utf-8")[:120_000].split("\n\n") if s.strip()]
    articles = [a for a in re.split(r"\n(?= = [^=].* = \n)", wiki.read_text(encoding="utf-8")) if a.strip()][:12]
    train_tokenizer(plays + articles, vocab_size=600).save(str(root / "tok.json"))
    for name, docs in (("plays", plays), ("wiki", articles)):
        with open(root / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": d}) + "\n" for d in docs)
        assert (
            main(
                [
                    "tokenize",
                    str(root / f"{name}.jsonl"),
                    "--tokenizer",
                    str(root / "tok.json"),
                    "-o",
                    str(root / "shards" / name),
                ]
            )
            == 0
        )
    (root / "mix.yaml").write_text(
        yaml.safe_dump(
            {
                "seed": 3,
                "holdout": {"fraction": 0.05, "min_tokens": 1000},
                "sources": [
                    {"name": "plays", "shards": "shards/plays", "weight": 0.7},
                    {"name": "wiki", "shards": "shards/wiki", "weight": 0.3},
                ],
            }
        )
    )
    (root / "run.yaml").write_text(
        yaml.safe_dump(
            {
                "run_dir": "run",
                "data": {"mixture": "mix.yaml", "seq_len": 64},
                "max_steps": 10,
                "model": {"d_model": 32, "n_layers": 2, "n_heads": 4},
                "batch": {"global_size": 8, "micro_size": 8},
                "optim": {"lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2},
            }
        )
    )
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    assert main(["train", str(root / "run.yaml")]) == 0
    yield {"root": root, "plays": plays, "articles": articles}
    torch.set_num_threads(before)


def _eval_json(capsys, *args: str) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_mixture_held_out_scores_are_deterministic_and_consistent(trained, capsys) -> None:
    from pretrainkit.mixtures import load_mixture

    root = trained["root"]
    args = (str(root / "run"), "--mixture", str(root / "mix.yaml"), "--tokenizer", str(root / "tok.json"))
    first, second = _eval_json(capsys, *args), _eval_json(capsys, *args)
    assert first == second
    assert first["seq_len"] == 64 and set(first["sources"]) == {"plays", "wiki", "all"}
    mix, tok = load_mixture(root / "mix.yaml"), load_tokenizer(root / "tok.json")
    for source in mix.sources:
        row = first["sources"][source.name]
        heldout = np.flatnonzero(source.split.heldout.mask(0, source.shard_set.num_docs))
        docs = [source.shard_set.document(int(i)) for i in heldout]
        assert row["documents"] == len(docs) == source.split.heldout.num_docs
        assert row["tokens"] == sum(len(d) + 1 for d in docs) == source.heldout_tokens
        # Every window scored, none left out: windows of 65 tokens sharing one, in batches of --batch-size 8.
        assert row["windows"] == math.ceil(row["tokens"] / 64) and row["batches"] == math.ceil(row["windows"] / 8)
        assert row["bytes"] == sum(len(tok.tokenizer.decode(d.tolist()).encode()) for d in docs)
        assert row["perplexity"] == pytest.approx(math.exp(row["loss"]), rel=1e-5)
        assert row["bits_per_byte"] == pytest.approx(row["loss"] * row["tokens"] / math.log(2) / row["bytes"], rel=1e-5)
        assert 1.5 < row["loss"] < math.log(600)  # ten steps learned something
    total = first["sources"]["all"]
    for key in ("tokens", "windows", "batches"):
        assert total[key] == sum(first["sources"][s.name][key] for s in mix.sources)
    assert first["batch_size"] == 8


def test_text_and_its_shards_and_the_export_give_the_same_numbers(trained, capsys, tmp_path) -> None:
    root = trained["root"]
    tok = ("--tokenizer", str(root / "tok.json"))
    from_shards = _eval_json(capsys, str(root / "run"), "--shards", str(root / "shards" / "wiki"), *tok)
    from_text = _eval_json(capsys, str(root / "run"), "--text", str(root / "wiki.jsonl"), *tok)
    assert from_shards["sources"]["wiki"] == from_text["sources"]["wiki.jsonl"]
    assert from_shards["sources"]["wiki"]["bytes"] == sum(len(a.encode()) for a in trained["articles"])
    assert main(["export", str(root / "run"), "-o", str(tmp_path / "model.safetensors")]) == 0
    capsys.readouterr()
    exported = _eval_json(capsys, str(tmp_path / "model.safetensors"), "--shards", str(root / "shards" / "wiki"), *tok)
    assert exported["sources"] == from_shards["sources"]
    # A Hugging Face export (what lm-eval reads) scores the same, with its own tokenizer.json.
    assert main(["export", str(root / "run"), "--format", "hf", "-o", str(tmp_path / "hf"), *tok]) == 0
    capsys.readouterr()
    hf = _eval_json(capsys, str(tmp_path / "hf"), "--shards", str(root / "shards" / "wiki"))
    for key in ("documents", "tokens", "bytes"):
        assert hf["sources"]["wiki"][key] == from_shards["sources"]["wiki"][key]
    for key in ("loss", "bits_per_byte"):
        assert hf["sources"]["wiki"][key] == pytest.approx(from_shards["sources"]["wiki"][key], rel=1e-5)
    no_tokenizer = _eval_json(capsys, str(root / "run"), "--shards", str(root / "shards" / "wiki"), "--seq-len", "32")
    row = no_tokenizer["sources"]["wiki"]
    assert row["bits_per_byte"] is None and row["tokens"] == from_shards["sources"]["wiki"]["tokens"]


def test_the_table_and_one_line_errors(trained, capsys, tmp_path) -> None:
    root = trained["root"]
    run = str(root / "run")
    assert main(["eval", run, "--mixture", str(root / "mix.yaml"), "--tokenizer", str(root / "tok.json")]) == 0
    out = capsys.readouterr().out.splitlines()
    total = _eval_json(capsys, run, "--mixture", str(root / "mix.yaml"))["sources"]["all"]
    assert out[1] == (
        f"eval loss over all {total['batches']:,} batches of up to 8 windows "
        f"({total['windows']:,} windows, {total['tokens']:,} tokens)"
    )
    assert out[2].split() == ["source", "documents", "tokens", "loss", "perplexity", "bits/byte"]
    assert [line.split()[0] for line in out[3:]] == ["plays", "wiki", "all"]
    assert main(["eval", run, "--text", str(root / "wiki.jsonl")]) == 2
    assert "--text needs the model's tokenizer" in capsys.readouterr().err
    assert main(["eval", run, "--shards", str(root / "shards" / "wiki"), "--seq-len", "65"]) == 2
    assert "--seq-len must lie in [1, 64]" in capsys.readouterr().err
    other = tmp_path / "other.json"
    train_tokenizer(trained["plays"][:50], vocab_size=300).save(str(other))
    assert main(["eval", run, "--shards", str(root / "shards" / "wiki"), "--tokenizer", str(other)]) == 2
    assert "not the tokenizer" in capsys.readouterr().err


def test_a_shard_with_one_flipped_bit_is_one_line_naming_the_file(trained, capsys, tmp_path) -> None:
    import shutil

    from pretrainkit.shards.formats import SHARD_NAME_RE

    root = trained["root"]
    shards = tmp_path / "wiki"
    shutil.copytree(root / "shards" / "wiki", shards)
    shard = sorted(p for p in shards.iterdir() if SHARD_NAME_RE.match(p.name))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0x10
    shard.write_bytes(bytes(data))
    assert main(["eval", str(root / "run"), "--shards", str(shards), "--seq-len", "32"]) == 2
    out, err = capsys.readouterr()
    problem = f"{shard}: altered: sha256 differs from the manifest"
    assert err == f"ptk: error: --shards {shards}: shard set fails verification: {problem}\n"
    assert out == ""
