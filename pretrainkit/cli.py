"""The `ptk` console: one argparse tree; each package registers its own subcommands.

Every handler is `func(args) -> int` (the exit status). A `UserError` anywhere below becomes one
line on stderr and exit status 2, never a traceback; a progress bar still on screen ends its line first.
SIGTERM stops a command as Ctrl-C does (`pretrainkit/sigterm.py`), with one line and status 143; a
command whose parser sets `resumes=True` (dedup, tokenize, prepare) says that the same command resumes.
A closed stdout (`| head`) ends the command quietly with status 141.
"""

from __future__ import annotations

import argparse
import os
import sys

from pretrainkit import __version__
from pretrainkit.arguments import CommandParser
from pretrainkit.dataprep import cli as dataprep_cli
from pretrainkit.dataprep.dedup import cli as dedup_cli
from pretrainkit.dataprep.tokenize import cli as tokenize_cli
from pretrainkit.errors import UserError
from pretrainkit.mixtures import cli as mixtures_cli
from pretrainkit.progress import end_bars
from pretrainkit.shards import cli as shards_cli
from pretrainkit.sigterm import SIGTERM_STATUS, Terminated, handling_sigterm
from pretrainkit.train import cli as train_cli
from pretrainkit.train.checkpoint import cli as checkpoint_cli
from pretrainkit.train.evaluation import cli as evaluation_cli
from pretrainkit.train.model import cli as model_cli
from pretrainkit.train.planning import cli as planning_cli
from pretrainkit.train.reports import cli as reports_cli

# Each folder's cli.py registers the commands it owns (`register(subparsers)`), in the order `ptk --help` lists them.
COMMAND_MODULES = (
    dedup_cli,
    tokenize_cli,
    dataprep_cli,
    shards_cli,
    mixtures_cli,
    planning_cli,
    train_cli,
    reports_cli,
    checkpoint_cli,
    evaluation_cli,
    model_cli,
)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="ptk", description="pretrainkit: data pipeline and pretraining toolkit")
    parser.add_argument("--version", action="version", version=f"pretrainkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in COMMAND_MODULES:
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        with handling_sigterm():
            return int(args.func(args) or 0)
    except UserError as e:
        end_bars()
        print(f"ptk: error: {e}", file=sys.stderr)
        return 2
    except Terminated:
        end_bars()
        resumes = "; the same command resumes" if getattr(args, "resumes", False) else ""
        print(f"ptk {args.command}: stopped by SIGTERM{resumes}", file=sys.stderr)
        return SIGTERM_STATUS
    except KeyboardInterrupt:
        end_bars()
        print("ptk: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader of stdout has gone (`ptk plan ... | head`): stop quietly, as other command-line
        # tools do, and keep the interpreter's final flush from raising again.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    except BaseException:
        end_bars()  # a traceback, too, starts on a line of its own
        raise


if __name__ == "__main__":
    sys.exit(main())
