"""`ptk prepare INPUT... -o OUT`: dedup, tokenize and shard in one pipeline (OUT/dedup/, OUT/shards/).

ptk prepare corpus/*.jsonl -o prepared/ --tokenizer tokenizer.json --threshold 0.8 --workers 4
"""

from __future__ import annotations

import argparse
from pathlib import Path

from pretrainkit.dataprep.cli_options import add_executor_options, add_inputs_and_output, runner_from_args
from pretrainkit.dataprep.dedup.cli import add_dedup_options, dedup_options_from_args, format_summary
from pretrainkit.dataprep.prepare import owned_directories, run_prepare
from pretrainkit.dataprep.tokenize.cli import add_tokenize_options, print_tokenize_summary, tokenize_options
from pretrainkit.output_folders import PREPARE


def register(sub: argparse._SubParsersAction) -> None:
    prepare = sub.add_parser(
        "prepare",
        help="dedup + tokenize + shard in one pipeline",
        description="Deduplicate (as `ptk dedup`, into OUT/dedup/) and tokenize the kept documents (as `ptk "
        "tokenize`, into OUT/shards/). The shard manifest records the raw inputs and the dedup stats.",
    )
    add_inputs_and_output(prepare, "output directory (OUT/dedup/, OUT/shards/)")
    add_tokenize_options(prepare)
    add_dedup_options(prepare)
    add_executor_options(prepare)
    prepare.set_defaults(func=run_prepare_command, resumes=True)


def run_prepare_command(args: argparse.Namespace) -> int:
    out = Path(args.output)
    with runner_from_args(args, PREPARE, owned_directories(out)) as runner:
        stats, manifest = run_prepare(
            args.inputs, out, args.tokenizer, dedup_options_from_args(args), tokenize_options(args), runner=runner
        )
    print(format_summary(stats, out / "dedup"))
    print_tokenize_summary(manifest, out / "shards")
    return 0
