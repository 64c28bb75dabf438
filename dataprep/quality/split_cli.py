"""`ptk split INPUT... --by FIELD --quantiles K -o OUT`: a scored corpus cut into quality buckets
(`dataprep/quality/split.py`), with a mixture template over them (`dataprep/quality/split_mixture.py`).

    ptk split scored/ --by score_edu --quantiles 5 -o buckets/ --upsample-top 2:2
    ptk split scored/ --by score_edu --thresholds 2.5,3 -o buckets/
"""

from __future__ import annotations

import argparse

from pretrainkit.arguments import int_in, number_in
from pretrainkit.dataprep.cli_options import (
    add_executor_options,
    add_field_options,
    add_inputs_and_output,
    run_stage_command,
    stage_command,
)
from pretrainkit.dataprep.quality.split import MOST_BUCKETS, SplitOptions, SplitStage
from pretrainkit.dataprep.quality.split_mixture import DEFAULT_MAX_EPOCHS, MixtureTemplate, parse_upsample_top
from pretrainkit.errors import UserError


def thresholds_list(given: str) -> tuple[float, ...]:
    """`--thresholds 2.5,3`: the cut points as numbers (their order is checked with the options)."""
    try:
        return tuple(float(v) for v in given.split(","))
    except ValueError:
        raise UserError(f"--thresholds takes numbers separated by commas (e.g. 2.5,3), got {given!r}") from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "split",
        help="cut a scored corpus into quality buckets, with a mixture over them",
        description="Cut a corpus by a numeric field (a score `ptk score` wrote) into buckets: OUT/bucket-00 "
        "(lowest) ... each a corpus folder of part-*.jsonl.zst holding the records as they were, "
        "OUT/buckets.json (each bucket's score range, documents and text bytes), OUT/mixture.yaml (a mixture "
        "of the buckets once tokenized into OUT/tokens/bucket-KK), OUT/rejected.jsonl and OUT/stats.json. "
        "With --quantiles K each bucket holds ~1/K of the text bytes (cuts at quantiles weighted by text "
        "length, as Nemotron-CC weights by tokens); a score equal to a cut goes to the bucket above it.",
    )
    add_inputs_and_output(p, "output directory")
    p.add_argument("--by", required=True, metavar="FIELD", help="the numeric field to split by, e.g. score_edu")
    cuts = p.add_mutually_exclusive_group(required=True)
    cuts.add_argument(
        "--quantiles",
        type=int_in(2, MOST_BUCKETS),
        metavar="K",
        help=f"K buckets of ~equal text bytes (2 to {MOST_BUCKETS})",
    )
    cuts.add_argument(
        "--thresholds",
        type=thresholds_list,
        metavar="A,B,...",
        help="fixed cut points, increasing: bucket-00 holds scores < A, bucket-01 scores >= A and < B, ...",
    )
    p.add_argument(
        "--upsample-top",
        type=parse_upsample_top,
        default=(0, 1.0),
        metavar="K:FACTOR",
        help="in mixture.yaml, the top K buckets drawn FACTOR times as often per byte (default: none)",
    )
    p.add_argument(
        "--max-epochs",
        type=number_in(0, 1e6, lo_open=True),
        default=DEFAULT_MAX_EPOCHS,
        help="each bucket's max_epochs in mixture.yaml (default %(default)g: Muennighoff et al. 2023)",
    )
    add_field_options(p)
    add_executor_options(p)
    stage_command(p, _run)


def _run(args: argparse.Namespace) -> int:
    top, factor = args.upsample_top
    options = SplitOptions(
        args.by,
        quantiles=args.quantiles,
        thresholds=args.thresholds,
        text_field=args.text_field,
        id_field=args.id_field,
        mixture=MixtureTemplate(upsample_top=top, factor=factor, max_epochs=args.max_epochs),
    )
    return run_stage_command(args, SplitStage(options.buckets), options)
