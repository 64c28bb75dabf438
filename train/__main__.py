"""`python -m pretrainkit.train CONFIG.yaml [--set k=v ...] [--no-resume]`: one training process, as torchrun starts it.

torchrun --nnodes 2 --nproc_per_node 8 --rdzv-endpoint HOST:29500 -m pretrainkit.train run.yaml
"""

from __future__ import annotations

import argparse
import os

from pretrainkit.errors import UserError
from pretrainkit.progress import end_bars
from pretrainkit.train.cli import add_train_arguments
from pretrainkit.train.config import load_config
from pretrainkit.train.parallel.distributed import exit_process
from pretrainkit.train.torchrun import USER_ERROR, report_user_error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pretrainkit.train", description="One training process (under torchrun)."
    )
    add_train_arguments(parser)
    args = parser.parse_args(argv)
    if "TORCHELASTIC_RUN_ID" in os.environ:  # started by torchrun: stop if torchrun is killed
        from pretrainkit.processes import die_with_parent

        die_with_parent()
    try:
        from pretrainkit.train.loop.run import run_training

        return run_training(load_config(args.config, args.overrides), where=args.config, resume=not args.no_resume)
    except UserError as e:
        end_bars()
        report_user_error(str(e))
        return USER_ERROR
    except KeyboardInterrupt:  # Ctrl-C under a plain torchrun: torchrun reports it; no traceback per process
        end_bars()
        return 130


if __name__ == "__main__":
    exit_process(main())
