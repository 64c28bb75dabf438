"""`ptk prepare INPUT... -o OUT`: a pipeline file's stages (`--pipeline FILE`), or dedup then tokenize,
as one resumable job, each stage into its own folder under OUT, ended by the funnel.

ptk prepare crawl/ -o prepared/ --pipeline pipeline.yaml --workers 2
ptk prepare corpus/*.jsonl -o prepared/ --tokenizer tokenizer.json --threshold 0.8 --workers 4
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from pretrainkit.dataprep.cli_options import add_executor_options, add_inputs_and_output, path_or_url, runner_from_args
from pretrainkit.dataprep.dedup.arguments import add_dedup_options, dedup_options_from_args
from pretrainkit.dataprep.prepare.funnel import funnel_table
from pretrainkit.dataprep.prepare.pipeline_file import read_pipeline
from pretrainkit.dataprep.prepare.run import PICTURE_NAME, owned_directories, run_prepare
from pretrainkit.dataprep.prepare.stages import Stage
from pretrainkit.dataprep.readers import fetched_input_files
from pretrainkit.dataprep.summary import keep_rates, summary_table
from pretrainkit.dataprep.tokenize.arguments import add_tokenize_options, tokenize_options
from pretrainkit.dataprep.tokenize.corpus import Tokenize
from pretrainkit.errors import UserError
from pretrainkit.output_folders import PREPARE
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.stage_layout import STATS_NAME


def register(sub: argparse._SubParsersAction) -> None:
    prepare = sub.add_parser(
        "prepare",
        help="a pipeline (extract, filter, paragraphs, dedup, decontaminate, tokenize) as one job",
        description="Run the stages of a pipeline file (--pipeline FILE: extract, filter, paragraphs, dedup, "
        "decontaminate, tokenize; docs/prepare.md) or, without one, dedup then tokenize, each stage as its "
        "command would into OUT/<stage>/ (tokenize: OUT/shards/). Ends with the funnel (documents and bytes after "
        "each stage and filter step) printed, in OUT/stats.json and drawn in OUT/funnel.png with the language mix "
        "and document lengths before and after. The shard manifest records the raw inputs and every stage's stats.",
    )
    add_inputs_and_output(prepare, "output directory (a folder per stage, stats.json, funnel.png)")
    prepare.add_argument(
        "--pipeline", type=path_or_url, metavar="FILE", help="YAML pipeline file: the stages and their settings"
    )
    add_tokenize_options(prepare, required=False)
    add_dedup_options(prepare)
    add_executor_options(prepare)
    prepare.set_defaults(
        func=run_prepare_command,
        resumes=True,
        url_arguments=UrlArguments(
            inputs=("inputs",),
            select_inputs=fetched_input_files,
            files=("pipeline", "tokenizer", "against"),
            output="output",
        ),
    )


def stages_from_args(args: argparse.Namespace) -> list[Stage]:
    """The pipeline file's stages, or dedup then tokenize from the options."""
    if args.pipeline is None:
        if not args.tokenizer:
            raise UserError("--tokenizer is needed (or a --pipeline FILE whose tokenize stage names one)")
        return [
            Stage("dedup", dedup_options_from_args(args)),
            Stage("tokenize", Tokenize(args.tokenizer, tokenize_options(args))),
        ]
    given = [key for key, default in _stage_option_defaults().items() if getattr(args, key) != default]
    if given:
        raise UserError(
            f"--{given[0].replace('_', '-')}: with --pipeline, the stages' settings come from the pipeline file"
        )
    return read_pipeline(Path(args.pipeline), args.text_field, args.id_field)


def _stage_option_defaults() -> dict:
    """The dedup and tokenize options' defaults (the record fields describe the inputs: not theirs)."""
    probe = argparse.ArgumentParser(add_help=False)
    add_tokenize_options(probe, required=False)
    add_dedup_options(probe)
    defaults = vars(probe.parse_args([]))
    return {k: v for k, v in defaults.items() if k not in ("text_field", "id_field")}


def run_prepare_command(args: argparse.Namespace) -> int:
    began = time.monotonic()
    stages = stages_from_args(args)
    out = Path(args.output)
    with runner_from_args(args, PREPARE, owned_directories(out, stages)) as runner:
        result = run_prepare(args.inputs, out, stages, runner, args.text_field, args.id_field, report=print)
    tail = [*funnel_table(result["funnel"]), f"  stats {out / STATS_NAME}, picture {out / PICTURE_NAME}"]
    stages_row = ("stages", f"{', '.join(result['stages'])} (each in OUT/<stage>/, tokenize in OUT/shards/)")
    rows = [stages_row, ("took", f"{time.monotonic() - began:.1f} s")]
    found, kept = (result["profiles"].get(k, {}).get("languages") for k in ("input", "output"))
    if found and kept is not None:  # the pipeline's text as extracted, and as it leaves the last text stage
        rows.append(("kept by language", keep_rates(found, kept)))
    print(summary_table("prepare", out, rows, tail))
    return 0
