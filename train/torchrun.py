"""`python -m pretrainkit.train.torchrun TORCHRUN-ARGS...`: torch's own launcher (`torch.distributed.run`),
quiet on failure.

    # what ptk train --nproc 2 runs:
    python -m pretrainkit.train.torchrun --standalone --nproc_per_node 2 -m pretrainkit.train run.yaml

torchrun answers a worker that exits non-zero with an error log line, a ChildFailedError traceback
and a failure table, and a SIGTERM with a warning and another traceback. Under `ptk train --nproc N`
the workers say what went wrong themselves (a UserError is one line and exit status 2; see
`train/__main__.py`), so this runs the same launcher with its loggers off and prints one line:
the first UserError a worker left in its torchelastic error file, or else the rank that failed
first and how. It exits with that worker's status (2 after a UserError), 128 + N after signal N.

SIGTERM (on Linux) is passed on to the workers, which stop together after a checkpoint and exit
with status 143 (`pretrainkit/sigterm.py`); this launcher then exits 143 too, printing nothing (`ptk
train` says how far the run got). torchrun itself would send the workers SIGTERM and SIGKILL them
--shutdown_timeout (30 s) later, whether or not their checkpoint is written; here the scheduler that
sent the SIGTERM decides how long they get. Any other signal torchrun handles (`ptk train` sends
SIGHUP on Ctrl-C) ends the workers at once, as before.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import time
from types import FrameType

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.run import parse_args, run

from pretrainkit.sigterm import SIGTERM_STATUS

USER_ERROR = 2  # a worker's exit status after a UserError
LAUNCHER_ENV = "PTK_TORCHRUN"  # set for the workers: this launcher prints their UserError, once


def prints_outcome() -> bool:
    """Whether this worker prints the run's one-line outcome: rank 0, unless this launcher (and `ptk
    train`) print it."""
    return os.environ.get(LAUNCHER_ENV) != "1" and os.environ.get("RANK", "0") == "0"


def report_user_error(message: str) -> None:
    """A worker's UserError: into its torchelastic error file for this launcher to print once (under
    plain torchrun it shows in torchrun's failure table), and on stderr from rank 0 elsewhere."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        with open(error_file, "w", encoding="utf-8") as f:
            json.dump({"message": message, "timestamp": int(time.time()), "ptk": "UserError"}, f)
    if prints_outcome():
        print(f"ptk: error: {message}", file=sys.stderr)


def _children() -> list[int]:
    """The pids of this process's children (the workers), from /proc."""
    pids = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            with contextlib.suppress(OSError):
                with open(f"/proc/{name}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == os.getpid():
                        pids.append(int(name))
    return pids


class _Relay:
    passed_on = False  # a SIGTERM went to the workers: another (Slurm's, ptk's) may find them gone


def _pass_sigterm_on(signum: int, frame: FrameType | None) -> None:
    """SIGTERM to the workers, which stop after a checkpoint; before any has started, torchrun's own
    shutdown."""
    workers = _children()
    for pid in workers:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    _Relay.passed_on |= bool(workers)
    if not _Relay.passed_on:
        raise SignalException(f"Process {os.getpid()} got signal: {signum}", sigval=signal.Signals(signum))


def handle_sigterm_here(args: argparse.Namespace) -> None:
    """Take SIGTERM out of the signals torchrun handles, and pass it on to the workers instead."""
    if not sys.platform.startswith("linux"):
        return
    handled = [name.strip() for name in args.signals_to_handle.split(",")]
    args.signals_to_handle = ",".join(name for name in handled if name != "SIGTERM")
    signal.signal(signal.SIGTERM, _pass_sigterm_on)


def first_user_error(failures: dict[int, ProcessFailure]) -> str | None:
    reported = [
        (f.timestamp, rank, f.message)
        for rank, f in failures.items()
        if f.exitcode == USER_ERROR and f.error_file_data.get("ptk") == "UserError"
    ]
    return min(reported)[2] if reported else None


def _quiet_loggers() -> None:
    for name in list(logging.root.manager.loggerDict):
        if name.startswith("torch.distributed"):
            logging.getLogger(name).setLevel(logging.CRITICAL)


def main(argv: list[str] | None = None) -> int:
    os.environ[LAUNCHER_ENV] = "1"
    args = parse_args(sys.argv[1:] if argv is None else argv)
    handle_sigterm_here(args)
    _quiet_loggers()
    try:
        run(args)
    except ChildFailedError as e:
        message = first_user_error(e.failures)
        if message is not None:
            print(f"ptk: error: {message}", file=sys.stderr)
            return USER_ERROR
        rank, failure = e.get_first_failure()
        if failure.exitcode == SIGTERM_STATUS:  # the workers stopped after SIGTERM; ptk train says where
            return SIGTERM_STATUS
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit status {failure.exitcode}"
        print(f"ptk train: process rank {rank} failed ({how}); its messages are above", file=sys.stderr)
        return failure.exitcode if failure.exitcode > 0 else 1
    except SignalException as e:
        return 128 + int(e.sigval)
    finally:  # the workers are gone: a SIGTERM now (Slurm's to every process, ptk's) changes nothing
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
