"""`ptk tokenizer train` and `ptk tokenize`: the command-line side of tokenization (`ptk prepare`, which
chains stages ending with tokenize, is in dataprep/prepare/cli.py)."""

from __future__ import annotations

import argparse
from collections import Counter

from pretrainkit.arguments import count_in, int_in
from pretrainkit.dataprep.cli_options import (
    add_executor_options,
    add_field_options,
    add_inputs_and_output,
    run_stage_command,
    stage_command,
)
from pretrainkit.dataprep.readers import (
    Document,
    discover_inputs,
    fetched_input_files,
    nothing_usable,
    plan_read_tasks,
    read_task,
    reason_kind,
)
from pretrainkit.dataprep.tokenize.arguments import add_tokenize_options, tokenize_options
from pretrainkit.dataprep.tokenize.corpus import Tokenize, TokenizeStage
from pretrainkit.files import output_file, write_text_atomic, writing_into
from pretrainkit.progress import progress_bar
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.shards.tokenizer import DEFAULT_EOS, MIN_VOCAB, load_tokenizer, train_tokenizer


def register(sub: argparse._SubParsersAction) -> None:
    tok = sub.add_parser("tokenizer", help="train a byte-level BPE tokenizer", description="Tokenizer tools.")
    tok_sub = tok.add_subparsers(dest="tokenizer_command", metavar="COMMAND", required=True)
    train = tok_sub.add_parser(
        "train",
        help="train a byte-level BPE tokenizer on a corpus",
        description="Train a deterministic byte-level BPE tokenizer (Hugging Face `tokenizers`) with an "
        "end-of-text special token (id 0) and write it as tokenizer.json.",
    )
    add_inputs_and_output(train, "tokenizer.json to write")
    train.add_argument(
        "--vocab-size",
        type=count_in(MIN_VOCAB, 1 << 32),  # the 256 bytes and the end-of-text token; ids are at most uint32
        required=True,
        help="vocabulary size, special tokens included (at most: what the corpus's pairs allow)",
    )
    train.add_argument(
        "--min-frequency", type=int_in(1, 10**9), default=2, help="least count of a pair to merge (default 2)"
    )
    train.add_argument("--eos-token", default=DEFAULT_EOS, help=f"end-of-text token (default {DEFAULT_EOS})")
    add_field_options(train)
    train.set_defaults(
        func=run_train,
        url_arguments=UrlArguments(inputs=("inputs",), select_inputs=fetched_input_files),
        local_outputs=("output",),
    )

    tokenize = sub.add_parser(
        "tokenize",
        help="tokenize corpora into checksummed zstd shards",
        description="Tokenize corpora into zstd-compressed Arrow (default) or WebDataset shards with a "
        "manifest.json; rejected records go to OUT/rejected.jsonl.",
    )
    add_inputs_and_output(tokenize, "shard directory to write")
    add_tokenize_options(tokenize)
    add_field_options(tokenize)
    add_executor_options(tokenize)
    stage_command(tokenize, run_tokenize, files=("tokenizer",))


def run_train(args: argparse.Namespace) -> int:
    output_file(args.output)
    files = discover_inputs(args.inputs)
    counts = {"docs": 0}
    reasons: Counter = Counter()

    def texts():
        with progress_bar(desc="read", unit="doc") as bar:
            for task in plan_read_tasks(files):
                for item in read_task(task, args.text_field, args.id_field, records=False):
                    bar.update()
                    if isinstance(item, Document):
                        counts["docs"] += 1
                        yield item.text
                    else:
                        reasons[reason_kind(item.reason)] += 1

    tok = train_tokenizer(texts(), args.vocab_size, args.eos_token, args.min_frequency)
    if counts["docs"] == 0:
        raise nothing_usable(args.inputs, reasons)
    with writing_into(args.output.parent):
        write_text_atomic(args.output, tok.to_str(pretty=True) + "\n")
    loaded = load_tokenizer(args.output, args.eos_token)
    vocab = f"vocab {loaded.vocab_size}"
    if loaded.vocab_size < args.vocab_size:  # BPE stops when no pair occurs --min-frequency times
        vocab += (
            f" of the {args.vocab_size} asked for (the corpus has no more pairs seen "
            f"{args.min_frequency}+ times to merge)"
        )
    print(
        f"trained on {counts['docs']} documents ({sum(reasons.values())} rejected records skipped): "
        f"{vocab}, EOS {loaded.eos_token!r} = {loaded.eos_id}, wrote {args.output} "
        f"(sha256 {loaded.sha256[:16]})"
    )
    return 0


def run_tokenize(args: argparse.Namespace) -> int:
    return run_stage_command(args, TokenizeStage(), Tokenize(args.tokenizer, tokenize_options(args)))
