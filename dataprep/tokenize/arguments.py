"""`ptk tokenize`'s shard options on a command line, shared by `ptk tokenize` and `ptk prepare`.

add_tokenize_options(parser)           # --tokenizer, --format, --shard-size, --batch-size, --eos-token
options = tokenize_options(args)
"""

from __future__ import annotations

import argparse

from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions
from pretrainkit.quantities import count
from pretrainkit.shards.formats import DEFAULT_BATCH_TOKENS, DEFAULT_SHARD_TOKENS


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
        "--shard-size", type=count, default=DEFAULT_SHARD_TOKENS, help="tokens per shard, e.g. 32M (default 32M)"
    )
    p.add_argument(
        "--batch-size",
        type=count,
        default=DEFAULT_BATCH_TOKENS,
        help="tokens per record batch, the unit a reader decompresses (default 16K)",
    )


def tokenize_options(args: argparse.Namespace) -> TokenizeOptions:
    return TokenizeOptions(
        args.format, args.shard_size, args.batch_size, args.text_field, args.id_field, args.eos_token
    )
