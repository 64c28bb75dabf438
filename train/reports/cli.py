"""`ptk report RUN_DIR`: PNG figures and a text summary of a finished or running run; `ptk trace RUN_DIR
--step N`: the documents of a step's global batch (`trace.py`).

ptk report runs/base
ptk report runs/base --compare runs/bigger -o report.png --x tokens
ptk trace runs/base --step 120 [--json] [--tokens]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pretrainkit.arguments import int_in
from pretrainkit.errors import UserError
from pretrainkit.files import output_file, write_text_atomic, writing_into
from pretrainkit.remote.staging import UrlArguments, shown
from pretrainkit.remote.urls import is_url
from pretrainkit.train.rundir.run_files import run_logs_read


def run_report(args: argparse.Namespace) -> int:
    # Imported here: matplotlib would otherwise slow every `ptk` command's start.
    from pretrainkit.train.reports.report import draw_report, summary_text
    from pretrainkit.train.reports.run_log import read_run
    from pretrainkit.train.rundir.names import METRICS_FILE

    if args.output is None and is_url(shown(args.run_dir)):  # its local copy goes when the command ends
        raise UserError(f"{shown(args.run_dir)}: a run in a bucket is reported into a local file: give -o REPORT.png")
    output = Path(args.output) if args.output else Path(args.run_dir) / "report.png"
    if output.suffix.lower() != ".png":  # PNG bytes under another name would mislead every viewer
        raise UserError(f"-o {output}: ptk report writes PNG; name the file .png")
    runs = [read_run(d) for d in [args.run_dir, *(args.compare or [])]]
    for run in runs:
        if not run.steps:  # six blank panels are no report
            raise UserError(f"{run.path / METRICS_FILE}: no training steps logged; nothing to report")
    output_file(output)
    summary = output.with_suffix(".txt")
    with writing_into(output.parent):  # a full disk is one line naming the file
        panels = draw_report(runs, output, axis=args.x)
        text = shown("".join(summary_text(r) for r in runs))  # a run read from a bucket by its URL
        write_text_atomic(summary, text)
    print(text, end="")
    print(f"wrote {output} ({len(panels)} panels: {', '.join(panels)}) and {summary}")
    return 0


def run_trace(args: argparse.Namespace) -> int:
    from pretrainkit.train.reports.trace import format_trace, trace_step

    trace = trace_step(args.run_dir, args.step, tokens=args.tokens)
    text = json.dumps(trace) if args.json else format_trace(trace)
    sys.stdout.write(text + "\n")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    t = sub.add_parser(
        "trace",
        help="the documents of a training step's global batch",
        description="Every window of step N's global batch, in global order, and in each its pieces of documents: "
        "source, shard, document index, id, input file and line, token offsets; with the batch's sha256, which "
        "metrics.jsonl logs for the step. Computed from the data order alone, for a finished or running run.",
    )
    t.add_argument("run_dir", metavar="RUN_DIR")
    t.add_argument(
        "--step",
        type=int_in(1, 1 << 62),
        required=True,
        metavar="N",
        help="the training step (at most the run's max_steps)",
    )
    t.add_argument("--json", action="store_true", help="one JSON object instead of tables")
    t.add_argument("--tokens", action="store_true", help="add each window's seq_len + 1 token ids")
    t.set_defaults(func=run_trace, url_arguments=UrlArguments(selected=(("run_dir", run_logs_read),)))

    r = sub.add_parser(
        "report",
        help="PNG figures and a text summary of a run",
        description="Training loss, per-source validation loss, learning rate, grad norm, tokens/s "
        "and MFU, spike events marked; writes OUTPUT (.png) and OUTPUT with .txt.",
    )
    r.add_argument("run_dir", metavar="RUN_DIR")
    r.add_argument("--compare", nargs="+", metavar="RUN_DIR", help="runs to overlay")
    r.add_argument("-o", "--output", help="PNG path (default RUN_DIR/report.png)")
    r.add_argument(
        "--x",
        choices=("step", "tokens"),
        default="step",
        help="x axis: steps or tokens trained on; a continued run starts where its base stopped (default step)",
    )
    r.set_defaults(
        func=run_report,
        url_arguments=UrlArguments(selected=(("run_dir", run_logs_read), ("compare", run_logs_read))),
        local_outputs=("output",),
    )
