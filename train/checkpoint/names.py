"""Checkpoint directory names (`step-0000050`, `.tmp-step-0000050` while written), without importing torch:
`ptk train` reads them in its launcher process too (how far an interrupted run got).

    checkpoint_name(50) == "step-0000050"; step_of(Path("step-12345678")) == 12345678
    checkpoint_dirs(Path("runs/base/checkpoints"))      # newest first
"""

from __future__ import annotations

from pathlib import Path

PREFIX = "step-"
TMP_PREFIX = ".tmp-"


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:07d}"


def step_of(path: Path) -> int | None:
    """The step of a `step-N` directory name (any number of digits), None for other names."""
    digits = path.name[len(PREFIX) :]
    return int(digits) if path.name.startswith(PREFIX) and digits.isdigit() else None


def checkpoint_dirs(directory: Path) -> list[Path]:
    """`step-N` directories, the highest step first (by number: step 10000000 is newer than 9999999)."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob(f"{PREFIX}*") if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=step_of, reverse=True)
