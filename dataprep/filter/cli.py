"""`ptk filter INPUT... -o OUT`: language ID, heuristic quality filters and PII redaction from the command line."""

from __future__ import annotations

import argparse
from pathlib import Path

from pretrainkit.dataprep.cli_options import (
    add_executor_options,
    add_field_options,
    add_inputs_and_output,
    path_or_url,
    run_stage_command,
    stage_command,
)
from pretrainkit.dataprep.filter.language_codes import LANGUAGES_HELP, language_list
from pretrainkit.dataprep.filter.pipeline import FilterOptions, FilterStage
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, read_filters, with_languages


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "filter",
        help="language ID, Gopher/C4/FineWeb quality filters and PII redaction",
        description="Run the steps of a filters file over corpora (default: FineWeb's filters as FineWeb ran them: "
        f"{DEFAULT_FILTERS.name}, shown in docs/filter.md). Writes OUT/part-*.jsonl.zst (kept records, in input "
        "order, with `lang`, `lang_score` and `pii` added and the text as the steps left it), OUT/removed.jsonl "
        "(per removed document: the filter that removed it, its value and threshold), OUT/rejected.jsonl "
        "(unreadable records) and OUT/stats.json (counts per filter).",
    )
    add_inputs_and_output(p, "output directory")
    p.add_argument(
        "--filters",
        type=path_or_url,
        metavar="FILE",
        help="YAML filters file choosing the steps, their order and thresholds (default: FineWeb's)",
    )
    p.add_argument(
        "--languages",
        type=language_list,
        metavar="CODES",
        help=f"keep only documents in these languages, e.g. en,de (default: all): {LANGUAGES_HELP}",
    )
    add_field_options(p)
    add_executor_options(p)
    stage_command(p, _run, files=("filters",))


def _run(args: argparse.Namespace) -> int:
    steps = with_languages(read_filters(Path(args.filters) if args.filters else DEFAULT_FILTERS), args.languages)
    options = FilterOptions(tuple(steps), args.text_field, args.id_field)
    return run_stage_command(args, FilterStage(), options)
