"""`ptk tokenize`'s shard options on a command line, shared by `ptk tokenize` and `ptk prepare`.

add_tokenize_options(parser)           # --tokenizer, --format, --shard-size, --batch-size, --eos-token
options = tokenize_options(args)
"""

from __future__ import annotations

import argparse

from pretrainkit.arguments import count_in
from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions
from pretrainkit.shards.formats import DEFAULT_BATCH_TOKENS, DEFAULT_SHARD_TOKENS

# Tokens per shard and per record batch (`ptk tokenize`'s types, and a pipeline file's tokenize stage):
# past 1T a shard's offsets would leave the int64 arithmetic the writer plans them with.
SHARD_SIZE = count_in(1, 10**12)
BATCH_SIZE = count_in(1, 10**12)


def add_tokenize_options(p: argparse.ArgumentParser, required: bool = True) -> None:
    """Options of `ptk tokenize` that `ptk prepare` shares (the field names come from the dedup options
    there, and its --tokenizer is needed only without a pipeline file)."""
    p.add_argument(
        "--tokenizer",
        required=required,
        help="a Hugging Face tokenizer.json, or a model/tokenizer directory holding one",
    )
    p.add_argument(
        "--eos-token", default=None, help="end-of-text token, if the tokenizer's is not <|endoftext|>, </s> or <eos>"
    )
    p.add_argument("--format", choices=["arrow", "webdataset"], default="arrow", help="shard format (default arrow)")
    p.add_argument(
        "--shard-size", type=SHARD_SIZE, default=DEFAULT_SHARD_TOKENS, help="tokens per shard, e.g. 32M (default 32M)"
    )
    p.add_argument(
        "--batch-size",
        type=BATCH_SIZE,
        default=DEFAULT_BATCH_TOKENS,
        help="tokens per record batch, the unit a reader decompresses (default 16K)",
    )


def tokenize_options(args: argparse.Namespace) -> TokenizeOptions:
    return TokenizeOptions(
        args.format, args.shard_size, args.batch_size, args.text_field, args.id_field, args.eos_token
    )
