"""Sizing a first training run for this machine and these shards: what `ptk init` writes down.

    machine = this_machine()                     # CPU cores or CUDA devices, and the FLOP/s they sustain
    plan = plan_first_run(corpus, machine, minutes=30)
    plan.model, plan.seq_len, plan.global_size, plan.micro_size, plan.max_steps, plan.tokens_per_param

The compute budget is what the machine sustains for `minutes` (an estimate: CPU_FLOPS_PER_CORE per
core, or 40% of a known GPU's bf16 peak). The law's compute-optimal split of that budget gives the
model size and tokens, unless the tokens would take more than MAX_EPOCHS passes over the data: then
the tokens are capped there and the model is the compute-optimal one for them (smaller, and faster
than the budget). The tokens are then what the budget buys for the chosen shape (its output head
and attention counted, as `ModelConfig.flops_per_token` does), within that cap. The shape is the
Llama-style ladder entry (width 64k, depth about width / 64, head size 64) closest in parameters.
The sequence length follows the documents (the power of two at or above the median length, within
SEQ_LEN_RANGE), and the batch gives at least MIN_STEPS steps.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

from pretrainkit.train.model.llama import ModelConfig
from pretrainkit.train.planning.plan import LossLaw

# Sustained fp32 training FLOP/s of one CPU core, with room left for the loader: bench.train_step
# measured 6.9e10 on one core of the 2-core development machine (6.5M parameters, 1,770 tokens/s).
CPU_FLOPS_PER_CORE = 4e10
GPU_MFU = 0.4  # of the bf16 peak, for a GPU in train/loop/metrics.py's table
UNKNOWN_GPU_FLOPS = 50e12  # sustained, for a GPU missing from that table
MAX_EPOCHS = 4  # up to ~4 passes cost little against fresh data (Muennighoff et al. 2023)
MIN_STEPS = 300
SEQ_LEN_RANGE = {"cpu": (128, 512), "cuda": (256, 4096)}
MAX_GLOBAL = {"cpu": 64, "cuda": 512}  # sequences per step
MICRO = {"cpu": 8, "cuda": 16}  # sequences per forward/backward


@dataclass(frozen=True)
class Machine:
    device: str  # "cpu" or "cuda"
    count: int  # CPU cores or CUDA devices
    name: str  # "2 CPU cores", "8 x NVIDIA H100 80GB HBM3"
    flops_per_s: float  # sustained training FLOP/s of all of them together (an estimate)


def this_machine() -> Machine:
    import torch

    if torch.cuda.is_available():
        from pretrainkit.train.loop.metrics import PEAK_FLOPS

        count, name = torch.cuda.device_count(), torch.cuda.get_device_name(0)
        peak = next((v for k, v in PEAK_FLOPS["bf16"].items() if k in name), None)
        per_device = UNKNOWN_GPU_FLOPS if peak is None else GPU_MFU * peak
        return Machine("cuda", count, f"{count} x {name}", count * per_device)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return Machine("cpu", cores, f"{cores} CPU core{'s' if cores > 1 else ''}", cores * CPU_FLOPS_PER_CORE)


@dataclass(frozen=True)
class Corpus:
    train_tokens: int  # tokens (with EOS) a run can train on, all sources together
    median_doc_tokens: int
    vocab_size: int
    heldout_tokens: int | None = None  # the smallest held-out split of a training source; None: not known


def validates(plan: FirstRun, corpus: Corpus) -> bool:
    """Whether every source's held-out split holds one sequence of the plan's (seq_len + 1 tokens), so
    that validation can run; a source of one document has none."""
    return corpus.heldout_tokens is None or corpus.heldout_tokens > plan.seq_len


@dataclass(frozen=True)
class FirstRun:
    model: ModelConfig
    seq_len: int
    global_size: int
    micro_size: int
    nproc: int  # processes for `ptk train --nproc`
    max_steps: int
    warmup_steps: int
    lr: float
    precision: str
    tokens: int  # trained on: max_steps x global_size x seq_len
    epochs: float  # passes over the training tokens
    budget_params: float  # what the law chose for the budget
    optimal_tokens_per_param: float  # the law's compute-optimal ratio at that size
    data_limited: bool  # tokens capped at MAX_EPOCHS passes
    minutes: float  # estimated training time here

    @property
    def params(self) -> int:
        return self.model.num_params()

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params


def _pow2_at_least(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1))))


def _pow2_at_most(n: float) -> int:
    return 1 << max(0, math.floor(math.log2(max(n, 1))))


def model_shape(params: float, vocab_size: int, seq_len: int) -> ModelConfig:
    """The ladder entry (d_model = 64k, n_layers = clamp(d / 64, 2, 32), 64-wide heads) closest in
    parameters to `params` (on a log scale)."""
    best = None
    for d in range(64, 8192 + 1, 64):
        cfg = ModelConfig(
            vocab_size=vocab_size,
            d_model=d,
            n_layers=min(32, max(2, d // 64)),
            n_heads=max(1, d // 64),
            max_seq_len=seq_len,
        )
        gap = abs(math.log(cfg.num_params() / params))
        if best is None or gap < best[0]:
            best = (gap, cfg)
        if cfg.num_params() > params * 4:
            break
    return best[1]


def learning_rate(d_model: int) -> float:
    """Peak AdamW learning rate by width: small models take larger steps (as GPT-3's table does)."""
    return 1e-3 if d_model <= 512 else 6e-4 if d_model <= 1024 else 3e-4 if d_model <= 2048 else 1.5e-4


def warmup_steps(max_steps: int) -> int:
    return max(1, min(1000, max_steps // 20))


def eval_every(max_steps: int) -> int:
    """Steps between validation passes in the written config: about ten per run."""
    return max(1, max_steps // 10)


def checkpoint_every(max_steps: int) -> int:
    return max(1, max_steps // 4)


def plan_first_run(corpus: Corpus, machine: Machine, minutes: float, law: LossLaw) -> FirstRun:
    budget = machine.flops_per_s * minutes * 60
    params, tokens = law.optimal_split(budget)
    data_limited = tokens > MAX_EPOCHS * corpus.train_tokens
    if data_limited:
        tokens = MAX_EPOCHS * corpus.train_tokens
        params = law.optimal_params(tokens)
    lo, hi = SEQ_LEN_RANGE[machine.device]
    seq_len = min(hi, max(lo, _pow2_at_least(corpus.median_doc_tokens)))
    model = model_shape(params, corpus.vocab_size, seq_len)
    # The tokens the budget buys for this shape (its head and attention included), within the cap.
    tokens = min(budget / model.flops_per_token(seq_len), MAX_EPOCHS * corpus.train_tokens)
    global_size = min(MAX_GLOBAL[machine.device], max(8, _pow2_at_most(tokens / (seq_len * MIN_STEPS))))
    # One process per GPU; on a CPU one per core (threads of one process compete worse), at most 8.
    nproc = min(global_size, machine.count if machine.device == "cuda" else min(8, _pow2_at_most(machine.count)))
    max_steps = max(1, round(tokens / (global_size * seq_len)))
    trained = max_steps * global_size * seq_len
    seconds = model.flops_per_token(seq_len) * trained / machine.flops_per_s
    return FirstRun(
        model=model,
        seq_len=seq_len,
        global_size=global_size,
        nproc=nproc,
        micro_size=max(1, min(MICRO[machine.device], global_size // nproc)),
        max_steps=max_steps,
        warmup_steps=warmup_steps(max_steps),
        lr=learning_rate(model.d_model),
        precision="bf16" if machine.device == "cuda" else "fp32",
        tokens=trained,
        epochs=trained / corpus.train_tokens,
        budget_params=params,
        optimal_tokens_per_param=law.optimal_tokens(model.num_params()) / model.num_params(),
        data_limited=data_limited,
        minutes=seconds / 60,
    )
