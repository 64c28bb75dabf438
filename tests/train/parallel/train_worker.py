r"""Runs a few training steps per setting on synthetic global batches; launched by the tests under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 \
        tests/train/parallel/train_worker.py OUT.json SPEC.json

SPEC is a JSON list of runs, each `{"name", "steps", "global_size", "micro_size", "config": {...}}`
(config: TrainConfig overrides; `init_from` loads its weights as `ptk train` does), and `"eos": true` for
rows packed from short documents (about one token in five is EOS, for `data.document_masking`). Rank 0 writes
`{name: {"loss": [...], "grad_norm": [...], "val": validation loss after the steps, "divide_factors": [...],
"row_losses": [...], "counted": N}}` (the gradient divide factor of every FSDP module; the last step's summed
target losses per global row and its counted targets, from `Trainer.token_losses` as a spike's step takes
them, but for a compiled run). Global batch k is the same random tokens whatever the world size;
data-parallel group g of d trains on rows [g*G/d, (g+1)*G/d) in micro-batches of `micro_size` (every
process of the group on the same rows).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from torch.distributed.fsdp import FSDPModule

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from pretrainkit.files import write_text_atomic  # noqa: E402
from pretrainkit.train.checkpoint.init_from import find_init_source, initialize  # noqa: E402
from pretrainkit.train.config import config_from_dict  # noqa: E402
from pretrainkit.train.loop.trainer import Trainer  # noqa: E402
from pretrainkit.train.model.resolve import model_config  # noqa: E402
from pretrainkit.train.parallel.distributed import DistEnv, exit_process, init_distributed, shutdown  # noqa: E402

VOCAB, SEQ = 97, 16
EOS = 0
BASE = {
    "run_dir": "unused",
    "data": {"mixture": "unused", "seq_len": SEQ},
    "max_steps": 8,
    "seed": 3,
    "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2},
    "optim": {"lr": 3e-3, "min_lr": 3e-4, "warmup_steps": 2, "clip": 1.0},
}


def global_batch(k: int, size: int, eos: bool = False) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + k)
    rows = torch.randint(0, VOCAB, (size, SEQ + 1), generator=g)
    if eos:
        rows[torch.rand(rows.shape, generator=g) < 0.2] = EOS
    return rows


def micro_batches(
    k: int, global_size: int, micro_size: int, trainer: Trainer, eos: bool = False
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    rows = global_size // trainer.mesh.dp_size
    group = trainer.mesh.dp_rank
    mine = global_batch(k, global_size, eos)[group * rows : (group + 1) * rows]
    return [(m[:, :-1], m[:, 1:]) for m in mine.split(micro_size)]


def merged(base: dict, extra: dict) -> dict:
    out = dict(base)
    for k, v in extra.items():
        out[k] = merged(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def run(spec: dict, env: DistEnv) -> dict:
    raw = merged(BASE, {"batch": {"global_size": spec["global_size"], "micro_size": spec["micro_size"]}})
    raw = {k: v for k, v in merged(raw, spec.get("config", {})).items() if v is not None}  # None: drop a section
    cfg = config_from_dict(raw, "spec")
    trainer = Trainer(cfg, model_config(cfg, VOCAB), env, eos_id=EOS)
    if cfg.init_from is not None:  # as a fresh `ptk train` run does
        initialize(trainer.model, trainer.optimizer, find_init_source(cfg.init_from), with_optimizer=False)
    losses, norms, eos = [], [], spec.get("eos", False)
    for k in range(spec["steps"]):
        micro = micro_batches(k, spec["global_size"], spec["micro_size"], trainer, eos)
        grads = trainer.gradients(micro)
        # As a spike's step: every target's loss, before the update. Not under compile, where it would cost an
        # inductor compile of the no-grad graph (seconds per run) to check the same forward again.
        if k == spec["steps"] - 1 and not cfg.compile:
            token_losses, counted = trainer.token_losses(micro)
        r = trainer.update(grads)
        losses.append(r.loss)
        norms.append(r.grad_norm)
    # Validation after the steps, on 10 rows: not a multiple of any layout's rows per forward (padding).
    rows = global_batch(10_000, 10, eos)
    val = trainer.evaluate_rows(rows[:, :-1], rows[:, 1:])
    factors = [
        g.gradient_divide_factor
        for m in trainer.model.modules()
        if isinstance(m, FSDPModule)
        for g in m._get_fsdp_state()._fsdp_param_groups
    ]
    return {
        "loss": losses,
        "grad_norm": norms,
        "val": val,
        "divide_factors": factors,
        **({} if cfg.compile else {"row_losses": token_losses.sum(dim=1).tolist(), "counted": int(counted.sum())}),
    }


def main(out: str, spec_path: str) -> None:
    env = init_distributed("cpu")
    results = {s["name"]: run(s, env) for s in json.loads(Path(spec_path).read_text())}
    if env.is_main:
        write_text_atomic(out, json.dumps(results))
    shutdown()


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    exit_process(0)
