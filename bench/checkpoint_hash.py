"""Benchmark: what hashing a checkpoint's files costs, and how long a save blocks training.
A save is timed hashing in the background or not.

    python -m bench.checkpoint_hash [--mb 256] [--repeats 3] [--steps-between 4]

Every checkpoint's `meta.json` records each file's sha256 (train/checkpoint/checkpoints.py), and a
resume verifies them. Two measurements on one process:

1. Cost per GB, on float32 tensors of --mb MB: the seconds of `dcp.save` (the write that cannot be
   avoided) and of sha256 over the files it wrote (read back from the page cache, as right after a
   save), and their ratio. With N processes each hashes about 1/N of the files (`share_of_files`), on
   a save and on a resume's verification alike, so the cost per process per GB is this figure / N.
2. Time training is blocked per save, through the real `Checkpoints` and `Trainer` (a model whose
   checkpoint, weights and AdamW moments, is about --mb MB), --steps-between training steps between
   saves. Baseline: `save` followed at once by `wait`, i.e. the hashing, `meta.json`, rename and
   pruning on the critical path, as before. Project: `save` returns after the write and the
   finalization runs in its thread during the next steps; blocked = `save` + the `wait` before the next
   save (zero once the steps between saves outlast the hashing). The steps' own time is shown too: on a
   CPU run the hashing thread takes a core from training (torch runs on one thread here, as each
   `ptk train` process does under torchrun); on a GPU run it does not.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from bench.results import write_result
from pretrainkit.files import sha256_file

VOCAB, SEQ, MICRO = 8192, 64, 4


def state_of(mb: int) -> dict[str, torch.Tensor]:
    """Tensors of 16 MB each (a model's weight matrices), `mb` MB in all."""
    g = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(2048, 2048, generator=g) for i in range(max(1, mb // 16))}


def cost_per_gb(mb: int, repeats: int) -> dict:
    state = state_of(mb)
    gb = sum(t.numel() * t.element_size() for t in state.values()) / 1e9
    writes, hashes = [], []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            with warnings.catch_warnings():  # "torch.distributed is disabled": one process is the point
                warnings.simplefilter("ignore")
                dcp.save({"model": state}, checkpoint_id=d, no_dist=True)
            t1 = time.perf_counter()
            for f in sorted(Path(d).iterdir()):
                sha256_file(f)
            t2 = time.perf_counter()
        writes.append(t1 - t0)
        hashes.append(t2 - t1)
    write_s, hash_s = statistics.median(writes), statistics.median(hashes)
    print(f"1. checkpoint of {gb:.3f} GB on one process, median of {repeats}")
    print(f"  dcp.save (baseline)   {write_s:7.3f} s   {write_s / gb:6.3f} s/GB")
    print(f"  sha256 of its files   {hash_s:7.3f} s   {hash_s / gb:6.3f} s/GB")
    print(f"  hashing / writing     {hash_s / write_s:.2f}x")
    return {
        "gb": gb,
        "dcp_save_s_per_gb": write_s / gb,
        "sha256_s_per_gb": hash_s / gb,
        "ratio_hash_to_write": hash_s / write_s,
    }


def trainer_of(mb: int):
    """A Trainer (one process) whose checkpoint, fp32 weights and two AdamW moments, is about `mb` MB."""
    from pretrainkit.train.config import config_from_dict
    from pretrainkit.train.loop.trainer import Trainer
    from pretrainkit.train.model.resolve import model_config
    from pretrainkit.train.parallel.distributed import init_distributed

    env = init_distributed("cpu")

    def config(n_layers: int):
        raw = {
            "run_dir": "unused",
            "data": {"mixture": "unused", "seq_len": SEQ},
            "max_steps": 10**6,
            "seed": 0,
            "model": {"d_model": 512, "n_layers": n_layers, "n_heads": 8, "n_kv_heads": 8},
            "batch": {"global_size": MICRO, "micro_size": MICRO},
            "optim": {"lr": 1e-4, "warmup_steps": 1},
        }
        cfg = config_from_dict(raw, "bench")
        return cfg, model_config(cfg, VOCAB)

    n_layers = 1
    while 12 * config(n_layers)[1].num_params() < mb * 1e6:
        n_layers += 1
    cfg, model_cfg = config(n_layers)
    return Trainer(cfg, model_cfg, env)


def blocked_per_save(mb: int, repeats: int, steps_between: int) -> dict:
    from pretrainkit.train.checkpoint.checkpoints import Checkpoints

    trainer = trainer_of(mb)
    g = torch.Generator().manual_seed(0)

    def train(steps: int) -> float:
        t0 = time.perf_counter()
        for _ in range(steps):
            rows = torch.randint(0, VOCAB, (MICRO, SEQ + 1), generator=g)
            trainer.train_step([(rows[:, :-1], rows[:, 1:])])
        return time.perf_counter() - t0

    train(1)  # AdamW's state exists before the first save, as in a run
    modes = ("sync", "background")
    blocked, stepping = {m: [] for m in modes}, {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as d:
        ckpts = {m: Checkpoints(Path(d) / m, keep=1, tensors=trainer.states, records=[trainer.record]) for m in modes}
        for _ in range(repeats):
            for mode in modes:  # alternating, so that the machine's noise hits both
                t0 = time.perf_counter()
                ckpts[mode].save()
                if mode == "sync":
                    ckpts[mode].wait()
                t1 = time.perf_counter()
                stepping[mode].append(train(steps_between))
                t2 = time.perf_counter()
                ckpts[mode].wait()  # what the next save waits for first
                blocked[mode].append(t1 - t0 + time.perf_counter() - t2)
        gb = sum(f.stat().st_size for f in ckpts["sync"].candidates()[0].iterdir()) / 1e9
    out = {
        m: {"blocked_s": statistics.median(blocked[m]), "steps_s": statistics.median(stepping[m]), "gb": gb}
        for m in modes
    }
    sync, bg = out["sync"], out["background"]
    print(
        f"2. training blocked per save, {sync['gb']:.3f} GB checkpoint ({trainer.model_cfg.num_params() / 1e6:.1f}M "
        f"parameters), {steps_between} steps between saves, median of {repeats}"
    )
    print(
        f"  hashing on the critical path (baseline)  {sync['blocked_s']:7.3f} s blocked"
        f"   steps between {sync['steps_s']:7.3f} s"
    )
    print(
        f"  hashing in the background                {bg['blocked_s']:7.3f} s blocked"
        f"   steps between {bg['steps_s']:7.3f} s"
    )
    print(f"  blocked background / sync                {bg['blocked_s'] / sync['blocked_s']:.2f}x")
    return {
        "checkpoint_gb": sync["gb"],
        "steps_between": steps_between,
        "sync_blocked_s": sync["blocked_s"],
        "background_blocked_s": bg["blocked_s"],
        "ratio_blocked_background_to_sync": bg["blocked_s"] / sync["blocked_s"],
        "sync_steps_s": sync["steps_s"],
        "background_steps_s": bg["steps_s"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=256)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--steps-between", type=int, default=4, help="training steps between two saves (part 2)")
    args = p.parse_args()
    torch.set_num_threads(1)
    result = {"mb": args.mb, "repeats": args.repeats, **cost_per_gb(args.mb, args.repeats)}
    result.update(blocked_per_save(args.mb, args.repeats, args.steps_between))
    write_result("checkpoint_hash", result)


if __name__ == "__main__":
    main()
