"""`ptk dedup INPUT... -o OUT`: exact and near-duplicate removal from the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.cli_options import (
    add_executor_options,
    add_field_options,
    add_inputs_and_output,
    runner_from_args,
)
from pretrainkit.dataprep.dedup.pipeline import DedupOptions, owned_directories, run_dedup
from pretrainkit.dataprep.paragraphs.cli import add_paragraph_options, refuse_mixed_options, run_paragraphs_command
from pretrainkit.dataprep.summary import input_row, summary_table
from pretrainkit.output_folders import DEDUP
from pretrainkit.quantities import quantity
from pretrainkit.remote.staging import UrlArguments


def add_dedup_options(p: argparse.ArgumentParser) -> None:
    """The options that change what dedup keeps; `ptk prepare` shares them."""
    d = DedupOptions()
    p.add_argument(
        "--threshold",
        type=float,
        default=d.threshold,
        help="Jaccard similarity of word n-grams at which documents are near duplicates (default %(default)s)",
    )
    p.add_argument("--num-perm", type=int, default=d.num_perm, help="MinHash signature length (default %(default)s)")
    p.add_argument("--ngram", type=int, default=d.ngram, help="words per shingle (default %(default)s)")
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
        type=quantity,
        metavar="BYTES",
        help="memory for the whole run, main process and workers (e.g. 2G; default: a quarter of this machine's); "
        "sets how the work is cut, never the output",
    )
    add_paragraph_options(p)
    p.set_defaults(
        func=_run, resumes=True, url_arguments=UrlArguments(inputs=("inputs",), files=("against",), output="output")
    )


def _run(args: argparse.Namespace) -> int:
    refuse_mixed_options(args)
    if args.paragraphs:
        return run_paragraphs_command(args)
    with runner_from_args(args, DEDUP, owned_directories(args.output)) as runner:
        budget = DedupBudget.for_limit(int(args.memory_limit), runner.workers) if args.memory_limit else None
        stats = run_dedup(args.inputs, args.output, dedup_options_from_args(args), runner, budget)
    print(format_summary(stats, args.output))
    return 0


def format_summary(stats: dict, out_dir: Path) -> str:
    rows = [
        ("input docs", f"{stats['input_docs']:,}"),
        ("kept", f"{stats['kept_docs']:,}"),
        ("exact duplicates", f"{stats['exact_duplicates']:,}"),
        ("near duplicates", f"{stats['near_duplicates']:,}"),
        ("rejected", f"{stats['rejected']:,}"),
        input_row(stats["input_bytes"], stats["seconds"]),
    ]
    if stats["against_docs"]:
        rows.insert(1, ("against (old) docs", f"{stats['against_docs']:,}"))
    return summary_table("dedup", out_dir, rows)
