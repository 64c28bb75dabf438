"""What installing asks for: the torch floor in pyproject is one the code runs on, and the Makefile
lets a user choose the torch build (its pin fixes the version, not whether pip picks a CUDA or CPU build)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The newest torch APIs the toolkit calls, with the first release that has them.
NEEDED = {"torch.nn.utils.get_total_norm": (2, 6), "torch.distributed.fsdp.fully_shard": (2, 6),
          "scaled_dot_product_attention(enable_gqa=)": (2, 5)}  # fmt: skip


def torch_floor() -> tuple[int, int]:
    # (tomllib is Python 3.11+; the project supports 3.10)
    (spec,) = re.findall(r'^\s*"(torch\b[^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    major, minor = re.fullmatch(r"torch>=(\d+)\.(\d+)(?:\.\d+)?", spec.replace(" ", "")).groups()
    return int(major), int(minor)


def test_the_torch_floor_has_every_api_the_code_calls() -> None:
    floor = torch_floor()
    assert floor >= max(NEEDED.values()), f"pyproject says torch>={floor}, the code needs {NEEDED}"
    readme = (ROOT / "README.md").read_text()
    assert f"torch >= {floor[0]}.{floor[1]}" in readme


def test_make_setup_takes_the_torch_index_to_choose_the_build() -> None:
    cmd = ["make", "-n", "-B", "setup", "TORCH_INDEX=https://download.pytorch.org/whl/cpu"]
    dry = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    (torch_line,) = [line for line in dry.splitlines() if "torch==" in line]
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_line
    default = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "--index-url" not in default  # pip's own configuration decides, as before
