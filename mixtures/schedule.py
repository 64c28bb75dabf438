"""Interleaving of weighted sources: which source the n-th sequence of the global order comes from.

    sched = InterleaveSchedule.from_weights([0.25, 0.75])
    sched.source_of(np.arange(8))      # -> [1 1 0 1 1 1 0 1]: shares 1/4, 3/4
    sched.counts(8)                    # -> [2 6]: sequences of each source among the first 8

Guarantee (tested): for every prefix of n sequences and every source s with share w_s,
`|counts(n)[s] - n * w_s| < 1`, i.e. the count is floor or ceil of its ideal value: no drift in
the long run and no luck in the short run. Any window of the order then holds each source within
2 sequences of its ideal share (exactly 1 is impossible in general for three or more sources,
Fraenkel's conjecture on balanced words), and within 1 for windows starting at a period boundary.

How: the shares are made rational with a period D (quotas q_s, sum q_s = D). The j-th sequence of
source s (1-based) may not come before step floor((j-1) D / q_s) + 1 nor after ceil(j D / q_s);
those windows encode exactly the floor/ceil bound, and earliest-deadline-first meets every one of
them for unit jobs with integer release times whenever a schedule exists (Tijdeman's chairman
assignment theorem says one does). One period is built once; position n is then O(1).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

MAX_PERIOD = 1 << 16  # weights whose exact period is longer are rounded to shares of this period


def quotas_from_weights(weights: list[float], max_period: int = MAX_PERIOD) -> tuple[list[int], int]:
    """Integer quotas q_s (each >= 1) and period D = sum(q_s) with q_s / D as close to the normalized
    weights as D allows.

    Decimal weights (0.25, 0.1, 3) are taken exactly; others are rounded by largest remainder.
    """
    if not weights or any(w <= 0 or not math.isfinite(w) for w in weights):
        raise ValueError(f"weights must be positive and finite, got {weights}")
    fractions = [Fraction(repr(float(w))) for w in weights]
    total = sum(fractions)
    shares = [f / total for f in fractions]
    period = math.lcm(*(s.denominator for s in shares))
    if period <= max_period:
        return [int(s * period) for s in shares], period
    ideal = [s * max_period for s in shares]
    quotas = [max(1, math.floor(x)) for x in ideal]
    # Hand out what flooring left over (or take back what the minimum of 1 added) by largest remainder.
    by_remainder = sorted(range(len(ideal)), key=lambda i: (-(ideal[i] - math.floor(ideal[i])), i))
    surplus = max_period - sum(quotas)
    for i in by_remainder[: max(surplus, 0)]:
        quotas[i] += 1
    for i in reversed(by_remainder):
        if surplus >= 0:
            break
        if quotas[i] > 1:
            quotas[i] -= 1
            surplus += 1
    g = math.gcd(*quotas)
    return [q // g for q in quotas], max_period // g


@dataclass(frozen=True)
class InterleaveSchedule:
    quotas: tuple[int, ...]  # sequences of each source per period
    period: int
    slot_source: np.ndarray  # int16 [period]: source of each slot of one period
    slot_rank: np.ndarray  # int64 [period]: how many earlier slots of the period hold the same source
    prefix: np.ndarray  # int64 [num_sources, period + 1]: per-source counts among the first t slots

    @classmethod
    def from_weights(cls, weights: list[float], max_period: int = MAX_PERIOD) -> InterleaveSchedule:
        return cls.from_quotas(*quotas_from_weights(weights, max_period))

    @classmethod
    def from_quotas(cls, quotas: list[int], period: int) -> InterleaveSchedule:
        if sum(quotas) != period or min(quotas) < 1:
            raise ValueError(f"quotas {quotas} must be >= 1 and sum to the period {period}")
        releases: list[list[tuple[int, int, int]]] = [[] for _ in range(period + 1)]
        for s, q in enumerate(quotas):
            for j in range(1, q + 1):
                release = (j - 1) * period // q + 1
                deadline = -(-j * period // q)
                releases[release].append((deadline, s, j))
        ready: list[tuple[int, int, int]] = []
        slot_source = np.empty(period, dtype=np.int16)
        slot_rank = np.empty(period, dtype=np.int64)
        for t in range(1, period + 1):
            for job in releases[t]:
                heapq.heappush(ready, job)
            deadline, s, j = heapq.heappop(ready)
            if deadline < t:
                raise AssertionError(f"interleaving missed a deadline for quotas {quotas}")
            slot_source[t - 1] = s
            slot_rank[t - 1] = j - 1
        prefix = np.zeros((len(quotas), period + 1), dtype=np.int64)
        for s in range(len(quotas)):
            prefix[s, 1:] = np.cumsum(slot_source == s)
        return cls(tuple(quotas), period, slot_source, slot_rank, prefix)

    @property
    def shares(self) -> list[float]:
        return [q / self.period for q in self.quotas]

    def source_of(self, n: np.ndarray) -> np.ndarray:
        """Source index of global sequences `n` (int16)."""
        return self.slot_source[np.asarray(n) % self.period]

    def index_in_source(self, n: np.ndarray) -> np.ndarray:
        """For global sequences `n`: how many sequences of the same source come before each (int64)."""
        n = np.asarray(n, dtype=np.int64)
        slot = n % self.period
        quotas = np.asarray(self.quotas, dtype=np.int64)
        return (n // self.period) * quotas[self.slot_source[slot]] + self.slot_rank[slot]

    def counts(self, n: int) -> np.ndarray:
        """Sequences of each source among the first `n` of the order (int64 [num_sources])."""
        full, rest = divmod(int(n), self.period)
        return full * np.asarray(self.quotas, dtype=np.int64) + self.prefix[:, rest]

    def first_index_reaching(self, source: int, count: int) -> int:
        """The smallest n with counts(n)[source] >= count (count >= 1): one past that sequence."""
        q = self.quotas[source]
        full, rest = divmod(count - 1, q)
        slot = int(np.searchsorted(self.prefix[source], rest + 1))
        return full * self.period + slot
