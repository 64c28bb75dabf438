"""One training run from a validated config: what every process runs, alone or under torchrun.

    run_training(load_config("run.yaml"), where="run.yaml", resume=True)

Sets up the process group, takes the run directory (a `RunDir`: rank 0 holds its lock for the run, so a
second run on it is refused), the mixture loader for this rank and the Trainer,
writes the resolved config to `RUN_DIR/config.yaml`, resumes from the newest valid checkpoint (unless `resume=False`)
or, in a fresh run, loads `init_from`'s weights (`train/checkpoint/init_from.py`), runs `TrainingLoop` to
`max_steps` and prints the summary on rank 0 (or raises Terminated, after a SIGTERM stopped the loop).
Every process ends with a barrier and then `end_process_groups()` (destroyed in one process; left to
the process's end under a launcher). A run_dir URL is trained in its local mirror, pulled from the
bucket before the run and pushed to it after each checkpoint and at the end, on one node or several
(`train/rundir/mirror.py`); messages name the URL.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys

import torch
import torch.distributed as dist
import yaml

from pretrainkit.errors import UserError, os_error
from pretrainkit.files import write_text_atomic
from pretrainkit.mixtures import Mixture, MixtureSampler, TrainLoader, load_mixture
from pretrainkit.remote.staging import show_as, showing_urls
from pretrainkit.sigterm import Terminated
from pretrainkit.train.checkpoint.checkpoints import loader_state_of
from pretrainkit.train.checkpoint.init_from import initialize_from
from pretrainkit.train.config import TrainConfig
from pretrainkit.train.evaluation.tasks import TaskSuite
from pretrainkit.train.loop.trainer import Trainer
from pretrainkit.train.loop.training_loop import BatchTransform, TrainingLoop, format_summary
from pretrainkit.train.model.resolve import model_config
from pretrainkit.train.parallel.agree import AgreedError, together
from pretrainkit.train.parallel.distributed import DistEnv, end_process_groups, init_distributed, shutdown
from pretrainkit.train.rundir.mirror import fetched_model
from pretrainkit.train.rundir.run_dir import RunDir


def run_training(cfg: TrainConfig, where: str, resume: bool = True, transform: BatchTransform | None = None) -> int:
    cfg = dataclasses.replace(cfg, init_from=fetched_model(cfg.init_from))  # under torchrun, in each process
    run = RunDir(cfg.run_dir)
    if run.url is not None:
        show_as(run.local, run.url)
    env = init_distributed(cfg.device)
    with contextlib.ExitStack() as held, showing_urls():  # rank 0's hold on the run directory, until the run ends
        return _run(cfg, run, where, resume, transform, env, held)


def _run(
    cfg: TrainConfig,
    run: RunDir,
    where: str,
    resume: bool,
    transform: BatchTransform | None,
    env: DistEnv,
    held: contextlib.ExitStack,
) -> int:
    local = run.local
    try:
        if run.url is not None:  # the bucket's marker first: a prefix of another command's output is refused
            together(run.prepare_mirror, local, main_only=True)
        # before anything is written there; a refusal (in use, another command's output) stops every process
        together(lambda: held.enter_context(run.holding(where, env.is_main)), local)
        if run.url is not None and resume:  # into each node's mirror
            together(lambda: run.pull() if env.local_rank == 0 else None, local)
        mix = load_verified_mixture(cfg, env.is_main).with_replays(loader_state_of)
        sampler = MixtureSampler(mix, seq_len=cfg.data.seq_len, global_batch_size=cfg.batch.global_size)
        limit = sampler.limit_batch()
        if limit is not None and limit < cfg.max_steps:
            sampler.check_batch(limit)  # raises, naming the source that runs out before max_steps
        trainer = Trainer(
            cfg, model_config(cfg, mix.tokenizer.vocab_size, where), env, where, eos_id=mix.tokenizer.eos_id
        )
        # Every process of a data-parallel group (tensor-parallel peers, pipeline stages) reads its rows.
        loader = TrainLoader(
            sampler,
            rank=trainer.mesh.dp_rank,
            world_size=trainer.mesh.dp_size,
            micro_size=cfg.batch.micro_size,
            num_workers=0,
            pin_memory=env.device.type == "cuda",
        )
        tasks = TaskSuite.load(cfg, mix.tokenizer)  # every process tokenizes the items: each needs its share
        loop = TrainingLoop(cfg, run, trainer, loader, mix, env, validation_rows(cfg, sampler), transform, tasks)
        if (loop.resume() if resume else loop.start_over()) is None and cfg.init_from is not None:
            initialize_from(
                cfg, run, trainer.model_cfg, trainer.model, trainer.optimizer, mix.tokenizer, where, env.is_main
            )
        if env.is_main:
            write_text_atomic(run.config_file, yaml.safe_dump(loop.config, sort_keys=False))
        summary = loop.run() if trainer.step < cfg.max_steps else None
        if run.url is not None:  # the logs since the last checkpoint, and the run's end
            together(run.push, local, main_only=True)
    except AgreedError:
        shutdown()  # every process raised it together, so all of them reach the barrier
        raise
    except BaseException as e:
        # No barrier: the other processes may be stuck in a collective this one will never join.
        end_process_groups()
        if isinstance(e, OSError):  # a log the disk cannot take, a directory made read-only mid-run
            raise os_error(e) from None
        raise
    shutdown()
    if summary is not None and summary.stopped:  # by SIGTERM, every process after the same checkpointed step
        raise Terminated
    if env.is_main:
        done = f"ptk train: {run.local} already reached max_steps={cfg.max_steps}; nothing to do"
        print(done if summary is None else format_summary(cfg, run, summary), file=sys.stderr)
    return 0


def load_verified_mixture(cfg: TrainConfig, is_main: bool) -> Mixture:
    """Rank 0 hashes every shard and shares its verdict: the other processes read the same files,
    so hashing them once per process would multiply the start-up time, and a bad shard still stops
    every process with the same one-line error (not a broken-connection traceback)."""
    try:
        mix = load_mixture(
            cfg.data.mixture, cfg.data.allow_mixture_change, verify=is_main, shard_cache=cfg.data.cache.shard_cache()
        )
        problem = None
    except UserError as e:
        mix, problem = None, str(e)
    verdict = [problem]
    dist.broadcast_object_list(verdict, src=0)
    if verdict[0]:
        raise AgreedError(verdict[0])
    if problem:
        raise UserError(problem)
    return mix


def validation_rows(cfg: TrainConfig, sampler: MixtureSampler) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per source, the first `eval.batches` global batches of held-out rows (fewer when the split is shorter):
    the same on every process and every world size."""
    if not cfg.eval.every:
        return {}
    out = {}
    for source in sampler.mix.sources:
        batches = sampler.validation_batches(source.name, cfg.batch.global_size, cfg.eval.batches)
        out[source.name] = (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    return out
