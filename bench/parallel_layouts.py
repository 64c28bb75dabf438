"""Benchmark: tokens/s and MFU of FSDP + tensor parallel and of pipeline parallel, against FSDP alone, same run.

    python3 bench/parallel_layouts.py                                   # every GPU found, the ~1B preset, bf16
    .venv/bin/python bench/parallel_layouts.py --device cpu --preset tiny --nproc 2 --steps 2   # CPU smoke test

One torchrun launch over N processes (N = the GPUs found, or --nproc) trains the same ~1B Llama-style
model (untied embeddings, so every layout trains the same parameters) on the same synthetic batches
under each layout in turn, through the project's `Trainer.train_step`:
- `fsdp` (the baseline: what the project did before tensor and pipeline parallelism): FSDP2 over N;
- `fsdp+tp2`: tensor parallel over pairs of processes, FSDP over the N/2 pairs;
- `pp2` (`1f1b`): two pipeline stages, FSDP over the N/2 pairs (4 micro-batches per step).
A layout that needs more processes than there are is reported as skipped. Each layout runs warm-up
steps, then `--rounds` timed rounds of `--steps` steps; the best round's tokens/s (global tokens
per second) is reported, MFU = 6N + attention FLOPs per token x tokens/s / (peak x N devices) where the
device's peak is known (train/loop/metrics.py), and the ratio to the baseline. Writes
bench/results/parallel_layouts.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/ (first on sys.path when run as a script) holds tokenize.py, which would shadow the stdlib's.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402

BASELINE = "fsdp"
LAYOUTS = {
    "fsdp": {"data": "fsdp"},
    "fsdp+tp2": {"data": "fsdp", "tp": 2},
    "pp2": {"data": "fsdp", "pp": 2, "pp_schedule": "1f1b"},
}
# (model section, seq_len, micro_size, micro-batches per data-parallel group and step, vocab)
PRESETS = {
    "tiny": ({"d_model": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "tie_embeddings": False}, 64, 2, 4, 512),
    "1b": (
        {"d_model": 2048, "n_layers": 18, "n_heads": 16, "n_kv_heads": 8, "tie_embeddings": False},
        2048,
        2,
        4,
        32000,
    ),
}


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure(args: argparse.Namespace, name: str, env) -> dict:
    """One layout's best-round tokens/s (collective: every process runs it)."""
    from pretrainkit.train.config import config_from_dict
    from pretrainkit.train.loop.metrics import device_peak_flops
    from pretrainkit.train.loop.trainer import Trainer
    from pretrainkit.train.model.resolve import model_config

    section, seq, micro, accum, vocab = PRESETS[args.preset]
    parallel = LAYOUTS[name]
    dp = env.world_size // (parallel.get("tp", 1) * parallel.get("pp", 1))
    raw = {
        "run_dir": "unused",
        "data": {"mixture": "unused", "seq_len": seq},
        "max_steps": 10_000,
        "seed": 0,
        "model": section,
        "batch": {"global_size": micro * accum * dp, "micro_size": micro},
        "optim": {"lr": 1e-4, "min_lr": 1e-5, "warmup_steps": 10, "clip": 1.0},
        "parallel": parallel,
        "precision": args.precision,
        "activation_checkpointing": args.activation_checkpointing,
    }
    cfg = config_from_dict(raw, "bench")
    mcfg = model_config(cfg, vocab)
    trainer = Trainer(cfg, mcfg, env, where=f"bench layout {name}")
    g = torch.Generator().manual_seed(0)
    rows = micro * accum
    group = trainer.mesh.dp_rank

    def step(trainer: Trainer) -> None:
        x = torch.randint(0, vocab, (rows * dp, seq + 1), generator=g)[group * rows : (group + 1) * rows]
        trainer.train_step([(m[:, :-1], m[:, 1:]) for m in x.split(micro)])

    for _ in range(args.warmup):
        step(trainer)
    tokens = args.steps * rows * dp * seq
    rates = []
    for _ in range(args.rounds):
        sync(env.device)
        t0 = time.perf_counter()
        for _ in range(args.steps):
            step(trainer)
        sync(env.device)
        rates.append(tokens / (time.perf_counter() - t0))
    result = {"tokens_per_s": max(rates), "rounds": rates, "params": mcfg.num_params(), "processes": env.world_size}
    peak = device_peak_flops(env.device, args.precision)
    if peak is not None:
        result["mfu"] = mcfg.flops_per_token(seq) * result["tokens_per_s"] / (peak * env.world_size)
    if env.device.type == "cuda":
        result["max_memory_gib"] = torch.cuda.max_memory_allocated(env.device) / 2**30
    del trainer
    if env.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(env.device)
    return result


