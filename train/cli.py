"""`ptk train`: train from a YAML config on one process, or launch `torchrun` for `--nproc N`.

    ptk train run.yaml --set optim.lr=1e-3 --set parallel=fsdp --nproc 2

The config is validated here, before any process starts, so a bad key fails in one line. With
`--nproc N > 1` this runs
`python -m pretrainkit.train.torchrun --standalone --nproc_per_node N -m pretrainkit.train ...`
(torchrun, with its failure reports cut to one line); on a cluster users run `torchrun ... -m pretrainkit.train
CONFIG.yaml` themselves. Ctrl-C stops every process and says how many steps a resume will redo
(exit status 130). SIGTERM, passed on to every process, stops them all after the same step and its
checkpoint (`train/loop/training_loop.py`), says so in one line and exits with status 143.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
import signal
import subprocess
import sys

from pretrainkit.arguments import int_in
from pretrainkit.errors import UserError
from pretrainkit.progress import end_bars
from pretrainkit.sigterm import SIGTERM_STATUS, Terminated
from pretrainkit.train.config import TrainConfig, load_config
from pretrainkit.train.rundir.run_dir import RunDir

STOPPED_BY_SIGTERM = "stopped by SIGTERM"
# What ptk sends torchrun on Ctrl-C: torchrun passes it on to the workers, which it ends at once (SIGTERM
# would have them finish the step and checkpoint first, train/torchrun.py).
STOP_NOW = signal.SIGHUP


def add_train_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", help="training config YAML")
    p.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY.PATH=VALUE",
        help="override a config key, e.g. --set optim.lr=1e-3 (repeatable)",
    )
    p.add_argument("--no-resume", action="store_true", help="start over even if run_dir holds checkpoints")


def torchrun_command(args: argparse.Namespace) -> list[str]:
    cmd = [
        sys.executable,
        "-m",
        "pretrainkit.train.torchrun",
        "--standalone",
        f"--nproc_per_node={args.nproc}",
        "-m",
        "pretrainkit.train",
        args.config,
    ]
    for item in args.overrides:
        cmd += ["--set", item]
    return cmd + (["--no-resume"] if args.no_resume else [])


def launch_env(nproc: int) -> dict[str, str]:
    """The environment for torchrun: OMP_NUM_THREADS set here (the cores shared out over the processes)
    unless the user set it, so torchrun does not print its banner about defaulting it to 1."""
    env = dict(os.environ)
    if "OMP_NUM_THREADS" not in env:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        env["OMP_NUM_THREADS"] = str(max(1, cores // nproc))
    return env


def precheck(cfg: TrainConfig, where: str, nproc: int) -> None:
    """What torchrun's children would fail on, checked once here before any process starts: the
    run directory, the mixture file, and the layout over processes of model and batch."""
    from pretrainkit.mixtures import load_mixture
    from pretrainkit.train.model.resolve import model_config
    from pretrainkit.train.parallel.mesh import check_layout

    RunDir(cfg.run_dir).check(where)
    mix = load_mixture(cfg.data.mixture, verify=False, shard_cache=cfg.data.cache.shard_cache())
    check_layout(cfg, model_config(cfg, mix.tokenizer.vocab_size, where), nproc, where)


def launch(args: argparse.Namespace) -> int:
    """torchrun in a session of its own, so that Ctrl-C reaches ptk alone: ptk then stops torchrun with
    STOP_NOW (it stops its workers) and says how far the run got, instead of every process printing
    its KeyboardInterrupt traceback and torchrun its warnings. A SIGTERM to ptk goes on to torchrun,
    and from it to the workers; ptk waits for them to checkpoint and end."""
    from pretrainkit.processes import die_with_parent

    # torchrun dies with ptk, and its workers with it (train/__main__.py asks the same).
    proc = subprocess.Popen(
        torchrun_command(args),
        preexec_fn=functools.partial(die_with_parent, os.getpid()),
        env=launch_env(args.nproc),
        start_new_session=True,
    )
    try:
        return proc.wait()
    except Terminated:
        proc.send_signal(signal.SIGTERM)
        return proc.wait()  # SIGTERM_STATUS, or how the run ended if it ended first
    except KeyboardInterrupt:
        proc.send_signal(STOP_NOW)
        proc.wait()
        raise


def cmd_train(args: argparse.Namespace) -> int:
    from pretrainkit.train.rundir.mirror import fetched_model

    cfg = load_config(args.config, args.overrides)
    cfg = dataclasses.replace(cfg, init_from=fetched_model(cfg.init_from))  # fetched once, before any process starts
    if args.nproc < 1:
        raise UserError(f"--nproc must be >= 1, got {args.nproc}")
    try:
        if args.nproc == 1:
            from pretrainkit.train.loop.run import run_training  # torch and the data stack load only when training

            status = run_training(cfg, where=args.config, resume=not args.no_resume)
        else:
            precheck(cfg, args.config, args.nproc)
            # The launcher has printed the one line a failure needs (train/torchrun.py).
            status = launch(args)
    except Terminated:
        status = SIGTERM_STATUS
    except KeyboardInterrupt:
        end_bars()
        if sys.stderr.isatty():
            print(file=sys.stderr)  # off the line of the ^C and of a worker's progress bar
        print(RunDir(cfg.run_dir).interrupted_message(), file=sys.stderr)
        return 130
    if status == SIGTERM_STATUS:  # every process stopped after the same checkpointed step
        end_bars()
        print(RunDir(cfg.run_dir).interrupted_message(STOPPED_BY_SIGTERM), file=sys.stderr)
    return status


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "train",
        help="train a model on a mixture (DDP / ZeRO / FSDP2 / HSDP, tensor and pipeline parallel; CPU or GPU)",
        description="Train from a YAML config on one process, or launch torchrun for --nproc N > 1; "
        "resumes from RUN_DIR/checkpoints unless --no-resume.",
    )
    add_train_arguments(p)
    p.add_argument(
        "--nproc", type=int_in(1, 1024), default=1, help="processes on this machine (launches torchrun when > 1)"
    )
    p.set_defaults(func=cmd_train)
