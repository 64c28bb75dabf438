"""`ptk dedup`'s document options on a command line, shared by `ptk dedup` and `ptk prepare`.

add_dedup_options(parser)              # --threshold, --num-perm, --ngram, the fields, --no-near, --against
options = dedup_options_from_args(args)
"""

from __future__ import annotations

import argparse

from pretrainkit.dataprep.cli_options import add_field_options
from pretrainkit.dataprep.dedup.pipeline import NGRAM, NUM_PERM, THRESHOLD, DedupOptions


def add_dedup_options(p: argparse.ArgumentParser) -> None:
    """The options that change what dedup keeps; `ptk prepare` shares them."""
    d = DedupOptions()
    p.add_argument(
        "--threshold",
        type=THRESHOLD,
        default=d.threshold,
        help="Jaccard similarity of word n-grams at which documents are near duplicates (default %(default)s)",
    )
    p.add_argument(
        "--num-perm", type=NUM_PERM, default=d.num_perm, help="MinHash signature length (default %(default)s)"
    )
    p.add_argument("--ngram", type=NGRAM, default=d.ngram, help="words per shingle (default %(default)s)")
    add_field_options(p)
    p.add_argument("--no-near", action="store_true", help="exact dedup only")
    p.add_argument(
        "--against", metavar="INDEX_DIR", help="also drop documents duplicating an earlier corpus (its OUT/index)"
    )


def dedup_options_from_args(args: argparse.Namespace) -> DedupOptions:
    return DedupOptions(
        threshold=args.threshold,
        num_perm=args.num_perm,
        ngram=args.ngram,
        text_field=args.text_field,
        id_field=args.id_field,
        near=not args.no_near,
        against=args.against,
    )
