"""`ptk classifier train`: a fastText classifier trained on labelled corpora, written as a `.bin` that
fastText's own `load_model` reads (`dataprep/quality/train.py`).

    ptk classifier train data/ -o quality.bin --label-field label
    ptk classifier train --positive eli5/ --negative crawl/ -o quality.bin --seed 1
"""

from __future__ import annotations

import argparse
import time

from pretrainkit.arguments import count_in, int_in, number_in
from pretrainkit.dataprep.cli_options import path_or_url
from pretrainkit.dataprep.quality.train import (
    NEGATIVE,
    POSITIVE,
    TrainOptions,
    read_labelled,
    read_two_labels,
    train_classifier,
)
from pretrainkit.dataprep.readers import fetched_input_files
from pretrainkit.errors import UserError
from pretrainkit.files import output_file, writing_into
from pretrainkit.remote.staging import UrlArguments

DEFAULTS = TrainOptions()


def register(sub: argparse._SubParsersAction) -> None:
    group = sub.add_parser("classifier", help="train a fastText text classifier", description="Classifier tools.")
    group_sub = group.add_subparsers(dest="classifier_command", metavar="COMMAND", required=True)
    p = group_sub.add_parser(
        "train",
        help="train a fastText classifier (a .bin fastText reads) on labelled corpora",
        description="Supervised fastText training (word and hashed word n-gram features, averaged, softmax over "
        "the labels found), each text with its line feeds replaced by spaces as DCLM applies its classifier. "
        "Labels come from --label-field, or from --positive and --negative (labels positive and negative). "
        "The same seed with one worker writes the same bytes; several workers update the model together "
        "without locks (hogwild, as fastText's threads do), which is faster and not repeatable.",
    )
    p.add_argument(
        "inputs",
        nargs="*",
        metavar="INPUT",
        help=".jsonl, .jsonl.gz, .jsonl.zst, .parquet files or directories, local or URLs, their records labelled "
        "by --label-field",
    )
    p.add_argument("-o", "--output", required=True, type=path_or_url, metavar="MODEL", help="the .bin file to write")
    p.add_argument("--label-field", metavar="F", help="the field holding each record's label (one word)")
    p.add_argument("--positive", nargs="+", default=[], metavar="PATH", help=f"inputs labelled {POSITIVE}")
    p.add_argument("--negative", nargs="+", default=[], metavar="PATH", help=f"inputs labelled {NEGATIVE}")
    p.add_argument("--text-field", default="text", help="the field holding the text (default %(default)s)")
    p.add_argument(
        "--ngrams", type=int_in(1, 16), default=DEFAULTS.ngrams, help="longest word n-gram (default %(default)s)"
    )
    p.add_argument("--dim", type=int_in(1, 4096), default=DEFAULTS.dim, help="vector size (default %(default)s)")
    p.add_argument("--epoch", type=int_in(1, 10_000), default=DEFAULTS.epoch, help="epochs (default %(default)s)")
    p.add_argument(
        "--lr", type=number_in(0, 100, lo_open=True), default=DEFAULTS.lr, help="learning rate (default %(default)s)"
    )
    p.add_argument(
        "--min-count",
        type=int_in(1, 10**9),
        default=DEFAULTS.min_count,
        help="fewest occurrences of a word in the vocabulary (default %(default)s)",
    )
    p.add_argument(
        "--bucket",
        type=count_in(1, 1 << 30),
        default=DEFAULTS.bucket,
        help="rows for the hashed word n-grams (default %(default)s)",
    )
    p.add_argument("--seed", type=int_in(0, 2**31 - 1), default=DEFAULTS.seed, help="seed (default %(default)s)")
    p.add_argument(
        "--workers",
        type=int_in(1, 256),
        default=DEFAULTS.workers,
        help="training threads (default %(default)s: deterministic; more: hogwild, not repeatable)",
    )
    p.set_defaults(
        func=run_train,
        url_arguments=UrlArguments(inputs=("inputs", "positive", "negative"), select_inputs=fetched_input_files),
        local_outputs=("output",),
    )


def run_train(args: argparse.Namespace) -> int:
    two_labels = bool(args.positive or args.negative)
    if two_labels and (args.inputs or args.label_field):
        raise UserError("give either INPUT... with --label-field, or --positive and --negative, not both")
    if two_labels and not (args.positive and args.negative):
        raise UserError("--positive and --negative go together: give both")
    if not two_labels and not (args.inputs and args.label_field):
        raise UserError("give INPUT... and --label-field, or --positive PATH... and --negative PATH...")
    output_file(args.output)
    started = time.perf_counter()
    if two_labels:
        examples = read_two_labels(args.positive, args.negative, args.text_field)
    else:
        examples = read_labelled(args.inputs, args.text_field, args.label_field)
    options = TrainOptions(
        ngrams=args.ngrams,
        dim=args.dim,
        epoch=args.epoch,
        lr=args.lr,
        min_count=args.min_count,
        bucket=args.bucket,
        seed=args.seed,
        workers=args.workers,
    )
    model = train_classifier(examples, options)
    with writing_into(args.output.parent):
        model.write(args.output)
    counts = ", ".join(f"{n:,} {name}" for name, n in zip(model.labels, model.label_counts))
    print(
        f"trained on {len(examples.texts):,} documents ({examples.rejected} rejected records skipped): {counts}; "
        f"{len(model.vocabulary.words):,} words; {time.perf_counter() - started:.1f} s; wrote {args.output}"
    )
    return 0