def worker(args: argparse.Namespace) -> int:
    """Under torchrun: every layout that fits, one after the other; rank 0 writes the results to --worker-out."""
    from pretrainkit.files import write_text_atomic
    from pretrainkit.train.parallel.distributed import init_distributed, shutdown

    if args.device == "cpu":
        torch.set_num_threads(1)
    env = init_distributed(args.device)
    results = {}
    for name, parallel in LAYOUTS.items():
        split = parallel.get("tp", 1) * parallel.get("pp", 1)
        if env.world_size % split:
            results[name] = {"skipped": f"needs a multiple of {split} processes, have {env.world_size}"}
            continue
        results[name] = measure(args, name, env)
    if env.is_main:
        write_text_atomic(args.worker_out, json.dumps(results))
    shutdown()
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", choices=["cpu", "cuda"])
    p.add_argument("--nproc", type=int, help="processes (default: the GPUs found)")
    p.add_argument("--preset", default="1b", choices=sorted(PRESETS))
    p.add_argument("--precision", default="bf16", choices=["bf16", "fp32"])
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument("--steps", type=int, default=5, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--out", help="result JSON (default bench/results/parallel_layouts.json)")
    p.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker_out:
        return worker(args)
    nproc = args.nproc or (torch.cuda.device_count() if args.device == "cuda" else 2)
    if nproc < 1:
        print(
            "parallel_layouts: no CUDA device found; run with --device cpu --preset tiny for the smoke test",
            file=sys.stderr,
        )
        return 1
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "layouts.json"
        same = [
            "--device",
            args.device,
            "--preset",
            args.preset,
            "--precision",
            args.precision,
            "--steps",
            str(args.steps),
            "--rounds",
            str(args.rounds),
            "--warmup",
            str(args.warmup),
        ]
        same += ["--activation-checkpointing"] if args.activation_checkpointing else []
        cmd = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc_per_node={nproc}",
            str(Path(__file__).resolve()),
            *same,
            "--worker-out",
            str(out),
        ]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
        if subprocess.run(cmd, env=env).returncode:
            print("parallel_layouts: the benchmark processes failed (their messages are above)", file=sys.stderr)
            return 1
        results = json.loads(out.read_text())
    device_name = torch.cuda.get_device_name() if args.device == "cuda" else "cpu"
    base = results[BASELINE]["tokens_per_s"]
    for name, r in results.items():
        if "skipped" in r:
            print(f"{name:<9} skipped: {r['skipped']}")
            continue
        r["ratio_to_fsdp"] = r["tokens_per_s"] / base
        mfu = f", MFU {r['mfu']:.1%}" if "mfu" in r else ""
        memory = f", {r['max_memory_gib']:.1f} GiB peak" if "max_memory_gib" in r else ""
        print(
            f"{name:<9} {args.preset} ({r['params'] / 1e6:,.1f}M params) {args.precision} on {nproc} x {device_name}: "
            f"{r['tokens_per_s']:,.0f} tokens/s{mfu}{memory}, ratio to {BASELINE} {r['ratio_to_fsdp']:.3f}"
        )
    from bench.results import write_result
    from pretrainkit.files import write_text_atomic

    summary = {
        "bench": "parallel_layouts",
        "device": device_name,
        "processes": nproc,
        "torch": torch.__version__,
        "args": vars(args),
        "results": results,
    }
    if args.out:
        write_text_atomic(args.out, json.dumps(summary, indent=2) + "\n")
    else:
        write_result("parallel_layouts", summary)
    return 0


if __name__ == "__main__":
    from pretrainkit.train.parallel.distributed import exit_process

    exit_process(main())
