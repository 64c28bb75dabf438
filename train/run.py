"""One training run from a validated config: the entry point every process runs (alone or under torchrun).

    run_training(load_config("run.yaml"), where="run.yaml", resume=True)

Builds the mixture loader for this rank, the Trainer, resumes from the newest valid checkpoint in
`RUN_DIR/checkpoints/` (unless `resume=False`), then trains to `max_steps`: step k consumes exactly
global batch k-1 of the mixture, logs a row to `RUN_DIR/metrics.jsonl`, evaluates every `eval.every`
steps and checkpoints every `checkpoint.every` steps and at the end. Rank 0 writes the files, shows
the progress bar and prints the summary.
"""

from __future__ import annotations

import math
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
import yaml
from tqdm import tqdm

from mixtures import MixtureSampler, TrainLoader, load_mixture
from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from train.checkpoint import Checkpoint, Checkpoints
from train.config import TrainConfig, to_dict
from train.distributed import DistEnv, init_distributed, shutdown
from train.metrics import MetricsLog, device_peak_flops
from train.trainer import Trainer, model_config

CONFIG_FILE = "config.yaml"


@dataclass
class RunSummary:
    first_step: int
    last_step: int
    first_loss: float
    last_loss: float
    tokens_per_s: float
    seconds: float
    val_loss: dict[str, float]


def run_training(cfg: TrainConfig, where: str, resume: bool = True) -> int:
    env = init_distributed(cfg.device)
    try:
        summary = _train(cfg, where, resume, env)
    except BaseException:
        # No barrier here: the other processes may be stuck in a collective this one will never join.
        dist.destroy_process_group()
        raise
    shutdown()
    if env.is_main and summary is not None:
        print(format_summary(cfg, summary), file=sys.stderr)
    return 0


def _check_batch_shape(cfg: TrainConfig, where: str, world_size: int) -> int:
    per_pass = cfg.batch.micro_size * world_size
    if cfg.batch.global_size % per_pass:
        raise UserError(
            f"{where}: batch.global_size: {cfg.batch.global_size} is not a multiple of batch.micro_size x processes "
            f"({cfg.batch.micro_size} x {world_size})"
        )
    return cfg.batch.global_size // per_pass


