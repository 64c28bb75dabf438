"""bench/parallel_layouts.py (written for GPUs) runs end to end on CPU with a tiny model: every layout
trains through the project's Trainer under torchrun and is reported against FSDP alone."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.distributed
def test_parallel_layouts_bench_smoke_on_cpu(tmp_path: Path) -> None:
    out = tmp_path / "layouts.json"
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "parallel_layouts.py"),
        "--device",
        "cpu",
        "--preset",
        "tiny",
        "--nproc",
        "2",
        "--steps",
        "1",
        "--rounds",
        "1",
        "--warmup",
        "1",
        "--out",
        str(out),
    ]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(out.read_text())["results"]
    assert set(results) == {"fsdp", "fsdp+tp2", "pp2"}
    assert all(r["tokens_per_s"] > 0 and r["processes"] == 2 for r in results.values())
    assert results["fsdp"]["ratio_to_fsdp"] == 1.0
    for name in ("fsdp+tp2", "pp2"):
        assert f"{name:<9} tiny" in proc.stdout and "ratio to fsdp" in proc.stdout
