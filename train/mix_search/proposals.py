"""The mixture weights a search tries: Dirichlet draws around the given weights, seeded, within `max_epochs`.

    limits = EpochLimits.of(mix, seq_len=32, global_batch=8, steps=16)
    shares = proposals(given, runs=8, seed=0, limits=limits)   # [runs, sources]; row 0 is `given` itself
    pool = candidates(given, count=10_000, seed=0, limits=limits)

A draw's mean is the given shares (Dirichlet with alpha = number of sources x given share: the
uniform mixture's draws cover the whole simplex evenly, as RegMix samples). Every share is kept at
least MIN_SHARE, so that no source becomes validation-only, and rounded to DECIMALS digits, so that
the weights written to YAML read back to the same mixture. A draw that would take a source past its
`max_epochs` within the proxy budget is drawn again: a proxy run must not stop on it, and the weights
the search proposes must be ones that budget can train on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from pretrainkit.errors import UserError
from pretrainkit.mixtures import Mixture, MixtureSampler

MIN_SHARE = 1e-3
DECIMALS = 6
TRIES_PER_RUN = 1000  # draws per wanted proposal before the limits are said to leave no room


@dataclass(frozen=True)
class EpochLimits:
    """Per training source, the sequences its `max_epochs` allows (None: no limit), and the sequences
    a proxy run draws from all sources together."""

    allowed: tuple[int | None, ...]
    sequences: int

    @classmethod
    def of(cls, mix: Mixture, seq_len: int, global_batch: int, steps: int) -> EpochLimits:
        sampler = MixtureSampler(mix, seq_len=seq_len, global_batch_size=global_batch)
        allowed = tuple(sampler.allowed_sequences(i) for i in range(len(sampler.sources)))
        return cls(allowed, steps * global_batch)

    def fits(self, shares: np.ndarray) -> np.ndarray:
        """For each row of `shares` [n, sources]: whether no source runs past its limit. One sequence
        of slack: the interleaving gives a source up to one more than its share of any prefix."""
        ok = np.ones(len(shares), dtype=bool)
        for i, allowed in enumerate(self.allowed):
            if allowed is not None:
                ok &= shares[:, i] * self.sequences + 1 <= allowed
        return ok


def tidy(shares: np.ndarray) -> np.ndarray:
    """Shares (rows) at least MIN_SHARE, summing to 1, rounded to DECIMALS digits."""
    shares = np.maximum(np.asarray(shares, dtype=np.float64), MIN_SHARE)
    return np.round(shares / shares.sum(axis=-1, keepdims=True), DECIMALS)


def _draws(given: np.ndarray, count: int, rng: np.random.Generator, limits: EpochLimits) -> np.ndarray:
    """`count` tidy Dirichlet draws around `given` that fit `limits`, in the order drawn."""
    alpha = len(given) * given
    kept: list[np.ndarray] = []
    tries = 0
    while sum(len(k) for k in kept) < count:
        batch = min(max(count, 64), count * TRIES_PER_RUN - tries)
        if batch <= 0:
            raise UserError(
                f"the sources' max_epochs leave no room to vary the weights at this budget "
                f"(fewer than {count} of {tries} draws fit); lower max_steps or raise max_epochs"
            )
        draws = tidy(rng.dirichlet(alpha, size=batch))
        tries += batch
        kept.append(draws[limits.fits(draws)])
    return np.concatenate(kept)[:count]


def proposals(given: np.ndarray, runs: int, seed: int, limits: EpochLimits) -> np.ndarray:
    """[runs, sources]: the given shares (tidied), then runs - 1 draws around them."""
    first = tidy(given)
    if not limits.fits(first[None])[0]:
        raise UserError("the given weights take a source past its max_epochs at this budget; lower max_steps")
    rest = _draws(first, runs - 1, np.random.default_rng([seed, 0]), limits) if runs > 1 else np.empty((0, len(given)))
    return np.concatenate([first[None], rest])


def candidates(given: np.ndarray, count: int, seed: int, limits: EpochLimits) -> np.ndarray:
    """[count, sources]: the pool the fitted model picks the best weights from (other draws than the runs')."""
    return _draws(tidy(given), count, np.random.default_rng([seed, 1]), limits)


def best_of(pool: np.ndarray, predicted: np.ndarray, top: int) -> np.ndarray:
    """The mean of the `top` candidates predicted best, tidied: RegMix averages its top 100, which is
    steadier than the single best prediction of a model fitted on few runs."""
    order = np.argsort(predicted, kind="stable")[: max(1, min(top, len(pool)))]
    return tidy(pool[order].mean(axis=0))


def shares_of(weights: list[float]) -> np.ndarray:
    total = math.fsum(weights)
    return np.array([w / total for w in weights], dtype=np.float64)
