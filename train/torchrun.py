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
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time

from torch.distributed.elastic.multiprocessing.api import SignalException
from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure
from torch.distributed.run import parse_args, run

USER_ERROR = 2  # a worker's exit status after a UserError
LAUNCHER_ENV = "PTK_TORCHRUN"  # set for the workers: this launcher prints their UserError, once


def report_user_error(message: str) -> None:
    """A worker's UserError: into its torchelastic error file for this launcher to print once (under
    plain torchrun it shows in torchrun's failure table), and on stderr from rank 0 elsewhere."""
    error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
    if error_file:
        with open(error_file, "w", encoding="utf-8") as f:
            json.dump({"message": message, "timestamp": int(time.time()), "ptk": "UserError"}, f)
    if os.environ.get(LAUNCHER_ENV) != "1" and os.environ.get("RANK", "0") == "0":
        print(f"ptk: error: {message}", file=sys.stderr)


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
    _quiet_loggers()
    try:
        run(args)
    except ChildFailedError as e:
        message = first_user_error(e.failures)
        if message is not None:
            print(f"ptk: error: {message}", file=sys.stderr)
            return USER_ERROR
        rank, failure = e.get_first_failure()
        how = f"signal {failure.signal_name()}" if failure.exitcode < 0 else f"exit status {failure.exitcode}"
        print(f"ptk train: process rank {rank} failed ({how}); its messages are above", file=sys.stderr)
        return failure.exitcode if failure.exitcode > 0 else 1
    except SignalException as e:
        return 128 + int(e.sigval)
    return 0


if __name__ == "__main__":
    sys.exit(main())
