"""What installing asks for: the README states the torch floor pyproject asks for, and the Makefile lets a
user choose the torch build (its pin fixes the version, not whether pip picks a CUDA or CPU build).

Which torch APIs set the floor is pyproject's comment; no test here can prove it without older torch
builds to run on."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def torch_floor() -> tuple[int, int]:
    (spec,) = re.findall(r'^\s*"(torch\b[^"]*)"', (ROOT / "pyproject.toml").read_text(), re.M)
    major, minor = re.fullmatch(r"torch>=(\d+)\.(\d+)(?:\.\d+)?", spec.replace(" ", "")).groups()
    return int(major), int(minor)


def test_the_readme_states_the_torch_floor_pyproject_asks_for() -> None:
    major, minor = torch_floor()
    assert f"torch >= {major}.{minor}" in (ROOT / "README.md").read_text()


def test_make_setup_takes_the_torch_index_to_choose_the_build() -> None:
    cmd = ["make", "-n", "-B", "setup", "TORCH_INDEX=https://download.pytorch.org/whl/cpu"]
    dry = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=True).stdout
    (torch_line,) = [line for line in dry.splitlines() if "torch==" in line]
    assert "--index-url https://download.pytorch.org/whl/cpu" in torch_line
    default = subprocess.run(["make", "-n", "-B", "setup"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "--index-url" not in default  # pip's own configuration decides, as before
