"""Tokenizers: train a byte-level BPE on a corpus, and load any Hugging Face `tokenizer.json`.

    tok = train_tokenizer(texts, vocab_size=8192)          # tokenizers.Tokenizer, EOS id 0
    tok.save("tokenizer.json")
    loaded = load_tokenizer("tokenizer.json")               # finds the EOS token, hashes the file
    loaded = load_tokenizer("Llama-3.2-1B/")                # an HF model or tokenizer directory
    loaded.eos_id, loaded.vocab_size, loaded.sha256, loaded.vocab_fingerprint

A directory is read as Hugging Face lays it out: its `tokenizer.json`, with the EOS token named by
`tokenizer_config.json` (`eos_token`) or else `generation_config.json` (`eos_token_id`, the first if
several) when present; otherwise, and for a bare file, the first special token among EOS_CANDIDATES.
`sha256` is always that of the `tokenizer.json` bytes, so a directory and its file are one tokenizer.
`vocab_fingerprint` hashes what the token ids mean (vocabulary, BPE merges, added tokens) and not
how the file is laid out: a re-serialized `tokenizer.json` keeps it, one changed token does not.

It lives beside the shards because it defines what their tokens mean (`TokenizerInfo` in the
manifest): dataprep trains and uses it to write shards, train loads it to read them and to export.

Training is deterministic: the same texts in the same order give the same `tokenizer.json`
bytes. The end-of-text token is a special token with id 0; it is what separates documents in
the token stream of a shard set. A loaded tokenizer encodes the text of special tokens found in a
document (a literal `<|endoftext|>`) as plain text, so EOS appears only where the pipeline puts it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file
from pretrainkit.shards.manifest import TokenizerInfo

TOKENIZER_FILE = "tokenizer.json"
DEFAULT_EOS = "<|endoftext|>"
EOS_CANDIDATES = (DEFAULT_EOS, "</s>", "<eos>", "<|end_of_text|>")
MIN_VOCAB = 257  # the 256 byte symbols and the EOS token


def train_tokenizer(
    texts: Iterable[str], vocab_size: int, eos_token: str = DEFAULT_EOS, min_frequency: int = 2
) -> Tokenizer:
    if vocab_size < MIN_VOCAB:
        raise UserError(
            f"--vocab-size must be at least {MIN_VOCAB} (256 bytes + the end-of-text token), got {vocab_size}"
        )
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        show_progress=False,
        special_tokens=[eos_token],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


@dataclass(frozen=True)
class LoadedTokenizer:
    tokenizer: Tokenizer
    path: str
    sha256: str
    vocab_size: int  # one past the largest id, added tokens included
    eos_id: int
    eos_token: str
    bos_token: str | None = None  # what an HF directory's configs name as BOS; None for a bare file

    @functools.cached_property
    def vocab_fingerprint(self) -> str:
        return vocabulary_fingerprint(self.tokenizer)

    @property
    def info(self) -> TokenizerInfo:
        return TokenizerInfo(self.sha256, self.vocab_size, self.eos_id, self.eos_token, self.vocab_fingerprint)


def vocabulary_fingerprint(tok: Tokenizer) -> str:
    """sha256 of what the ids mean: the model type, its token -> id map (sorted), the BPE merges in
    order (they decide which ids a text gets) and the added tokens with their ids and specialness.
    Whitespace, key order and the merges' spelling ("a b" or ["a", "b"]) in the file do not count."""
    model = json.loads(tok.to_str())["model"]
    merges = [m.split(" ") if isinstance(m, str) else list(m) for m in model.get("merges", [])]
    added = sorted([i, t.content, t.special] for i, t in tok.get_added_tokens_decoder().items())
    canonical = {
        "type": model.get("type"),
        "vocab": sorted(tok.get_vocab(with_added_tokens=False).items(), key=lambda kv: (kv[1], kv[0])),
        "merges": merges,
        "added": added,
    }
    return hashlib.sha256(json.dumps(canonical, ensure_ascii=False, separators=(",", ":")).encode()).hexdigest()


def load_tokenizer(path: str | Path, eos_token: str | None = None) -> LoadedTokenizer:
    """Load a Hugging Face `tokenizer.json` or a directory holding one; UserError naming the file if it
    is missing, invalid or has no EOS."""
    path = Path(path)
    directory = None
    if path.is_dir():
        directory, path = path, path / TOKENIZER_FILE
        if not path.is_file():
            raise UserError(
                f"{directory}: no {TOKENIZER_FILE} in this directory (a Hugging Face tokenizer directory has one)"
            )
    if not path.is_file():
        raise UserError(f"{path}: tokenizer file not found")
    try:
        tok = read_tokenizer_file(path)
    except Exception as e:  # tokenizers raises a bare Exception for any parse failure
        raise UserError(f"{path}: not a valid Hugging Face tokenizer.json: {str(e).splitlines()[0]}") from None
    vocab = tok.get_vocab(with_added_tokens=True)
    eos = eos_token or (directory is not None and _configured_token(tok, directory, "eos")) or _find_eos(tok, path)
    if eos not in vocab:
        raise UserError(f"{path}: end-of-text token {eos!r} is not in the vocabulary")
    bos = _configured_token(tok, directory, "bos") if directory is not None else None
    return LoadedTokenizer(tok, str(path), sha256_file(path), max(vocab.values()) + 1, vocab[eos], eos, bos)


def read_tokenizer_file(path: str | Path) -> Tokenizer:
    """The tokenizer in `path`, set to encode special-token text inside documents as plain text
    (the `tokenizers` library would otherwise turn a literal `<|endoftext|>` into the EOS id)."""
    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True
    return tok


def _configured_token(tok: Tokenizer, directory: Path, kind: str) -> str | None:
    """The `kind` ("eos", "bos") token an HF directory's tokenizer_config.json or generation_config.json names."""
    for name, key in (("tokenizer_config.json", f"{kind}_token"), ("generation_config.json", f"{kind}_token_id")):
        file = directory / name
        if not file.is_file():
            continue
        try:
            value = json.loads(file.read_text(encoding="utf-8")).get(key)
        except (OSError, ValueError, AttributeError) as e:
            raise UserError(f"{file}: not a readable JSON object ({e})") from None
        if isinstance(value, list):
            value = value[0] if value else None
        if isinstance(value, dict):  # older tokenizer_config.json: {"content": "</s>", ...}
            value = value.get("content")
        if isinstance(value, int) and not isinstance(value, bool):
            value = tok.id_to_token(value)
            if value is None:
                raise UserError(f"{file}: {key} is not an id of {directory / TOKENIZER_FILE}")
        if isinstance(value, str):
            return value
    return None


def _find_eos(tok: Tokenizer, path: Path) -> str:
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    for candidate in EOS_CANDIDATES:
        if candidate in special:
            return candidate
    raise UserError(
        f"{path}: no end-of-text special token found (looked for {', '.join(EOS_CANDIDATES)}); name it with --eos-token"
    )
