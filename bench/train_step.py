"""Benchmark: the project's training step against a minimal hand-written PyTorch loop, same run; or the
step with document masking against without, or compiled against eager.

    .venv/bin/python bench/train_step.py                                  # CPU, fp32 and bf16
    python3 bench/train_step.py --device cuda --preset 1b --parallel fsdp --precisions bf16
    .venv/bin/python bench/train_step.py --compare masking --preset small-2048 --precisions fp32
    .venv/bin/python bench/train_step.py --compare compile --precisions fp32

Both sides train the same `Transformer` (same init) on the same synthetic token batches with AdamW,
gradient accumulation and clipping to 1.0. The project side is `Trainer.train_step` (param groups,
schedule, global-token loss normalization, the chosen `parallel` mode on one process; bf16 through
autocast, or FSDP2's mixed-precision policy); the baseline is the ten-line loop in `baseline_step`,
bf16 through autocast. Rounds alternate project and baseline so that machine noise hits both; the
best round's tokens/s of each side is reported with their ratio (target >= 0.95; the ratio of the
medians is in the JSON too), and MFU where the device's peak is known. Writes bench/results/train_step.json.

`--compare masking`: two project trainers, `data.document_masking` true and false, on the same rows
packed from documents of random lengths (exponential, mean DOC_MEAN tokens, EOS after each), so the
masked side pays for its block-causal attention and the unmasked one runs SDPA's causal kernel
(target: masked >= 0.90x at seq_len 2048). `--compare compile`: `compile: true` against eager. Both
alternate rounds as above and write bench/results/train_step_<compare>.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/ (first on sys.path when run as a script) holds tokenize.py, which would shadow the stdlib's.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import contextlib  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from pretrainkit.files import write_text_atomic  # noqa: E402
from pretrainkit.train.config import config_from_dict  # noqa: E402
from pretrainkit.train.loop.metrics import device_peak_flops  # noqa: E402
from pretrainkit.train.loop.trainer import Trainer  # noqa: E402
from pretrainkit.train.model.llama import Transformer  # noqa: E402
from pretrainkit.train.model.resolve import model_config  # noqa: E402
from pretrainkit.train.parallel.distributed import init_distributed, shutdown  # noqa: E402

# (model section, seq_len, micro_size, micro-batches per step, vocab)
PRESETS = {
    "tiny": ({"d_model": 128, "n_layers": 4, "n_heads": 4}, 128, 4, 2, 4096),
    "small": ({"d_model": 256, "n_layers": 6, "n_heads": 8, "n_kv_heads": 4}, 256, 4, 2, 8192),
    "small-2048": ({"d_model": 256, "n_layers": 6, "n_heads": 8, "n_kv_heads": 4}, 2048, 1, 2, 8192),
    "1b": ({"d_model": 2048, "n_layers": 18, "n_heads": 16, "n_kv_heads": 8}, 2048, 8, 1, 32000),
}
COMPARISONS = ("baseline", "masking", "compile")
EOS = 0  # the synthetic tokenizer's end-of-text id
DOC_MEAN = 400  # mean document length of the packed rows of --compare masking (tokens)


def batches(
    steps: int, accum: int, micro: int, seq: int, vocab: int, documents: bool = False
) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Random tokens (never EOS); with `documents`, an EOS ends each document of ~DOC_MEAN tokens."""
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        rows = torch.randint(1, vocab, (accum, micro, seq + 1), generator=g)
        if documents:
            rows[torch.rand(rows.shape, generator=g) < 1 / DOC_MEAN] = EOS
        out.append([(r[:, :-1].contiguous(), r[:, 1:].contiguous()) for r in rows])
    return out


def baseline_step(model, opt, micro_batches, device, bf16: bool) -> None:
    """What a person writes by hand: mean loss per micro-batch / accum, backward, clip, step."""
    cast = torch.autocast(device.type, dtype=torch.bfloat16) if bf16 else contextlib.nullcontext()
    for x, y in micro_batches:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        with cast:
            logits = model(x)
        loss = F.cross_entropy(logits.float().flatten(0, 1), y.flatten()) / len(micro_batches)
        loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
    opt.zero_grad(set_to_none=True)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(fn, steps: list, device: torch.device) -> float:
    sync(device)
    t0 = time.perf_counter()
    for mb in steps:
        fn(mb)
    sync(device)
    return time.perf_counter() - t0


