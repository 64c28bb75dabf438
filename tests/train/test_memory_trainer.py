"""The memory model against the peak tensor memory of the project's own Trainer on this CPU.

The worker (this file run as a script) builds `train.trainer.Trainer` from a config and runs three
real training steps under the PyTorch profiler with memory profiling on; the profiler's running
"Total Allocated" counts every tensor allocation from before the model exists, so its maximum (less
its value at the start) is the true peak of tensor memory: weights, gradients, Adam state and
activations. Memory does not depend on the token values, so the batches are seeded random tokens.
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
CASES = [
    {"name": "fp32", "vocab": 2048, "seq": 128, "micro": 8, "precision": "fp32", "ckpt": False,
     "model": {"d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2}},
    {"name": "bf16+checkpointing", "vocab": 512, "seq": 128, "micro": 8, "precision": "bf16", "ckpt": True,
     "model": {"d_model": 192, "n_layers": 4, "n_heads": 6, "n_kv_heads": 6}},
]


def measure(case: dict) -> dict:
    """Peak tensor bytes of 3 training steps, and the memory model's total for the same config."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from train.config import config_from_dict
    from train.distributed import init_distributed
    from train.memory import ActivationShape, activation_bytes, model_states
    from train.trainer import Trainer, model_config

    v, s, b = case["vocab"], case["seq"], case["micro"]
    cfg = config_from_dict({
        "run_dir": "unused", "data": {"mixture": "unused", "seq_len": s}, "max_steps": 10, "model": case["model"],
        "batch": {"global_size": b, "micro_size": b}, "optim": {"warmup_steps": 1},
        "precision": case["precision"], "activation_checkpointing": case["ckpt"],
    }, case["name"])
    env = init_distributed("cpu")
    g = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, v, (b, s + 1), generator=g) for _ in range(3)]
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
    predicted = (model_states(mcfg.num_params(), 1, "ddp", "fp32").total
                 + activation_bytes(ActivationShape.from_model_config(mcfg), b, s, case["precision"], case["ckpt"]))
    return {"peak": peak, "predicted": predicted}


@pytest.mark.slow
def test_memory_model_within_25_percent_of_the_trainers_real_peak():
    # One process for all cases: starting torch costs more than the steps themselves.
    out = subprocess.run([sys.executable, __file__], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    results = json.loads(out.stdout.strip().splitlines()[-1])
    for case, result in zip(CASES, results):
        assert result["peak"] > 10e6, case["name"]  # weights, Adam state and activations of a few MB each
        assert result["predicted"] == pytest.approx(result["peak"], rel=0.25), (case["name"], result)


if __name__ == "__main__":
    print(json.dumps([measure(case) for case in CASES]))
