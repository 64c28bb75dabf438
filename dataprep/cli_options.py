"""The options every command over raw corpora shares (`ptk dedup`, `tokenize`, `tokenizer train`,
`prepare`, `eval --text`): INPUT... and -o OUT, the record fields, and where the jobs run."""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pretrainkit.arguments import count_in
from pretrainkit.dataprep.executors import EXECUTORS, JobRunner, open_runner
from pretrainkit.dataprep.readers import fetched_input_files, refuse_overlap
from pretrainkit.dataprep.stage import Stage, run_stage
from pretrainkit.files import writing_into
from pretrainkit.output_folders import Kind, output_folder
from pretrainkit.remote.staging import WORK_DIR_ENV, UrlArguments
from pretrainkit.remote.urls import is_url


def add_inputs_and_output(p: argparse.ArgumentParser, output_help: str) -> None:
    """INPUT... and -o OUT, as every command over raw corpora takes them."""
    p.add_argument(
        "inputs",
        nargs="+",
        metavar="INPUT",
        help=".jsonl, .jsonl.gz, .jsonl.zst, .parquet, .txt files or directories, local or URLs (s3://, gs://, az://, hf://)",
    )
    p.add_argument("-o", "--output", required=True, type=path_or_url, metavar="OUT", help=output_help)


def path_or_url(given: str) -> str | Path:
    """A path option as given: a URL stays one (`pretrainkit.remote.staging` makes it local), a local
    path is a Path."""
    return given if is_url(given) else Path(given)


def add_field_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--text-field", default="text", help="JSON/Parquet field holding the text (default %(default)s)")
    p.add_argument("--id-field", default="id", help="JSON/Parquet field holding the document id (default %(default)s)")


def stage_command(p: argparse.ArgumentParser, run: Any, files: tuple[str, ...] = ()) -> None:
    """A command that runs a stage into OUT: `run(args)` runs it, the same command resumes it, and its
    INPUTs, OUT and the options named in `files` (a file or folder read whole) may be URLs."""
    p.set_defaults(
        func=run,
        resumes=True,
        url_arguments=UrlArguments(inputs=("inputs",), select_inputs=fetched_input_files, files=files, output="output"),
    )


WORKERS = count_in(1, 4096)  # a local run starts this many processes


def add_executor_options(p: argparse.ArgumentParser) -> None:
    """Where the jobs run: --workers, --executor, --ray-address, and the local --work-dir (the output
    depends on none of them)."""
    p.add_argument(
        "--workers",
        type=WORKERS,
        default=None,
        help=(
            "jobs at a time (default: all cores; with --executor ray, all CPUs of the cluster); "
            "the output does not depend on it"
        ),
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local: worker processes on this machine (default); ray: one Ray task per job, on a Ray cluster",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help=(
            "Ray cluster to run on, e.g. auto or HOST:6379 "
            "(default: $RAY_ADDRESS, else a local Ray instance for the run)"
        ),
    )
    p.add_argument(
        "--work-dir",
        metavar="DIR",
        help="local folder for URL inputs fetched and a URL output staged before it is published "
        f"(default: ${WORK_DIR_ENV}, else pretrainkit-work in the system's temporary folder)",
    )


@contextlib.contextmanager
def runner_from_args(
    args: argparse.Namespace, kind: Kind, owned: tuple[list[Path], list[Path]] = ([], [])
) -> Iterator[JobRunner]:
    """The runner the options ask for, entered, with OUT held as `kind`'s output folder
    (`pretrainkit.output_folders`) first: a run refused there has touched nothing, not even another
    run's temporaries. A failed run's temporaries in the `owned` (directories, trees) under OUT are
    swept after the runner's workers have stopped, so that none is left behind by a worker still writing."""
    refuse_overlap(args.inputs, args.output)  # said as such, before OUT is made or found to hold the inputs' files
    with (
        output_folder(args.output, kind),
        writing_into(args.output, *owned),
        open_runner(args.executor, args.workers, args.ray_address) as runner,
    ):
        yield runner


def run_stage_command(args: argparse.Namespace, stage: Stage, options: Any) -> int:
    """A stage's command: `stage` with `options` over INPUT... into OUT on the runner the options ask
    for (`runner_from_args`, OUT held as the stage's output), then its summary printed."""
    began = time.monotonic()
    stage.validate(options)  # before OUT is touched
    with runner_from_args(args, stage.kind, stage.owned(args.output)) as runner:
        result = run_stage(stage, args.inputs, args.output, options, runner)
    print(stage.summary(result, Path(args.output), time.monotonic() - began))
    return 0
