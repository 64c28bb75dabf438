"""Numbers on the command line with size suffixes (`20M` tokens, `7.5B` parameters, `989T` FLOP/s),
and numbers in YAML configs.

    parser.add_argument("--flops", type=quantity)   # "1e21" -> 1e21
    config_number(yaml.safe_load("lr: 1e-3")["lr"]) # 0.001 (YAML 1.1 read it as the string "1e-3")
    byte_size(12_345_678)                           # "12.3 MB", for summaries

Suffixes are decimal (K = 1e3, M = 1e6, B or G = 1e9, T = 1e12, P = 1e15), as budgets, model sizes
and hardware are quoted; case does not matter. `quantity` is an argparse type: a bad value is a
one-line usage error; a whole count in a range is `pretrainkit.arguments.count_in`.
"""

from __future__ import annotations

import argparse
import math

SUFFIXES = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12, "P": 1e15}


def quantity(text: str) -> float:
    """A positive number, optionally with a suffix."""
    t = text.strip().upper()
    scale = 1.0
    if t and t[-1] in SUFFIXES:
        t, scale = t[:-1], SUFFIXES[t[-1]]
    try:
        value = float(t) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r} (e.g. 250000, 20M, 7.5B, 1e21)") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def config_number(value: object) -> float | None:
    """A YAML config value as a number, or None if it is not one. PyYAML follows YAML 1.1, where a
    float needs a dot (`1.0e-3`), so `1e-3` and `1e300` arrive as strings; they are the numbers they
    plainly are. Booleans are not numbers. One parser for every config (train and mixture)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def byte_size(n: int) -> str:
    """`n` bytes as people read them, in decimal units: 312 B, 4.1 kB, 12.3 MB, 1.2 GB."""
    for unit, size in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n} B"
