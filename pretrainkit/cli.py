"""The `ptk` console: one argparse tree; each package registers its own subcommands.

Every handler is `func(args) -> int` (the exit status). A `UserError` anywhere below becomes one
line on stderr and exit status 2, never a traceback; a progress bar still on screen ends its line first.
A command whose parser sets `url_arguments` (the dataprep commands) takes URLs there: they are made
local paths around it, and its output published after it (`pretrainkit/remote/staging.py`); one whose
parser sets `local_outputs` refuses a URL for those.
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
from pretrainkit.processes import quiet_imports
from pretrainkit.progress import end_bars
from pretrainkit.remote.staging import local_arguments, refuse_local_output_urls, shown
from pretrainkit.sigterm import SIGTERM_STATUS, Terminated, handling_sigterm

# Each folder's cli.py registers the commands it owns (`register(subparsers)`): the commands by name, in
# the order `ptk --help` lists them (a test checks this against what each module registers). Imported once
# the SIGTERM handler is in place: the imports take most of a second, and a SIGTERM then must still end
# the command in its one line.
COMMANDS = {
    "extract": "pretrainkit.dataprep.extract.cli",
    "dedup": "pretrainkit.dataprep.dedup.cli",
    "decontaminate": "pretrainkit.dataprep.decontaminate.cli",
    "filter": "pretrainkit.dataprep.filter.cli",
    "score": "pretrainkit.dataprep.quality.score_cli",
    "tokenizer": "pretrainkit.dataprep.tokenize.cli",
    "tokenize": "pretrainkit.dataprep.tokenize.cli",
    "prepare": "pretrainkit.dataprep.prepare.cli",
    "show": "pretrainkit.dataprep.show.cli",
    "classifier": "pretrainkit.dataprep.quality.cli",
    "split": "pretrainkit.dataprep.quality.split_cli",
    "shards": "pretrainkit.shards.cli",
    "mix": "pretrainkit.train.mix_search.cli",  # `mix inspect` is mixtures/cli.py's; `mix search` trains
    "plan": "pretrainkit.train.planning.cli",
    "scaling": "pretrainkit.train.planning.cli",
    "init": "pretrainkit.train.planning.cli",
    "train": "pretrainkit.train.cli",
    "report": "pretrainkit.train.reports.cli",
    "trace": "pretrainkit.train.reports.cli",
    "export": "pretrainkit.train.checkpoint.cli",
    "eval": "pretrainkit.train.evaluation.cli",
    "generate": "pretrainkit.train.generation.cli",
}
COMMAND_MODULES = tuple(dict.fromkeys(COMMANDS.values()))


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The parser of `argv` (sys.argv[1:] when None): where its first argument names a command, only
    that command's module is imported (`ptk shards verify` loads neither numba nor tokenizers, and
    `ptk filter` starts ~0.15 s sooner); otherwise every module's, for `ptk --help` and for the error
    that lists the commands."""
    argv = sys.argv[1:] if argv is None else argv
    parser = CommandParser(prog="ptk", description="pretrainkit: data pipeline and pretraining toolkit")
    parser.add_argument("--version", action="version", version=f"pretrainkit {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    modules = [COMMANDS[argv[0]]] if argv and argv[0] in COMMANDS else COMMAND_MODULES
    for name in modules:  # a SIGTERM meanwhile is raised between imports (pretrainkit.sigterm)
        importlib.import_module(name).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = argparse.Namespace(command=None)
    try:
        with handling_sigterm():
            args = build_parser(argv).parse_args(argv)
            urls = getattr(args, "url_arguments", None)
            refuse_local_output_urls(args, getattr(args, "local_outputs", ()))
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
    signal (the command has done its work and said so; only the interpreter's teardown is left). A
    dataprep command's imports are kept from starting threads, so that it forks its workers."""
    if len(sys.argv) > 1 and COMMANDS.get(sys.argv[1], "").startswith("pretrainkit.dataprep."):
        quiet_imports()
    status = main()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    sys.exit(status)


if __name__ == "__main__":
    console()
