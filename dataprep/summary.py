"""The summary a dataprep command prints when it ends: a title line and aligned `name  value` rows.

rows = [("input docs", "1,204"), ("kept", "1,100"), input_row(stats["input_bytes"], stats["seconds"])]
print(summary_table("dedup", out_dir, rows))
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from pretrainkit.remote.staging import shown


def input_row(input_bytes: int, seconds: float) -> tuple[str, str]:
    """How much input was read, in how long, at what rate."""
    mb, seconds = input_bytes / 1e6, max(seconds, 1e-9)
    return "input", f"{mb:,.1f} MB in {seconds:.1f} s ({mb / seconds:.1f} MB/s)"


def keep_rates(found: Mapping[str, int], kept: Mapping[str, int], shown_languages: int = 6) -> str:
    """Each language's documents kept of those found in it, the most common first:
    `en 812 of 1,000 (81.2%), de 0 of 40 (0.0%), 3 more`. A language only the kept text is in (its text
    changed) is `xx 3 of 0`."""
    languages = sorted(set(found) | set(kept), key=lambda lang: (-found.get(lang, 0), -kept.get(lang, 0), lang))
    cells = []
    for lang in languages[:shown_languages]:
        have, of = kept.get(lang, 0), found.get(lang, 0)
        cells.append(f"{lang} {have:,} of {of:,}" + (f" ({100 * have / of:.1f}%)" if of else ""))
    more = len(languages) - shown_languages
    return ", ".join(cells) + (f", {more} more" if more > 0 else "")


def summary_table(command: str, out_dir: Path, rows: Sequence[tuple[str, str]], tail: Sequence[str] = ()) -> str:
    """`COMMAND -> OUT`, then the rows with their values aligned, then `tail` lines as they are."""
    width = max(len(name) for name, _ in rows)
    lines = [f"{command} -> {out_dir}", *(f"  {name:<{width}}  {value}" for name, value in rows), *tail]
    return shown("\n".join(lines))  # a staged output by its URL
