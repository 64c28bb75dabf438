"""How `ptk dedup --memory-limit` is shared among a run's processes: the sizes its work is cut into.

    budget = DedupBudget.for_limit(2_000_000_000, workers=2)
    budget.partition_bytes, budget.verify_pairs, budget.shingle_bytes, budget.describe_rows, budget.range_docs

The main process and each worker get an equal share of the limit. A stage holds a few times its
chunk while it works (a match partition is sorted with about four copies of its entries, and its
candidate pairs go to as many pair partitions; a verification job keeps ~100 bytes per pair and
one chunk of shingle sets; describing a duplicates row takes ~3 KB, its url and text head, up to
800 bytes of text, held three times; resolving a range of keys ~64 bytes per key), so chunks are a
quarter of a share, within fixed bounds: small chunks only cost more jobs. The sizes never
change the output, only how the work is cut. What stays outside the budget is said in
`pretrainkit.dataprep.dedup.pipeline` (4 bytes per document: the cluster labels, a memory-mapped file).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from pretrainkit.errors import UserError

DEFAULT_FRACTION = 0.25  # of the machine's physical memory
MIN_LIMIT = 256 << 20  # Python, numpy and the workers' own code need about this much
MIN_RANGE_DOCS = 1 << 12


def default_memory_limit() -> int:
    return int(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") * DEFAULT_FRACTION)


def _clamp(value: int, low: int, high: int) -> int:
    return max(low, min(high, value))


@dataclass(frozen=True)
class DedupBudget:
    partition_bytes: int  # hash entries per match partition file, in bytes
    verify_pairs: int  # candidate pairs per verification job
    shingle_bytes: int  # shingle sets a verification or resolve job reads at a time, in bytes
    describe_rows: int  # duplicates.jsonl rows described at a time
    range_docs: int  # documents per range of keys: of the pair files by key, and of each resolve job

    @classmethod
    def for_limit(cls, limit: int, workers: int) -> DedupBudget:
        if limit < MIN_LIMIT:
            raise UserError(
                f"--memory-limit {limit:,} bytes is too small: "
                f"dedup needs at least {MIN_LIMIT:,} bytes ({MIN_LIMIT >> 20} MiB)"
            )
        chunk = limit // (max(1, workers) + 1) // 4
        return cls(
            partition_bytes=_clamp(chunk, 1 << 20, 64 << 20),
            verify_pairs=_clamp(chunk // 128, 1 << 10, 1 << 16),
            shingle_bytes=_clamp(chunk, 1 << 20, 64 << 20),
            describe_rows=_clamp(chunk // 3072, 1 << 10, 1 << 16),
            range_docs=_clamp(chunk // 64, MIN_RANGE_DOCS, 1 << 20),
        )


def run_budget(given: DedupBudget | int | None, workers: int) -> DedupBudget:
    """The budget of a run on `workers` workers: `given` itself, or one sharing `given` bytes (None:
    `default_memory_limit()`), as `--memory-limit` asks."""
    if isinstance(given, DedupBudget):
        return given
    return DedupBudget.for_limit(given or default_memory_limit(), workers)
