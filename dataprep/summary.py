"""The summary a dataprep command prints when it ends: a title line and aligned `name  value` rows.

rows = [("input docs", "1,204"), ("kept", "1,100"), input_row(stats["input_bytes"], stats["seconds"])]
print(summary_table("dedup", out_dir, rows))
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pretrainkit.remote.staging import shown


def input_row(input_bytes: int, seconds: float) -> tuple[str, str]:
    """How much input was read, in how long, at what rate."""
    mb, seconds = input_bytes / 1e6, max(seconds, 1e-9)
    return "input", f"{mb:,.1f} MB in {seconds:.1f} s ({mb / seconds:.1f} MB/s)"


def summary_table(command: str, out_dir: Path, rows: Sequence[tuple[str, str]], tail: Sequence[str] = ()) -> str:
    """`COMMAND -> OUT`, then the rows with their values aligned, then `tail` lines as they are."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{command} -> {out_dir}", *(f"  {name:<{width}}  {value}" for name, value in rows), *tail]
    return shown("\n".join(lines))  # a staged output by its URL
