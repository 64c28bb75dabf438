"""`ptk dedup --paragraphs INPUT... -o OUT`: paragraph-level dedup, from `ptk dedup`'s command line.

    add_paragraph_options(parser)          # --paragraphs, --min-length (in `ptk dedup`'s parser)
    if args.paragraphs:
        return run_paragraphs_command(args)

`ptk dedup`'s document options that mean nothing for paragraphs (--threshold, --num-perm, --ngram,
--no-near, --against) are refused beside --paragraphs when given a value other than their default,
in one line; --min-length without --paragraphs likewise.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.cli_options import runner_from_args
from pretrainkit.dataprep.dedup.pipeline import DedupOptions
from pretrainkit.dataprep.paragraphs.pipeline import (
    DEFAULT_MIN_LENGTH,
    ParagraphOptions,
    owned_directories,
    run_paragraphs,
)
from pretrainkit.dataprep.summary import input_row, summary_table
from pretrainkit.errors import UserError
from pretrainkit.output_folders import PARAGRAPHS
from pretrainkit.stage_layout import REMOVED_NAME

_DEFAULTS = DedupOptions()
DOCUMENT_ONLY = (  # (option, its dest, its default)
    ("--threshold", "threshold", _DEFAULTS.threshold),
    ("--num-perm", "num_perm", _DEFAULTS.num_perm),
    ("--ngram", "ngram", _DEFAULTS.ngram),
    ("--no-near", "no_near", False),
    ("--against", "against", None),
)


def add_paragraph_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--paragraphs",
        action="store_true",
        help="paragraph-level dedup instead: a line repeated across the corpus is kept at its first occurrence "
        "and removed from every later document (docs/paragraphs.md)",
    )
    p.add_argument(
        "--min-length",
        type=int,
        metavar="CHARS",
        help="with --paragraphs: a document that lost a paragraph and is left with fewer characters (stripped) "
        f"is removed, as paragraphs.min_length (default {DEFAULT_MIN_LENGTH}, ptk filter's min_length)",
    )


def refuse_mixed_options(args: argparse.Namespace) -> None:
    """One line for options given to the other kind of dedup."""
    if not args.paragraphs:
        if args.min_length is not None:
            raise UserError("--min-length needs --paragraphs (it is paragraph dedup's)")
        return
    given = [option for option, dest, default in DOCUMENT_ONLY if getattr(args, dest) != default]
    if given:
        raise UserError(f"{', '.join(given)}: document dedup's, not used with --paragraphs")


def run_paragraphs_command(args: argparse.Namespace) -> int:
    options = ParagraphOptions(
        DEFAULT_MIN_LENGTH if args.min_length is None else args.min_length, args.text_field, args.id_field
    )
    with runner_from_args(args, PARAGRAPHS, owned_directories(args.output)) as runner:
        budget = DedupBudget.for_limit(int(args.memory_limit), runner.workers) if args.memory_limit else None
        stats = run_paragraphs(args.inputs, args.output, options, runner, budget)
    print(format_summary(stats, args.output))
    return 0


def format_summary(stats: dict, out_dir: Path) -> str:
    removed = stats["removed_text_bytes"]
    removed_bytes = removed["paragraphs"] + removed["documents"]
    share = stats["paragraphs_removed"] / max(1, stats["paragraphs"])
    rows = [
        ("input docs", f"{stats['input_docs']:,}"),
        ("kept", f"{stats['kept_docs']:,}"),
        (
            "removed",
            f"{stats['removed_docs']:,} (left shorter than --min-length {stats['options']['min_length']}; "
            f"see {out_dir / REMOVED_NAME})",
        ),
        ("rejected", f"{stats['rejected']:,}"),
        ("paragraphs removed", f"{stats['paragraphs_removed']:,} of {stats['paragraphs']:,} ({share:.1%})"),
        ("docs changed", f"{stats['docs_changed']:,} lost a paragraph or more"),
        (
            "text removed",
            f"{removed_bytes:,} of {stats['input_text_bytes']:,} bytes "
            f"({removed_bytes / max(1, stats['input_text_bytes']):.1%})",
        ),
        input_row(stats["input_bytes"], stats["seconds"]),
    ]
    return summary_table("dedup --paragraphs", out_dir, rows)
