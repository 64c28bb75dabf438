"""A score's distribution as `ptk score`'s stats.json shows it, reduced from its jobs' counts.

    counts = ScoreCounts()
    counts.add(0.8731)                                # in a job, for each document
    job_json = counts.as_json()                       # in its done file
    shown = summary([ScoreCounts.from_json(j) ...])   # docs, mean, min, max, quantiles, histogram

A job counts its scores by value at STEP (0.001): the counts of all jobs add up exactly, whatever
their number and order, and hold at most (max - min) / STEP + 1 values (1,001 for a probability),
however many documents. The quantiles (nearest rank) and the histogram (HISTOGRAM_BINS equal bins
from the least to the greatest value) are read from them, so they are those of the scores rounded
to 3 decimals; the mean is of the scores themselves (each job's sum, added in job order).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

STEP_DIGITS = 3
STEP = 10**-STEP_DIGITS
QUANTILES = (0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99)
HISTOGRAM_BINS = 20


@dataclass
class ScoreCounts:
    steps: Counter = field(default_factory=Counter)  # round(score / STEP) -> documents
    total: float = 0.0

    def add(self, score: float) -> None:
        self.steps[round(score / STEP)] += 1
        self.total += score

    def as_json(self) -> dict:
        return {"steps": {str(k): n for k, n in sorted(self.steps.items())}, "total": self.total}

    @classmethod
    def from_json(cls, data: dict) -> ScoreCounts:
        return cls(Counter({int(k): n for k, n in data["steps"].items()}), data["total"])


def summary(jobs: list[ScoreCounts]) -> dict:
    """The distribution of the jobs' scores together (module docstring); `docs` 0 and nothing else
    where there were none."""
    steps: Counter = sum((j.steps for j in jobs), Counter())
    docs = sum(steps.values())
    if not docs:
        return {"docs": 0}
    values = sorted(steps)
    lo, hi = values[0], values[-1]

    def shown(step: float) -> float:
        return round(step * STEP, STEP_DIGITS)

    quantiles, seen, at = {}, 0, 0
    for q in QUANTILES:
        rank = max(1, math.ceil(q * docs))
        while seen < rank:
            seen += steps[values[at]]
            at += 1
        quantiles[f"p{round(q * 100):02d}"] = shown(values[at - 1])
    width = max(1, math.ceil((hi - lo + 1) / HISTOGRAM_BINS))  # in steps, so each bin's edges are values
    bins = [0] * math.ceil((hi - lo + 1) / width)
    for value, n in steps.items():
        bins[(value - lo) // width] += n
    histogram = [
        {"from": shown(lo + i * width), "to": shown(min(lo + (i + 1) * width - 1, hi)), "docs": n}
        for i, n in enumerate(bins)
    ]
    return {
        "docs": docs,
        "mean": round(sum(j.total for j in jobs) / docs, 6),
        "min": shown(lo),
        "max": shown(hi),
        "quantiles": quantiles,
        "histogram": histogram,
    }
