"""The memory model against the peak tensor memory of the project's own Trainer on this CPU.

The worker (this file run as a script, alone or under torchrun) builds `train.loop.trainer.Trainer` from
a config and runs three real training steps under the PyTorch profiler with memory profiling on;
the profiler's running "Total Allocated" counts every tensor allocation from before the model
exists, so its maximum (less its value at the start) is the true peak of tensor memory: weights,
gradients, Adam state and activations. Memory does not depend on the token values, so the batches
are seeded random tokens.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = {"d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2}
ONE_PROCESS = [
    {"name": "fp32", "vocab": 2048, "seq": 128, "micro": 8, "precision": "fp32", "ckpt": False, "model": SMALL},
    {"name": "bf16+checkpointing", "vocab": 512, "seq": 128, "micro": 8, "precision": "bf16", "ckpt": True,
     "model": {"d_model": 192, "n_layers": 4, "n_heads": 6, "n_kv_heads": 6}},
]
# Sharding only shows with several processes: every parallel mode, 2 gloo processes.
TWO_PROCESSES = [
    {"name": mode, "vocab": 2048, "seq": 128, "micro": 4, "precision": "fp32", "ckpt": False, "parallel": mode,
     "model": {"d_model": 256, "n_layers": 4, "n_heads": 4}}
    for mode in ("ddp", "zero1", "zero2", "fsdp")
]


def measure(case: dict) -> dict:
    """This process's peak tensor bytes over 3 training steps, and the memory model's total for it."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from train.config import config_from_dict
    from train.parallel.distributed import init_distributed
    from train.planning.memory import PARALLEL_STRATEGY, ActivationShape, activation_bytes, model_states
    from train.loop.trainer import Trainer, model_config

    env = init_distributed("cpu")
    v, s, b, parallel = case["vocab"], case["seq"], case["micro"], case.get("parallel", "ddp")
    cfg = config_from_dict({
        "run_dir": "unused", "data": {"mixture": "unused", "seq_len": s}, "max_steps": 10, "model": case["model"],
        "batch": {"global_size": b * env.world_size, "micro_size": b}, "optim": {"warmup_steps": 1},
        "precision": case["precision"], "activation_checkpointing": case["ckpt"], "parallel": parallel,
    }, case["name"])
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, v, (b * env.world_size, s + 1), generator=g)[env.rank * b:(env.rank + 1) * b]
               for _ in range(3)]
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        mcfg = model_config(cfg, v)
        trainer = Trainer(cfg, mcfg, env)
        for x in batches:
            trainer.train_step([(x[:, :-1], x[:, 1:])])
    with tempfile.TemporaryDirectory() as d:
        prof.export_chrome_trace(os.path.join(d, "trace.json"))
        events = json.loads(Path(d, "trace.json").read_text())["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]"), key=lambda e: e["ts"])
    # The allocator's counter carries over from earlier cases in this process: count from this one's start.
    start = memory[0]["args"]["Total Allocated"] - memory[0]["args"]["Bytes"]
    peak = max(e["args"]["Total Allocated"] for e in memory) - start
    states = model_states(mcfg.num_params(), env.world_size, PARALLEL_STRATEGY[parallel], "fp32")
    activations = activation_bytes(ActivationShape.from_model_config(mcfg), b, s, case["precision"], case["ckpt"])
    return {"peak": peak, "predicted": states.total + activations}


def _check(results: list[dict], cases: list[dict]) -> None:
    assert len(results) == len(cases)
    for case, result in zip(cases, results):
        assert result["peak"] > 10e6, case["name"]  # weights, Adam state and activations of a few MB each
        assert result["predicted"] == pytest.approx(result["peak"], rel=0.25), (case["name"], result)


def _last_json_line(out: subprocess.CompletedProcess) -> list[dict]:
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_memory_model_within_25_percent_of_the_trainers_real_peak():
    # One process for all cases: starting torch costs more than the steps themselves.
    out = subprocess.run([sys.executable, __file__, "one"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    _check(_last_json_line(out), ONE_PROCESS)


@pytest.mark.slow
@pytest.mark.distributed
def test_memory_model_within_25_percent_under_ddp_and_each_zero_stage():
    out = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                          __file__, "two"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    _check(_last_json_line(out), TWO_PROCESSES)


if __name__ == "__main__":
    from train.parallel.distributed import shutdown

    results = [measure(case) for case in (ONE_PROCESS if sys.argv[1] == "one" else TWO_PROCESSES)]
    if os.environ.get("RANK", "0") == "0":
        print(json.dumps(results))
    shutdown()
