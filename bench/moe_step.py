"""Benchmark: a mixture of experts' training step against the dense model of equal active parameters, and
its grouped expert computation against a per-token loop, same run.

    .venv/bin/python bench/moe_step.py                                  # CPU, fp32, both comparisons
    python3 bench/moe_step.py --device cuda --preset gpu --precisions bf16   # tokens/s and MFU (unmeasured)

`step`: the project's `Trainer.train_step` on a small Mixtral-family model (8 experts, top-2, SwiGLU
experts of `moe_ffn` hidden units, train/model/moe.py) and on the Mistral-family dense model with the
same attention and a feed-forward of 2 x moe_ffn hidden units: the parameters one token runs are the
same but for the MoE's router (d_model x 8 per layer). Same synthetic batches, rounds alternating the
two sides, the best round's tokens/s of each and their ratio (MoE / dense; the medians' ratio is in
the JSON), MFU where the device's peak is known (6 x active parameters + attention, per token).

`experts`: one MoE feed-forward's forward and backward on the same routed tokens, the experts computed
by `GroupedExperts` (tokens sorted by expert, one matmul per expert's group; `grouped`) against the
naive per-token loop (each token's k experts one vector-matrix product at a time; `per_token`) and,
on CPU where torch has it, `torch._grouped_mm` (one call for every group; `grouped_mm`). Outputs and
gradients are compared first (largest absolute difference reported) and the ratio is grouped /
per_token in tokens/s. Writes bench/results/moe_step.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# bench/ (first on sys.path when run as a script) holds tokenize.py, which would shadow the stdlib's.
sys.path[:] = [str(ROOT)] + [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]

import argparse  # noqa: E402
import json  # noqa: E402
import statistics  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from bench.train_step import batches, bench_config, timed  # noqa: E402
from pretrainkit.files import write_text_atomic  # noqa: E402
from pretrainkit.train.config import config_from_dict  # noqa: E402
from pretrainkit.train.loop.metrics import device_peak_flops  # noqa: E402
from pretrainkit.train.loop.trainer import Trainer  # noqa: E402
from pretrainkit.train.model.llama import ModelConfig  # noqa: E402
from pretrainkit.train.model.moe import MoEFeedForward  # noqa: E402
from pretrainkit.train.model.resolve import model_config  # noqa: E402
from pretrainkit.train.parallel.distributed import init_distributed, shutdown  # noqa: E402

N_EXPERTS, TOP_K = 8, 2
# (attention and sizes shared by both models, moe_ffn, seq_len, micro_size, micro-batches per step, vocab)
PRESETS = {
    "small": ({"d_model": 256, "n_layers": 4, "n_heads": 8, "n_kv_heads": 4}, 256, 256, 4, 2, 8192),
    "gpu": ({"d_model": 2048, "n_layers": 16, "n_heads": 16, "n_kv_heads": 8}, 2048, 2048, 4, 2, 32000),
}


def model_sections(base: dict, moe_ffn: int) -> dict[str, dict]:
    """The MoE and the dense model of equal active parameters (but the router's)."""
    return {
        "moe": {
            **base,
            "family": "mixtral",
            "n_experts": N_EXPERTS,
            "experts_per_token": TOP_K,
            "moe_ffn_dim": moe_ffn,
            "norm_topk_prob": True,
        },
        "dense": {**base, "family": "mistral", "ffn_hidden": TOP_K * moe_ffn},
    }


def alternate(fns: dict, data: list, warmup: int, rounds: int, steps: int, tokens: float, device) -> dict:
    """Tokens/s of each function over `rounds` rounds of `steps` items of `data`, rounds alternating the
    order so that machine noise hits every side; the best round of each (the least disturbed)."""
    for fn in fns.values():
        timed(fn, data[:warmup], device)
    rates: dict[str, list[float]] = {name: [] for name in fns}
    for r in range(rounds):
        chunk = data[warmup + r * steps : warmup + (r + 1) * steps]
        order = list(fns.items())
        for name, fn in order if r % 2 == 0 else order[::-1]:
            rates[name].append(steps * tokens / timed(fn, chunk, device))
    first, second = list(fns)[:2]
    result = {name: max(v) for name, v in rates.items()}
    result["ratio"] = result[first] / result[second]
    result["median_ratio"] = statistics.median(rates[first]) / statistics.median(rates[second])
    result["rounds"] = rates
    return result


def measure_step(args: argparse.Namespace, precision: str, env) -> dict:
    base, moe_ffn, seq, micro, accum, vocab = PRESETS[args.preset]
    steps, configs = {}, {}
    for name, section in model_sections(base, moe_ffn).items():
        raw = bench_config(section, seq, micro, accum, precision)
        configs[name] = model_config(config_from_dict(raw, "bench"), vocab)
        steps[name] = Trainer(config_from_dict(raw, "bench"), configs[name], env).train_step
    data = batches(args.warmup + args.rounds * args.steps, accum, micro, seq, vocab)
    result = alternate(steps, data, args.warmup, args.rounds, args.steps, micro * accum * seq, env.device)
    peak = device_peak_flops(env.device, precision)
    for name, mcfg in configs.items():
        result[f"params_{name}"] = mcfg.num_params()
        result[f"active_params_{name}"] = mcfg.num_params(active=True)
        if peak is not None:
            result[f"mfu_{name}"] = mcfg.flops_per_token(seq) * result[name] / peak
    return result


def per_token_experts(ffn: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
    """The naive baseline: every token's k experts, one SwiGLU of one row at a time."""
    _, weights, experts = ffn.route(x)
    w = ffn.experts
    rows = []
    for t in range(x.shape[0]):
        row = x[t]
        y = sum(
            weights[t, j] * ((F.silu(w.w1[e] @ row) * (w.w3[e] @ row)) @ w.w2[e].T)
            for j, e in enumerate(experts[t].tolist())
        )
        rows.append(y.to(x.dtype))
    return torch.stack(rows)


def grouped_mm_experts(ffn: MoEFeedForward, x: torch.Tensor) -> torch.Tensor:
    """MoEFeedForward.forward with the experts as three torch._grouped_mm calls over the sorted rows."""
    _, weights, experts = ffn.route(x)
    order = experts.flatten().argsort(stable=True)
    tokens = order // ffn.top_k
    offsets = torch.bincount(experts.flatten(), minlength=ffn.n_experts).cumsum(0).to(torch.int32)
    w, rows = ffn.experts, x[tokens]
    hidden = F.silu(torch._grouped_mm(rows, w.w1.transpose(1, 2), offs=offsets))
    hidden = hidden * torch._grouped_mm(rows, w.w3.transpose(1, 2), offs=offsets)
    y = torch._grouped_mm(hidden, w.w2.transpose(1, 2), offs=offsets) * weights.flatten()[order, None]
    return torch.zeros_like(x).index_add_(0, tokens, y.to(x.dtype))


def measure_experts(args: argparse.Namespace, device: torch.device) -> dict:
    base, moe_ffn, *_ = PRESETS[args.preset]
    cfg = ModelConfig(vocab_size=256, **model_sections(base, moe_ffn)["moe"])
    torch.manual_seed(0)
    ffn = MoEFeedForward(cfg).to(device)
    with torch.no_grad():
        for p in ffn.parameters():
            p.normal_(0, 0.02)
    x = torch.randn(args.expert_tokens, cfg.d_model, device=device)
    grad = torch.randn_like(x)  # a real gradient: torch._grouped_mm's CPU backward refuses an expanded one
    sides = {"grouped": ffn, "per_token": lambda t: per_token_experts(ffn, t)}
    if hasattr(torch, "_grouped_mm") and device.type == "cpu":  # its CUDA kernel takes bf16 on Hopper only
        sides["grouped_mm"] = lambda t: grouped_mm_experts(ffn, t)
    result: dict = {"tokens": args.expert_tokens, "max_abs_diff": {}}
    outputs = {}
    for name, fn in sides.items():
        ffn.zero_grad(set_to_none=True)
        y = fn(x)
        y.backward(grad)
        outputs[name] = [y.detach(), *(p.grad for p in ffn.parameters())]
    for name in sides:
        result["max_abs_diff"][name] = max(
            (a - b).abs().max().item() for a, b in zip(outputs[name], outputs["grouped"])
        )

    def step(fn):
        return lambda _: fn(x).backward(grad)

    rounds = alternate(
        {name: step(fn) for name, fn in sides.items()},
        [None] * (1 + args.rounds * args.steps),
        1,
        args.rounds,
        args.steps,
        args.expert_tokens,
        device,
    )
    return result | rounds


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--preset", default="small", choices=sorted(PRESETS))
    p.add_argument("--precisions", default="fp32", help="of the training steps, e.g. fp32,bf16")
    p.add_argument("--steps", type=int, default=3, help="timed steps per round")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--expert-tokens", type=int, default=256, help="tokens of the experts comparison")
    p.add_argument("--threads", type=int, default=1, help="CPU threads (default 1, as bench/train_step.py)")
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "moe_step.json"))
    args = p.parse_args()
    if args.device == "cpu":
        torch.set_num_threads(args.threads)
    env = init_distributed(args.device)
    device_name = torch.cuda.get_device_name(env.device) if env.device.type == "cuda" else "cpu"
    results: dict = {"step": {}}
    for precision in args.precisions.split(","):
        r = results["step"][precision] = measure_step(args, precision, env)
        mfu = f", MFU {r['mfu_moe']:.1%} (dense {r['mfu_dense']:.1%})" if "mfu_moe" in r else ""
        print(
            f"step {args.preset} {precision} on {device_name}: MoE ({r['active_params_moe'] / 1e6:.1f}M active of "
            f"{r['params_moe'] / 1e6:.1f}M) {r['moe']:,.0f} tokens/s, dense ({r['params_dense'] / 1e6:.1f}M) "
            f"{r['dense']:,.0f} tokens/s, ratio {r['ratio']:.3f} (medians {r['median_ratio']:.3f}){mfu}",
            flush=True,
        )
    e = results["experts"] = measure_experts(args, env.device)
    others = ", ".join(f"{n} {e[n]:,.0f} tokens/s" for n in e["max_abs_diff"] if n != "grouped")
    print(
        f"experts {args.preset} fp32 on {device_name}, {e['tokens']} tokens forward + backward: grouped "
        f"{e['grouped']:,.0f} tokens/s, {others}; ratio grouped / per_token {e['ratio']:.1f} "
        f"(medians {e['median_ratio']:.1f}); largest difference to grouped {e['max_abs_diff']}",
        flush=True,
    )
    shutdown()
    summary = {"bench": "moe_step", "device": device_name, "torch": torch.__version__, "args": vars(args)}
    write_text_atomic(args.out, json.dumps(summary | {"results": results}, indent=1))
    return 0


if __name__ == "__main__":
    from pretrainkit.train.parallel.distributed import exit_process

    exit_process(main())
