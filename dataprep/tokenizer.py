"""Tokenizers: train a byte-level BPE on a corpus, and load any Hugging Face `tokenizer.json`.

    tok = train_tokenizer(texts, vocab_size=8192)          # tokenizers.Tokenizer, EOS id 0
    tok.save("tokenizer.json")
    loaded = load_tokenizer("tokenizer.json")               # finds the EOS token, hashes the file
    loaded.eos_id, loaded.vocab_size, loaded.sha256

Training is deterministic: the same texts in the same order give the same `tokenizer.json`
bytes. The end-of-text token is a special token with id 0; it is what separates documents in
the token stream of a shard set. A loaded tokenizer encodes the text of special tokens found in a
document (a literal `<|endoftext|>`) as plain text, so EOS appears only where the pipeline puts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file
from shards.manifest import TokenizerInfo

DEFAULT_EOS = "<|endoftext|>"
EOS_CANDIDATES = (DEFAULT_EOS, "</s>", "<eos>", "<|end_of_text|>")
MIN_VOCAB = 257  # the 256 byte symbols and the EOS token


def train_tokenizer(texts: Iterable[str], vocab_size: int, eos_token: str = DEFAULT_EOS, min_frequency: int = 2) -> Tokenizer:
    if vocab_size < MIN_VOCAB:
        raise UserError(f"--vocab-size must be at least {MIN_VOCAB} (256 bytes + the end-of-text token), got {vocab_size}")
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

    @property
    def info(self) -> TokenizerInfo:
        return TokenizerInfo(self.sha256, self.vocab_size, self.eos_id, self.eos_token)


def load_tokenizer(path: str | Path, eos_token: str | None = None) -> LoadedTokenizer:
    """Load a Hugging Face `tokenizer.json`; UserError naming the file if it is missing, invalid or has no EOS."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: tokenizer file not found")
    try:
        tok = read_tokenizer_file(path)
    except Exception as e:  # tokenizers raises a bare Exception for any parse failure
        raise UserError(f"{path}: not a valid Hugging Face tokenizer.json: {str(e).splitlines()[0]}") from None
    vocab = tok.get_vocab(with_added_tokens=True)
    eos = eos_token or _find_eos(tok, path)
    if eos not in vocab:
        raise UserError(f"{path}: end-of-text token {eos!r} is not in the vocabulary")
    return LoadedTokenizer(tok, str(path), sha256_file(path), max(vocab.values()) + 1, vocab[eos], eos)


def read_tokenizer_file(path: str | Path) -> Tokenizer:
    """The tokenizer in `path`, set to encode special-token text inside documents as plain text
    (the `tokenizers` library would otherwise turn a literal `<|endoftext|>` into the EOS id)."""
    tok = Tokenizer.from_file(str(path))
    tok.encode_special_tokens = True
    return tok


def _find_eos(tok: Tokenizer, path: Path) -> str:
    special = {t.content for t in tok.get_added_tokens_decoder().values() if t.special}
    for candidate in EOS_CANDIDATES:
        if candidate in special:
            return candidate
    raise UserError(
        f"{path}: no end-of-text special token found (looked for {', '.join(EOS_CANDIDATES)}); "
        "name it with --eos-token"
    )

