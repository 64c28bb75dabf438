"""bench/moe_step.py's experts comparison computes what the model computes: the naive per-token loop and
torch._grouped_mm (on CPU) give MoEFeedForward's outputs and gradients, so its speed ratio compares equal work."""

from __future__ import annotations

import argparse

import torch

from bench.moe_step import measure_experts


def test_the_experts_baselines_equal_the_grouped_experts_and_are_timed() -> None:
    torch.manual_seed(0)
    args = argparse.Namespace(preset="small", expert_tokens=24, rounds=1, steps=1)
    result = measure_experts(args, torch.device("cpu"))
    sides = ["grouped", "per_token"] + (["grouped_mm"] if hasattr(torch, "_grouped_mm") else [])
    assert list(result["max_abs_diff"]) == sides
    assert result["max_abs_diff"]["grouped"] == 0.0
    # One row at a time sums in another order than a group's matmul: equal up to fp32 rounding.
    assert max(result["max_abs_diff"].values()) < 1e-5
    assert all(result[name] > 0 for name in sides) and result["ratio"] == result["grouped"] / result["per_token"]
