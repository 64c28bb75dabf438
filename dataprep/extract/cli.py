"""`ptk extract INPUT... -o OUT`: the main text of crawled pages (WARC) and HTML files as JSONL parts."""

from __future__ import annotations

import argparse

from pretrainkit.dataprep.cli_options import add_executor_options, path_or_url, run_stage_command, stage_command
from pretrainkit.dataprep.extract.html import DEFAULT_EXTRACTOR, EXTRACTORS
from pretrainkit.dataprep.extract.pipeline import INPUT_SUFFIXES, ExtractOptions, ExtractStage


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "extract",
        help="extract the main text of web pages (WARC files, HTML files) into JSONL",
        description="Extract the main text of the 2xx HTML responses of WARC/WARC.gz files (Common Crawl's "
        "format) and of HTML files, without the page chrome (resiliparse, after leaving out what the page marks as "
        "navigation, see --extractor). Writes OUT/part-*.jsonl.zst (records: "
        "id, url, date, text), OUT/rejected.jsonl (pages with no text, unreadable records, with their reason) and "
        "OUT/stats.json (every record counted: kept, skipped by reason, rejected by reason). OUT is an input of "
        "`ptk dedup` and `ptk tokenize` as it is.",
    )
    p.add_argument("inputs", nargs="+", metavar="INPUT", help=f"{', '.join(INPUT_SUFFIXES)} files or directories")
    p.add_argument("-o", "--output", required=True, type=path_or_url, metavar="OUT", help="output directory")
    p.add_argument(
        "--extractor",
        choices=EXTRACTORS,
        default=DEFAULT_EXTRACTOR,
        help="nochrome: leave out the page's chrome by its markup (what is outside <main>, <nav>, navigation roles "
        "and classes, 'Prev Up Next' lines), then resiliparse's main-content pass; resiliparse: that pass alone, "
        "as before (faster, keeps more chrome: docs/extract.md measures both). Default: %(default)s",
    )
    add_executor_options(p)
    stage_command(p, _run)


def _run(args: argparse.Namespace) -> int:
    return run_stage_command(args, ExtractStage(), ExtractOptions(args.extractor))
