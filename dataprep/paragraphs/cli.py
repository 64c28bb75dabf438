"""`ptk dedup --paragraphs INPUT... -o OUT`: paragraph-level dedup, from `ptk dedup`'s command line.

add_paragraph_options(parser)          # --paragraphs, --min-length, --languages (in `ptk dedup`'s parser)
if args.paragraphs:
    return run_paragraphs_command(args)
"""

from __future__ import annotations

import argparse

from pretrainkit.dataprep.cli_options import run_stage_command
from pretrainkit.dataprep.filter.language_codes import LANGUAGES_HELP, language_list
from pretrainkit.dataprep.paragraphs.pipeline import DEFAULT_MIN_LENGTH, MIN_LENGTH, ParagraphOptions, ParagraphStage


def add_paragraph_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--paragraphs",
        action="store_true",
        help="paragraph-level dedup instead: a line repeated across the corpus is kept at its first occurrence "
        "and removed from every later document (docs/paragraphs.md)",
    )
    p.add_argument(
        "--min-length",
        type=MIN_LENGTH,
        metavar="CHARS",
        help="with --paragraphs: a document that lost a paragraph and is left with fewer characters (stripped) "
        f"is removed, as paragraphs.min_length (default {DEFAULT_MIN_LENGTH}, ptk filter's min_length)",
    )
    p.add_argument(
        "--languages",
        type=language_list,
        metavar="CODES",
        help="with --paragraphs: a document that lost a paragraph has its language identified again on the text "
        "left (its lang and lang_score replaced, where the record has them); with this option, one in none of "
        f"these languages is removed, as paragraphs.languages (default: none removed): {LANGUAGES_HELP}",
    )


def run_paragraphs_command(args: argparse.Namespace) -> int:
    options = ParagraphOptions(
        DEFAULT_MIN_LENGTH if args.min_length is None else args.min_length,
        args.text_field,
        args.id_field,
        args.languages,
    )
    return run_stage_command(args, ParagraphStage(args.memory_limit), options)
