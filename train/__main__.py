"""`python -m pretrainkit.train CONFIG.yaml [--set k=v ...] [--no-resume]`: one training process, as torchrun starts it.

torchrun --nnodes 2 --nproc_per_node 8 --rdzv-endpoint HOST:29500 -m pretrainkit.train run.yaml

SIGTERM (Slurm signals every process of a job; torchrun passes its own on) stops every process after
the same step and its checkpoint, rank 0 says so in one line, and each exits with status 143. Under
a plain torchrun that checkpoint must be written within torchrun's --shutdown_timeout (30 s by
default): torchrun then SIGKILLs its workers.
"""

from __future__ import annotations

import argparse
import os
import sys

from pretrainkit.errors import UserError
from pretrainkit.progress import end_bars
from pretrainkit.remote.staging import shown
from pretrainkit.sigterm import SIGTERM_STATUS, Terminated, handling_sigterm
from pretrainkit.train.cli import STOPPED_BY_SIGTERM, add_train_arguments
from pretrainkit.train.config import TrainConfig, load_config
from pretrainkit.train.parallel.distributed import exit_process
from pretrainkit.train.rundir.run_dir import RunDir
from pretrainkit.train.torchrun import USER_ERROR, prints_outcome, report_user_error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pretrainkit.train", description="One training process (under torchrun)."
    )
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun: stop if torchrun is killed
        from pretrainkit.processes import die_with_parent

        die_with_parent()
    cfg: TrainConfig | None = None
    try:
        from pretrainkit.train.loop.run import run_training

        with handling_sigterm():
            cfg = load_config(args.config, args.overrides)
            return run_training(cfg, where=args.config, resume=not args.no_resume)
    except UserError as e:
        end_bars()
        report_user_error(shown(str(e)))
        return USER_ERROR
    except Terminated:
        end_bars()
        if prints_outcome():
            stopped = (
                RunDir(cfg.run_dir).interrupted_message(STOPPED_BY_SIGTERM) if cfg else "ptk train: stopped by SIGTERM"
            )
            print(stopped, file=sys.stderr)
        return SIGTERM_STATUS
    except KeyboardInterrupt:  # Ctrl-C under a plain torchrun: torchrun reports it; no traceback per process
        end_bars()
        return 130


if __name__ == "__main__":
    exit_process(main())