def sides(args: argparse.Namespace, raw: dict, mcfg, env, bf16: bool) -> dict:
    """The two step functions compared, the measured one first."""
    if args.compare == "baseline":
        trainer = Trainer(config_from_dict(raw, "bench"), mcfg, env)
        torch.manual_seed(0)
        base = Transformer(mcfg).to(env.device)
        if args.compile:
            base.compile()
        opt = torch.optim.AdamW(base.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
        return {
            "project": trainer.train_step,
            "baseline": functools.partial(baseline_step, base, opt, device=env.device, bf16=bf16),
        }
    key, names = {"masking": ("data", ("masked", "unmasked")), "compile": ("compile", ("compiled", "eager"))}[
        args.compare
    ]
    out = {}
    for name, on in zip(names, (True, False)):
        changed = {**raw, "data": {**raw["data"], "document_masking": on}} if key == "data" else {**raw, key: on}
        out[name] = Trainer(config_from_dict(changed, "bench"), mcfg, env, eos_id=EOS).train_step
    return out


def bench_config(section: dict, seq: int, micro: int, accum: int, precision: str, **more) -> dict:
    """The training config of a benchmark's trainer: `section` as the model, synthetic data, one process."""
    return {
        "run_dir": "unused",
        "data": {"mixture": "unused", "seq_len": seq},
        "max_steps": 10_000,
        "seed": 0,
        "model": section,
        "batch": {"global_size": micro * accum, "micro_size": micro},
        "optim": {"lr": 1e-4, "min_lr": 1e-5, "warmup_steps": 10, "clip": 1.0},
        "precision": precision,
        **more,
    }


def measure(args: argparse.Namespace, precision: str, env) -> dict:
    section, seq, micro, accum, vocab = PRESETS[args.preset]
    raw = bench_config(
        section,
        seq,
        micro,
        accum,
        precision,
        parallel=args.parallel,
        compile=args.compile,
        activation_checkpointing=args.activation_checkpointing,
    )
    mcfg = model_config(config_from_dict(raw, "bench"), vocab)
    steps = sides(args, raw, mcfg, env, precision == "bf16")
    data = batches(args.warmup + args.rounds * args.steps, accum, micro, seq, vocab, args.compare == "masking")
    for fn in steps.values():
        timed(fn, data[: args.warmup], env.device)
    tokens = args.steps * micro * accum * seq
    rates: dict[str, list[float]] = {name: [] for name in steps}
    for r in range(args.rounds):
        chunk = data[args.warmup + r * args.steps : args.warmup + (r + 1) * args.steps]
        order = list(steps.items())
        for name, fn in order if r % 2 == 0 else order[::-1]:
            rates[name].append(tokens / timed(fn, chunk, env.device))
    # Best round of each side: the round least disturbed by other work on the machine.
    first, second = steps
    result = {name: max(v) for name, v in rates.items()}
    result["ratio"] = result[first] / result[second]
    result["median_ratio"] = statistics.median(rates[first]) / statistics.median(rates[second])
    result["rounds"] = rates
    peak = device_peak_flops(env.device, precision)
    if peak is not None:
        for name in steps:
            result[f"mfu_{name}"] = mcfg.flops_per_token(seq) * result[name] / peak
    result["params"] = mcfg.num_params()
    if env.device.type == "cuda":
        result["max_memory_gib"] = torch.cuda.max_memory_allocated(env.device) / 2**30
    del steps  # the next measurement starts with this one's memory freed
    if env.device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(env.device)
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--preset", default="small", choices=sorted(PRESETS))
    p.add_argument("--parallel", default="ddp", choices=["ddp", "zero1", "zero2", "fsdp"])
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--steps", type=int, default=5, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument(
        "--compare", default="baseline", choices=COMPARISONS, help="what the project step is measured against"
    )
    p.add_argument("--compile", action="store_true")
    p.add_argument("--activation-checkpointing", action="store_true")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="CPU threads for both sides (default 1: on a shared 2-core machine, 2 threads can run "
        "30x slower when another process competes; torchrun also sets 1 per process)",
    )
    p.add_argument("--out", default=None, help="default: bench/results/train_step.json (_masking, _compile)")
    args = p.parse_args()
    if args.out is None:
        suffix = "" if args.compare == "baseline" else f"_{args.compare}"
        args.out = str(ROOT / "bench" / "results" / f"train_step{suffix}.json")
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    env = init_distributed(args.device)
    device_name = torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else "cpu"
    results = {}
    for precision in args.precisions.split(","):
        r = measure(args, precision, env)
        results[precision] = r
        first, second = r["rounds"]
        mfu = f", MFU {r[f'mfu_{first}']:.1%} ({second} {r[f'mfu_{second}']:.1%})" if f"mfu_{first}" in r else ""
        print(
            f"{args.preset} ({r['params'] / 1e6:.1f}M params) {precision} {args.parallel} on {device_name}: "
            f"{first} {r[first]:,.0f} tokens/s, {second} {r[second]:,.0f} tokens/s, "
            f"ratio {r['ratio']:.3f} (medians {r['median_ratio']:.3f}){mfu}",
            flush=True,
        )
    shutdown()
    summary = {
        "bench": "train_step",
        "device": device_name,
        "torch": torch.__version__,
        "args": vars(args),
        "results": results,
    }
    write_text_atomic(args.out, json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    from pretrainkit.train.parallel.distributed import exit_process

    exit_process(main())
