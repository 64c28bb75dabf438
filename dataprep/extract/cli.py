"""`ptk extract INPUT... -o OUT`: the main text of crawled pages (WARC) and HTML files as JSONL parts."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pretrainkit.dataprep.cli_options import add_executor_options, path_or_url, runner_from_args
from pretrainkit.dataprep.extract.pipeline import INPUT_SUFFIXES, owned_directories, run_extract
from pretrainkit.dataprep.summary import summary_table
from pretrainkit.output_folders import EXTRACT
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.stage_layout import REJECTED_NAME


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "extract",
        help="extract the main text of web pages (WARC files, HTML files) into JSONL",
        description="Extract the main text of the 2xx HTML responses of WARC/WARC.gz files (Common Crawl's "
        "format) and of HTML files, without the page chrome (resiliparse). Writes OUT/part-*.jsonl.zst (records: "
        "id, url, date, text), OUT/rejected.jsonl (pages with no text, unreadable records, with their reason) and "
        "OUT/stats.json (every record counted: kept, skipped by reason, rejected by reason). OUT is an input of "
        "`ptk dedup` and `ptk tokenize` as it is.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=f"{', '.join(INPUT_SUFFIXES)} files or directories")
    p.add_argument("-o", "--output", required=True, type=path_or_url, metavar="OUT", help="output directory")
    add_executor_options(p)
    p.set_defaults(func=_run, resumes=True, url_arguments=UrlArguments(inputs=("inputs",), output="output"))


def _run(args: argparse.Namespace) -> int:
    began = time.monotonic()
    with runner_from_args(args, EXTRACT, owned_directories(args.output)) as runner:
        stats = run_extract(args.inputs, args.output, runner)
    print(format_summary(stats, args.output, time.monotonic() - began))
    return 0


def format_summary(stats: dict, out_dir: Path, seconds: float) -> str:
    mb = stats["input_bytes"] / 1e6
    seconds = max(seconds, 1e-9)

    def by_reason(counts: dict) -> str:
        total = sum(counts.values())
        shown = ", ".join(f"{reason} {n:,}" for reason, n in sorted(counts.items(), key=lambda kv: -kv[1]))
        return f"{total:,}" + (f" ({shown})" if shown else "")

    rows = [
        ("records", f"{stats['records']:,} in {stats['input_files']:,} files"),
        ("pages kept", f"{stats['kept']:,}"),
        ("skipped", by_reason(stats["skipped"])),
        ("rejected", f"{by_reason(stats['rejected'])}, listed in {out_dir / REJECTED_NAME}"),
        (
            "invalid bytes",
            f"{stats['invalid_byte_sequences']:,} sequences in {stats['invalid_byte_pages']:,} pages, "
            "each replaced by U+FFFD",
        ),
        ("input", f"{mb:,.1f} MB in {seconds:.1f} s ({stats['kept'] / seconds:,.0f} pages/s)"),
    ]
    return summary_table("extract", out_dir, rows)
