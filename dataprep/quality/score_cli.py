"""`ptk score INPUT... -o OUT --classifier MODEL [--label L] [--name NAME] ...`: every record with
each classifier's score added (`pretrainkit.dataprep.quality.score`).

A `--label`, `--name` or `--device` belongs to the `--classifier` before it, so that each of several
classifiers has its own: `--classifier dclm.bin --label hq --classifier edu/ --name edu`.
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from pretrainkit.dataprep.classifiers.score_models import ClassifierSpec
from pretrainkit.dataprep.cli_options import (
    add_executor_options,
    add_field_options,
    add_inputs_and_output,
    run_stage_command,
    stage_command,
)
from pretrainkit.dataprep.quality.score import COMBINE, ScoreOptions, ScoreStage
from pretrainkit.remote.staging import local_copy


class _NewClassifier(argparse.Action):
    """--classifier MODEL: a classifier of its own, which the options after it describe."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        namespace.classifiers = [*(namespace.classifiers or []), ClassifierSpec(value)]


class _OfClassifier(argparse.Action):
    """--label, --name, --device: a setting of the last --classifier given."""

    def __call__(self, parser, namespace, value, option_string=None) -> None:
        if not namespace.classifiers:
            parser.error(f"{option_string} {value}: give it after the --classifier it belongs to")
        *before, last = namespace.classifiers
        namespace.classifiers = [*before, replace(last, **{self.dest: value})]


def _combine(given: str) -> list[str]:
    ways = [w.strip() for w in given.split(",") if w.strip()]
    for way in ways:
        if way not in COMBINE:
            raise argparse.ArgumentTypeError(f"{way!r} is not one of {', '.join(COMBINE)}")
    return ways


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "score",
        help="add quality classifiers' scores (fastText, Hugging Face) to every record",
        description="Score every record with one or more classifiers: a fastText .bin/.ftz (the probability of "
        "--label, as DCLM's classifier is applied) or a Hugging Face sequence-classification folder (its "
        "regression output, as FineWeb-Edu's, with int_score_NAME; or the probability of --label). Writes "
        "OUT/part-*.jsonl.zst (every record, in input order, with score_NAME added), OUT/rejected.jsonl "
        "(unreadable records) and OUT/stats.json (each score's mean, quantiles and histogram). Shown in "
        "docs/quality.md.",
    )
    add_inputs_and_output(p, "output directory")
    p.add_argument(
        "--classifier",
        action=_NewClassifier,
        dest="classifiers",
        required=True,
        metavar="MODEL",
        help="a fastText .bin/.ftz file or a Hugging Face model folder, a path or a URL; repeat for several",
    )
    p.add_argument(
        "--label",
        action=_OfClassifier,
        metavar="L",
        help="the label whose probability is the score (fastText: hq or __label__hq); not for a regression head",
    )
    p.add_argument(
        "--name", action=_OfClassifier, metavar="NAME", help="the field: score_NAME (default: the model's name)"
    )
    p.add_argument(
        "--device",
        action=_OfClassifier,
        metavar="DEV",
        help="where a Hugging Face model runs: cpu (default), cuda, cuda:1",
    )
    p.add_argument(
        "--combine",
        type=_combine,
        action="extend",
        default=[],
        metavar="HOW",
        help=f"with several classifiers, also score_HOW over their scores: {' or '.join(COMBINE)} (or both: max,mean)",
    )
    add_field_options(p)
    add_executor_options(p)
    stage_command(p, _run)


def _run(args: argparse.Namespace) -> int:
    combine = tuple(dict.fromkeys(args.combine))
    # A model in a bucket (a fastText file, or a Hugging Face folder as a prefix) is read from its local copy
    classifiers = tuple(replace(spec, model=str(local_copy(spec.model))) for spec in args.classifiers)
    options = ScoreOptions(classifiers, combine, args.text_field, args.id_field)
    return run_stage_command(args, ScoreStage(), options)
