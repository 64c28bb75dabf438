"""`ptk report RUN_DIR`: PNG figures and a text summary of a finished or running run.

ptk report runs/base
ptk report runs/base --compare runs/bigger -o report.png --x tokens
"""

from __future__ import annotations

import argparse
from pathlib import Path

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


def register(sub: argparse._SubParsersAction) -> None:
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