def _validation_rows(cfg: TrainConfig, sampler: MixtureSampler) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Per source, all held-out rows (the same on every process and every world size)."""
    if not cfg.eval.every:
        return {}
    out = {}
    for source in sampler.mix.sources:
        batches = sampler.validation_batches(source.name, cfg.batch.global_size, cfg.eval.batches)
        out[source.name] = (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
    return out


def _choose_checkpoint(ckpts: Checkpoints, env: DistEnv) -> Checkpoint | None:
    """Rank 0 verifies (hashing every file once) and tells the others which checkpoint to load."""
    box = [ckpts.latest_valid() if env.is_main else None]
    if env.world_size > 1:
        dist.broadcast_object_list(box, src=0)
    return box[0]


def _train(cfg: TrainConfig, where: str, resume: bool, env: DistEnv) -> RunSummary | None:
    accum = _check_batch_shape(cfg, where, env.world_size)
    mix = load_mixture(cfg.data.mixture)
    sampler = MixtureSampler(mix, seq_len=cfg.data.seq_len, global_batch_size=cfg.batch.global_size)
    limit = sampler.limit_batch()
    if limit is not None and limit < cfg.max_steps:
        sampler.check_batch(limit)  # raises, naming the source that runs out
    loader = TrainLoader(sampler, rank=env.rank, world_size=env.world_size, micro_size=cfg.batch.micro_size,
                         num_workers=0, pin_memory=env.device.type == "cuda")  # fmt: skip
    trainer = Trainer(cfg, model_config(cfg, mix.vocab_size, where), env)
    run_dir = Path(cfg.run_dir)
    ckpts = Checkpoints(run_dir / "checkpoints", cfg.checkpoint.keep)
    if env.is_main:
        ckpts.remove_temporaries()
    found = _choose_checkpoint(ckpts, env) if resume else None
    if found is not None:
        if found.meta["extra"].get("mixture") != mix.fingerprint:
            raise UserError(
                f"{found.path}: saved for another mixture (fingerprint {str(found.meta['extra'].get('mixture'))[:12]}, "
                f"now {mix.fingerprint[:12]}); use a new run_dir or --no-resume"
            )
        ckpts.restore(trainer, found)
        loader.load_state_dict(found.meta["extra"]["loader"])
        if env.is_main:
            print(f"ptk train: resuming from {found.path} (step {found.step})", file=sys.stderr)
    config = to_dict(cfg)
    metrics = None
    if env.is_main:
        write_text_atomic(run_dir / CONFIG_FILE, yaml.safe_dump(config, sort_keys=False))
        metrics = MetricsLog(run_dir, keep_through_step=trainer.step)
    if trainer.step >= cfg.max_steps:
        if env.is_main:
            print(f"ptk train: {run_dir} already reached max_steps={cfg.max_steps}; nothing to do", file=sys.stderr)
        return None

    val_rows = _validation_rows(cfg, sampler)
    peak = device_peak_flops(env.device, cfg.precision)
    flops_per_token = trainer.model_cfg.flops_per_token(cfg.data.seq_len)
    first_step, first_loss, loss, val = trainer.step + 1, math.nan, math.nan, {}
    batches = iter(loader)
    bar = tqdm(total=cfg.max_steps, initial=trainer.step, unit="step", disable=not env.is_main, dynamic_ncols=True)
    start = time.perf_counter()
    while trainer.step < cfg.max_steps:
        t0 = time.perf_counter()
        result = trainer.train_step([next(batches) for _ in range(accum)])
        seconds = time.perf_counter() - t0
        loss = result.loss
        first_loss = loss if math.isnan(first_loss) else first_loss
        tokens_per_s = result.tokens / seconds
        row = {"step": trainer.step, "loss": loss, "lr": result.lr, "grad_norm": result.grad_norm,
               "tokens": trainer.tokens, "tokens_per_s": tokens_per_s}  # fmt: skip
        if peak is not None:
            row["mfu"] = flops_per_token * tokens_per_s / (peak * env.world_size)
        last = trainer.step == cfg.max_steps
        if val_rows and (trainer.step % cfg.eval.every == 0 or last):
            val = {name: trainer.evaluate_rows(x, y) for name, (x, y) in val_rows.items()}
        if metrics is not None:
            metrics.write(row)
            if val and (trainer.step % cfg.eval.every == 0 or last):
                metrics.write({"step": trainer.step, "val_loss": val})
            bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:,.0f}")
            bar.update(1)
        if (cfg.checkpoint.every and trainer.step % cfg.checkpoint.every == 0) or last:
            ckpts.save(trainer, config, {"loader": loader.state_dict(), "mixture": mix.fingerprint})
    bar.close()
    if metrics is not None:
        metrics.close()
    seconds = time.perf_counter() - start
    steps = trainer.step - first_step + 1
    return RunSummary(first_step, trainer.step, first_loss, loss,
                      steps * cfg.batch.global_size * cfg.data.seq_len / seconds, seconds, val)  # fmt: skip


def format_summary(cfg: TrainConfig, s: RunSummary) -> str:
    lines = [
        f"ptk train: steps {s.first_step}-{s.last_step} of {cfg.max_steps} in {s.seconds:.1f}s "
        f"({s.tokens_per_s:,.0f} tokens/s); loss {s.first_loss:.4f} -> {s.last_loss:.4f}",
    ]
    if s.val_loss:
        lines.append("  val loss: " + ", ".join(f"{k} {v:.4f}" for k, v in s.val_loss.items()))
    lines.append(f"  run dir: {cfg.run_dir} (metrics.jsonl, config.yaml, checkpoints/)")
    return "\n".join(lines)
