"""`ptk decontaminate INPUT... --eval FILE... -o OUT`: remove documents sharing a word n-gram with evaluation sets."""

from __future__ import annotations

import argparse

from pretrainkit.dataprep.cli_options import (
    add_executor_options,
    add_field_options,
    add_inputs_and_output,
    run_stage_command,
    stage_command,
)
from pretrainkit.dataprep.decontaminate.pipeline import NGRAM, DecontaminateOptions, DecontaminateStage


def register(sub: argparse._SubParsersAction) -> None:
    d = DecontaminateOptions()
    p = sub.add_parser(
        "decontaminate",
        help="remove documents that share a word n-gram with evaluation sets",
        description="Remove (or with --report-only, list) the documents that share a word n-gram with an "
        "evaluation set, after normalization (NFKC, case folding, punctuation and symbols deleted, words split "
        "on whitespace: lower-cased, unpunctuated copies are found). In Chinese, Japanese, Thai, Lao, Khmer and "
        "Myanmar each character is a token weighing its share of a word (an n-gram of 13 words is 23 Chinese "
        "characters, about 40 Japanese, 78 Thai), so full-width, half-width, unpunctuated and spaced copies "
        "are found too. Writes OUT/*.jsonl.zst (kept records, "
        "unchanged), OUT/contaminated.jsonl (a row per removed document: its first shared n-gram and the "
        "evaluation item it came from), OUT/rejected.jsonl and OUT/stats.json. Evaluation items with fewer "
        "words than --ngram are counted and cannot match.",
    )
    add_inputs_and_output(p, "output directory")
    p.add_argument(
        "--eval",
        dest="eval_files",
        nargs="+",
        action="extend",
        required=True,
        metavar="FILE",
        help="evaluation sets: .jsonl, .jsonl.gz, .jsonl.zst, .parquet (a record per item) or .txt (an item per "
        "non-blank line)",
    )
    p.add_argument(
        "--eval-field",
        dest="eval_fields",
        action="append",
        metavar="F",
        help="field of an evaluation record holding its text: a string or a list of strings; a dotted name "
        "reaches into an object (choices.text); give it again for more fields, joined in that order "
        "(default: text)",
    )
    p.add_argument(
        "--eval-id-field",
        default=d.eval_id_field,
        metavar="F",
        help="field naming an evaluation item in the rows (default %(default)s; else FILE:LINE)",
    )
    p.add_argument(
        "--ngram",
        type=NGRAM,
        default=d.ngram,
        help="words per n-gram (default %(default)s, as GPT-3; their weight in characters in Chinese, Japanese, Thai)",
    )
    p.add_argument("--report-only", action="store_true", help="list the contaminated documents, write no kept records")
    add_field_options(p)
    add_executor_options(p)
    stage_command(p, _run, files=("eval_files",))


def _run(args: argparse.Namespace) -> int:
    options = DecontaminateOptions(
        eval_files=tuple(args.eval_files),
        eval_fields=tuple(args.eval_fields or DecontaminateOptions.eval_fields),
        eval_id_field=args.eval_id_field,
        ngram=args.ngram,
        text_field=args.text_field,
        id_field=args.id_field,
        report_only=args.report_only,
    )
    return run_stage_command(args, DecontaminateStage(), options)
