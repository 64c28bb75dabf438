"""The weights a search tries and picks: seeded Dirichlet draws around the given weights, within every
source's max_epochs at the proxy budget; the fit's held-out error; the best of the candidates."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from pretrainkit.errors import UserError
from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.train.mix_search.proposals import (
    MIN_SHARE,
    EpochLimits,
    best_of,
    candidates,
    proposals,
    shares_of,
    tidy,
)
from pretrainkit.train.mix_search.regression import fit_runs

NO_LIMITS = EpochLimits((None, None, None), 1000)


def test_proposals_start_with_the_given_weights_and_are_drawn_around_them() -> None:
    given = shares_of([6, 3, 1])
    runs = proposals(given, 8, seed=0, limits=NO_LIMITS)
    assert runs.shape == (8, 3) and np.array_equal(runs[0], [0.6, 0.3, 0.1])
    assert np.array_equal(runs, proposals(given, 8, seed=0, limits=NO_LIMITS))  # seeded
    assert not np.array_equal(runs, proposals(given, 8, seed=1, limits=NO_LIMITS))
    assert np.array_equal(runs[:4], proposals(given, 4, seed=0, limits=NO_LIMITS))  # --runs extends, never reshuffles
    pool = candidates(given, 4000, seed=0, limits=NO_LIMITS)
    assert np.allclose(pool.mean(axis=0), given, atol=0.02)  # around the given weights
    assert pool.min() >= 0.99 * MIN_SHARE and np.allclose(pool.sum(axis=1), 1, atol=1e-5)  # no source dropped
    assert np.array_equal(pool, np.round(pool, 6))  # as the YAML writes them


def test_no_proposal_takes_a_source_past_its_max_epochs(domains, tmp_path) -> None:
    """`peps` may give at most 40% of the budget's sequences: every proposal and candidate stays under
    it, and the training sampler (the limit's own judge) accepts each over the whole budget."""
    steps, batch, seq_len = 24, 16, 32
    mixture = tmp_path / "capped.yaml"
    doc = yaml.safe_load((domains / "uniform.yaml").read_text())
    doc["sources"] = [{**s, "shards": str(domains / s["shards"])} for s in doc["sources"]]
    peps = MixtureSampler(load_mixture(domains / "uniform.yaml", verify=False), seq_len, batch).streams[2]
    doc["sources"][2]["max_epochs"] = (0.4 * steps * batch + 0.5) * peps.row_tokens / peps.epoch_tokens
    mixture.write_text(yaml.safe_dump(doc))
    limits = EpochLimits.of(load_mixture(mixture, verify=False), seq_len, batch, steps)
    given = shares_of([1, 1, 1])
    runs = proposals(given, 12, seed=0, limits=limits)
    pool = candidates(given, 2000, seed=0, limits=limits)
    uncapped = candidates(given, 2000, seed=0, limits=NO_LIMITS)
    assert (uncapped[:, 2] > 0.45).any() and (pool[:, 2] < 0.4).all() and (runs[:, 2] < 0.4).all()
    for shares in [*runs, *pool[:20]]:
        doc["sources"] = [{**s, "weight": float(w)} for s, w in zip(doc["sources"], shares)]
        mixture.write_text(yaml.safe_dump(doc))
        MixtureSampler(load_mixture(mixture, verify=False), seq_len, batch).check_batch(steps - 1)
    with pytest.raises(UserError, match="the given weights take a source past its max_epochs"):
        proposals(shares_of([1, 1, 8]), 4, seed=0, limits=limits)


def test_the_fit_reports_its_held_out_error_and_the_best_is_where_it_predicts_lowest() -> None:
    rng = np.random.default_rng(0)
    shares = tidy(rng.dirichlet([1, 1, 1], size=12))
    losses = 3.0 - 0.5 * shares[:, 0] + 0.2 * shares[:, 2] + rng.normal(0, 0.005, size=12)
    fit = fit_runs(shares, losses)
    assert fit.mean_abs_error < 0.02 and fit.rank_correlation > 0.9
    noise = fit_runs(shares, rng.normal(3, 0.1, size=12))  # nothing to learn: the held-out error says so
    assert noise.mean_abs_error > 0.05 and noise.rank_correlation < 0.6
    pool = candidates(shares_of([1, 1, 1]), 5000, seed=0, limits=NO_LIMITS)
    best = best_of(pool, fit.predict(pool), 100)
    assert best[0] > 0.8 and best[2] < 0.1
    assert np.array_equal(best, tidy(best))
