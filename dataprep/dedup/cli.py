"""`ptk dedup INPUT... -o OUT`: exact and near-duplicate removal from the command line."""

from __future__ import annotations

import argparse

from pretrainkit.arguments import count_in
from pretrainkit.dataprep.cli_options import (
    add_executor_options,
    add_inputs_and_output,
    run_stage_command,
    stage_command,
)
from pretrainkit.dataprep.dedup.arguments import add_dedup_options, dedup_options_from_args
from pretrainkit.dataprep.dedup.pipeline import DedupOptions, DedupStage
from pretrainkit.dataprep.paragraphs.cli import add_paragraph_options, run_paragraphs_command
from pretrainkit.errors import UserError

MEMORY_LIMIT = count_in(1, 10**15)  # bytes; the least a run needs is said by `pretrainkit.dataprep.budget`
_DEFAULTS = DedupOptions()
# Document dedup's options, which mean nothing for paragraphs: refused beside --paragraphs when
# given a value other than their default, in one line (and paragraph dedup's without --paragraphs).
DOCUMENT_ONLY = (  # (option, its dest, its default)
    ("--threshold", "threshold", _DEFAULTS.threshold),
    ("--num-perm", "num_perm", _DEFAULTS.num_perm),
    ("--ngram", "ngram", _DEFAULTS.ngram),
    ("--no-near", "no_near", False),
    ("--against", "against", None),
)
PARAGRAPHS_ONLY = (("--min-length", "min_length"), ("--languages", "languages"))  # (option, its dest)


def refuse_mixed_options(args: argparse.Namespace) -> None:
    if not args.paragraphs:
        given = [option for option, dest in PARAGRAPHS_ONLY if getattr(args, dest) is not None]
        if given:
            raise UserError(f"{given[0]} needs --paragraphs (it is paragraph dedup's)")
        return
    given = [option for option, dest, default in DOCUMENT_ONLY if getattr(args, dest) != default]
    if given:
        raise UserError(f"{', '.join(given)}: document dedup's, not used with --paragraphs")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dedup",
        help="remove exact and near-duplicate documents",
        description="Remove exact and MinHash-LSH near-duplicate documents. Writes OUT/*.jsonl.zst (kept records, "
        "unchanged), OUT/duplicates.jsonl, OUT/rejected.jsonl, OUT/stats.json and OUT/index/ (for a later --against). "
        "Near-duplicate clusters are transitive: documents joined by a chain of pairs at --threshold or above are one "
        "cluster, of which the first in input order is kept; a removed document's row gives its similarity to that one "
        "(which may be below the threshold) and the document it matched "
        "(`matched`, `matched_similarity` >= threshold). "
        "Records are identified by file and line: ids need not be unique. "
        "With --paragraphs: paragraph-level dedup instead, OUT/removed.jsonl listing documents left too short.",
    )
    add_inputs_and_output(p, "output directory")
    add_dedup_options(p)
    add_executor_options(p)
    p.add_argument(
        "--memory-limit",
        type=MEMORY_LIMIT,
        metavar="BYTES",
        help="memory for the whole run, main process and workers (e.g. 2G; default: a quarter of this machine's); "
        "sets how the work is cut, never the output",
    )
    add_paragraph_options(p)
    stage_command(p, _run, files=("against",))


def _run(args: argparse.Namespace) -> int:
    refuse_mixed_options(args)
    if args.paragraphs:
        return run_paragraphs_command(args)
    stage = DedupStage(args.memory_limit)
    return run_stage_command(args, stage, dedup_options_from_args(args))
