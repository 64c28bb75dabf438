"""`ptk dedup INPUT... -o OUT`: exact and near-duplicate removal from the command line."""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path
from typing import Iterator

from dataprep.dedup import DedupOptions, run_dedup
from dataprep.dedup_budget import DedupBudget, default_memory_limit
from dataprep.executors import EXECUTORS, JobRunner, open_runner
from pretrainkit.files import writing_into
from pretrainkit.quantities import count, quantity


def add_dedup_options(p: argparse.ArgumentParser) -> None:
    """The options that change what dedup keeps; `ptk prepare` shares them."""
    d = DedupOptions()
    p.add_argument("--threshold", type=float, default=d.threshold, help="Jaccard similarity of word n-grams at which documents are near duplicates (default %(default)s)")
    p.add_argument("--num-perm", type=int, default=d.num_perm, help="MinHash signature length (default %(default)s)")
    p.add_argument("--ngram", type=int, default=d.ngram, help="words per shingle (default %(default)s)")
    add_field_options(p)
    p.add_argument("--no-near", action="store_true", help="exact dedup only")
    p.add_argument("--against", metavar="INDEX_DIR", help="also drop documents duplicating an earlier corpus (its OUT/index)")


def add_inputs_and_output(p: argparse.ArgumentParser, output_help: str) -> None:
    """INPUT... and -o OUT, as every command over raw corpora takes them."""
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=".jsonl, .jsonl.gz, .jsonl.zst, .parquet, .txt files or directories")
    p.add_argument("-o", "--output", required=True, type=Path, metavar="OUT", help=output_help)


def add_field_options(p: argparse.ArgumentParser) -> None:
    d = DedupOptions()
    p.add_argument("--text-field", default=d.text_field, help="JSON/Parquet field holding the text (default %(default)s)")
    p.add_argument("--id-field", default=d.id_field, help="JSON/Parquet field holding the document id (default %(default)s)")


def dedup_options_from_args(args: argparse.Namespace) -> DedupOptions:
    return DedupOptions(
        threshold=args.threshold, num_perm=args.num_perm, ngram=args.ngram, text_field=args.text_field,
        id_field=args.id_field, near=not args.no_near, against=args.against,
    )


def add_executor_options(p: argparse.ArgumentParser) -> None:
    """Where the jobs run: --workers, --executor, --ray-address (the output depends on none of them)."""
    p.add_argument("--workers", type=count, default=None,
                   help="jobs at a time, >= 1 (default: all cores; with --executor ray, all CPUs of the cluster); the output does not depend on it")
    p.add_argument("--executor", choices=EXECUTORS, default="local",
                   help="local: worker processes on this machine (default); ray: one Ray task per job, on a Ray cluster")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="Ray cluster to run on, e.g. auto or HOST:6379 (default: $RAY_ADDRESS, else a local Ray instance for the run)")


@contextlib.contextmanager
def runner_from_args(args: argparse.Namespace) -> Iterator[JobRunner]:
    """The runner the options ask for, entered. A failed run's temporaries under OUT are swept after
    the runner's workers have stopped, so that none is left behind by a worker still writing."""
    with writing_into(args.output), open_runner(args.executor, args.workers, args.ray_address) as runner:
        yield runner


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dedup", help="remove exact and near-duplicate documents",
        description="Remove exact and MinHash-LSH near-duplicate documents. Writes OUT/*.jsonl.zst (kept records, "
        "unchanged), OUT/duplicates.jsonl, OUT/rejected.jsonl, OUT/stats.json and OUT/index/ (for a later --against).",
    )
    add_inputs_and_output(p, "output directory")
    add_dedup_options(p)
    add_executor_options(p)
    p.add_argument("--memory-limit", type=quantity, metavar="BYTES",
                   help="memory for the whole run, main process and workers (e.g. 2G; default: a quarter of this machine's); "
                        "sets how the work is cut, never the output")  # fmt: skip
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    with runner_from_args(args) as runner:
        budget = DedupBudget.for_limit(int(args.memory_limit or default_memory_limit()), runner.workers)
        stats = run_dedup(args.inputs, args.output, dedup_options_from_args(args), runner=runner, budget=budget)
    print(format_summary(stats, args.output))
    return 0


def format_summary(stats: dict, out_dir: Path) -> str:
    mb = stats["input_bytes"] / 1e6
    secs = max(stats["seconds"], 1e-9)
    rows = [
        ("input docs", f"{stats['input_docs']:,}"),
        ("kept", f"{stats['kept_docs']:,}"),
        ("exact duplicates", f"{stats['exact_duplicates']:,}"),
        ("near duplicates", f"{stats['near_duplicates']:,}"),
        ("rejected", f"{stats['rejected']:,}"),
        ("input", f"{mb:,.1f} MB in {secs:.1f} s ({mb / secs:.1f} MB/s)"),
    ]
    if stats["against_docs"]:
        rows.insert(1, ("against (old) docs", f"{stats['against_docs']:,}"))
    width = max(len(k) for k, _ in rows)
    return "\n".join([f"dedup -> {out_dir}"] + [f"  {k:<{width}}  {v}" for k, v in rows])
