"""The `ptk` console: one argparse tree; each package registers its own subcommands.

Every handler is `func(args) -> int` (the exit status). A `UserError` anywhere below becomes one
line on stderr and exit status 2, never a traceback; a progress bar still on screen ends its line first.
A command whose parser sets `url_arguments` (the dataprep commands) takes URLs there: they are made
local paths around it, and its output published after it (`pretrainkit/remote/staging.py`).
SIGTERM stops a command as Ctrl-C does (`pretrainkit/sigterm.py`), with one line and status 143; a
command whose parser sets `resumes=True` (dedup, tokenize, prepare) says that the same command resumes.
A closed stdout (`| head`) ends the command quietly with status 141.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from typing import NoReturn

from pretrainkit import __version__
from pretrainkit.arguments import CommandParser
from pretrainkit.errors import UserError
from pretrainkit.progress import end_bars
from pretrainkit.remote.staging import local_arguments, shown
from pretrainkit.sigterm import SIGTERM_STATUS, Terminated, handling_sigterm

# Each folder's cli.py registers the commands it owns (`register(subparsers)`), in the order `ptk --help`
# lists them. Imported once the SIGTERM handler is in place: the imports take most of a second, and a
# SIGTERM then must still end the command in its one line.
COMMAND_MODULES = (
    "pretrainkit.dataprep.extract.cli",
    "pretrainkit.dataprep.dedup.cli",
    "pretrainkit.dataprep.decontaminate.cli",
    "pretrainkit.dataprep.filter.cli",
    "pretrainkit.dataprep.tokenize.cli",
    "pretrainkit.dataprep.prepare.cli",
    "pretrainkit.shards.cli",
    "pretrainkit.mixtures.cli",
    "pretrainkit.train.planning.cli",
    "pretrainkit.train.cli",
    "pretrainkit.train.reports.cli",
    "pretrainkit.train.checkpoint.cli",
    "pretrainkit.train.evaluation.cli",
    "pretrainkit.train.model.cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = CommandParser(prog="ptk", description="pretrainkit: data pipeline and pretraining toolkit")
    parser.add_argument("--version", action="version", version=f"pretrainkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMAND_MODULES:  # a SIGTERM meanwhile is raised between imports (pretrainkit.sigterm)
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argparse.Namespace(command=None)
    try:
        with handling_sigterm():
            args = build_parser().parse_args(argv)
            urls = getattr(args, "url_arguments", None)
            with local_arguments(args, urls) if urls else contextlib.nullcontext():
                return int(args.func(args) or 0)
    except UserError as e:
        end_bars()
        print(f"ptk: error: {shown(str(e))}", file=sys.stderr)
        return 2
    except Terminated:
        end_bars()
        if args.command is None:  # while the commands were being loaded: nothing was begun
            print("ptk: stopped by SIGTERM before the command began; the same command starts it", file=sys.stderr)
        else:
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


def console() -> NoReturn:
    """The `ptk` program: `main`, then an exit that a late SIGTERM does not turn into a silent death by
    signal (the command has done its work and said so; only the interpreter's teardown is left)."""
    status = main()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(status)


if __name__ == "__main__":
    console()
