"""`ptk tokenizer train` and `load_tokenizer`: deterministic BPE, lossless round trip, clear errors."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer, models

from fixtures.corpora import DATA, need_data
from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.shards.tokenizer import load_tokenizer, train_tokenizer

WIKI = DATA / "wikitext2"


@pytest.fixture(scope="module")
def wiki_dir():
    return need_data(WIKI)


def test_training_is_deterministic_and_round_trips_text(tmp_path, wiki_dir, capsys):
    for name in ("a.json", "b.json"):
        assert main(["tokenizer", "train", str(wiki_dir), "-o", str(tmp_path / name), "--vocab-size", "3000"]) == 0
    assert "vocab 3000, EOS '<|endoftext|>' = 0" in capsys.readouterr().out
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    tok = load_tokenizer(tmp_path / "a.json")
    assert (tok.eos_id, tok.eos_token, tok.vocab_size) == (0, "<|endoftext|>", 3000)
    text = (wiki_dir / "test.txt").read_text(encoding="utf-8")  # not seen in training
    ids = tok.tokenizer.encode(text).ids
    assert tok.tokenizer.decode(ids) == text
    assert len(ids) < len(text.encode()) / 2.5  # merges learned: well under one token per byte


def test_any_hugging_face_tokenizer_json_is_accepted(tmp_path):
    """A WordLevel tokenizer with '</s>' as its only special token: EOS found by name."""
    tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "</s>": 2}, unk_token="hello"))
    tok.add_special_tokens(["</s>"])
    tok.save(str(tmp_path / "t.json"))
    assert load_tokenizer(tmp_path / "t.json").eos_id == 2


def test_bad_tokenizer_files_give_one_line_errors(tmp_path):
    with pytest.raises(UserError, match="nope.json: tokenizer file not found"):
        load_tokenizer(tmp_path / "nope.json")
    (tmp_path / "bad.json").write_text('{"version": "1.0", "model": 3}')
    with pytest.raises(UserError, match="bad.json: not a valid Hugging Face tokenizer.json"):
        load_tokenizer(tmp_path / "bad.json")
    Tokenizer(models.WordLevel({"a": 0, "b": 1}, unk_token="a")).save(str(tmp_path / "noeos.json"))
    with pytest.raises(UserError, match="noeos.json: no end-of-text special token.*--eos-token"):
        load_tokenizer(tmp_path / "noeos.json")
    assert load_tokenizer(tmp_path / "noeos.json", eos_token="b").eos_id == 1
    with pytest.raises(UserError, match="'<x>' is not in the vocabulary"):
        load_tokenizer(tmp_path / "noeos.json", eos_token="<x>")


def test_train_command_rejects_a_tiny_vocabulary(tmp_path, wiki_dir, capsys):
    with pytest.raises(SystemExit) as e:  # when the command line is parsed
        main(["tokenizer", "train", str(wiki_dir), "-o", str(tmp_path / "t.json"), "--vocab-size", "100"])
    assert e.value.code == 2
    assert "argument --vocab-size: must be in [257, 4294967296], got '100'" in capsys.readouterr().err
    assert not (tmp_path / "t.json").exists()
    with pytest.raises(UserError, match="--vocab-size must be at least 257"):  # as a library call is told
        train_tokenizer(["some text"], vocab_size=100)


def test_a_vocabulary_smaller_than_asked_for_is_said(tmp_path, wiki_dir, capsys):
    """The corpus runs out of pairs to merge long before 10M: the summary says what was asked and what came."""
    assert main(["tokenizer", "train", str(wiki_dir), "-o", str(tmp_path / "t.json"), "--vocab-size", "10000000"]) == 0
    out = capsys.readouterr().out
    vocab = load_tokenizer(tmp_path / "t.json").vocab_size
    assert vocab < 10_000_000
    assert f"vocab {vocab} of the 10000000 asked for" in out and "no more pairs" in out


@pytest.mark.parametrize("command", ["dedup", "tokenize", "prepare"])
@pytest.mark.parametrize("workers", ["0", "-1"])
def test_workers_must_be_at_least_one(tmp_path, capsys, command, workers):
    argv = [command, str(tmp_path / "a.jsonl"), "-o", str(tmp_path / "o"), "--workers", workers]
    if command != "dedup":
        argv += ["--tokenizer", str(tmp_path / "t.json")]
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2
    assert "--workers: must be a positive number, got" in capsys.readouterr().err


def test_a_hugging_face_directory_is_read_with_its_configured_eos(tmp_path):
    from tokenizers import AddedToken

    tok = Tokenizer(models.WordLevel({"<unk>": 0, "hello": 1, "world": 2}, unk_token="<unk>"))
    tok.add_special_tokens(
        [
            AddedToken("<|end_of_text|>", special=True),
            AddedToken("<|eot_id|>", special=True),
            AddedToken("<|begin_of_text|>", special=True),
        ]
    )
    d = tmp_path / "Llama-like"
    d.mkdir()
    tok.save(str(d / "tokenizer.json"))
    # No config: the first known EOS candidate; the sha256 is the tokenizer.json's either way.
    bare = load_tokenizer(d)
    assert (bare.eos_token, bare.bos_token, bare.sha256) == (
        "<|end_of_text|>",
        None,
        load_tokenizer(d / "tokenizer.json").sha256,
    )
    (d / "generation_config.json").write_text('{"eos_token_id": [4, 3], "bos_token_id": 5}')
    assert (load_tokenizer(d).eos_id, load_tokenizer(d).bos_token) == (4, "<|begin_of_text|>")
    (d / "tokenizer_config.json").write_text('{"eos_token": {"content": "<|end_of_text|>"}}')
    assert load_tokenizer(d).eos_token == "<|end_of_text|>"  # tokenizer_config.json first
    (d / "tokenizer.json").unlink()
    with pytest.raises(UserError, match=r"Llama-like: no tokenizer.json in this directory"):
        load_tokenizer(d)


def test_vocabulary_fingerprint_ignores_file_layout_not_token_ids(tmp_path, tokenizer_variant):
    from pretrainkit.shards.tokenizer import train_tokenizer

    texts = [f"the {w} of the {w}s and the other {w}" for w in ("cat", "dog", "bird", "fish", "horse")] * 5
    train_tokenizer(texts, vocab_size=300, min_frequency=1).save(str(tmp_path / "tokenizer.json"))
    original = load_tokenizer(tmp_path / "tokenizer.json")
    same = load_tokenizer(
        tokenizer_variant(tmp_path / "tokenizer.json", tmp_path / "re" / "tokenizer.json", "reserialized")
    )
    other = load_tokenizer(
        tokenizer_variant(tmp_path / "tokenizer.json", tmp_path / "sw" / "tokenizer.json", "swapped")
    )
    assert same.sha256 != original.sha256 and other.sha256 != original.sha256
    assert same.vocab_fingerprint == original.vocab_fingerprint
    assert other.vocab_fingerprint != original.vocab_fingerprint and other.vocab_size == original.vocab_size
    text = " ".join(texts)
    assert same.tokenizer.encode(text).ids == original.tokenizer.encode(text).ids
    assert other.tokenizer.encode(text).ids != original.tokenizer.encode(text).ids
