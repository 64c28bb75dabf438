"""The regression of a search: mixture shares -> target loss, and its held-out error.

    fit = fit_runs(shares, losses)           # shares [runs, sources], losses [runs]
    fit.predict(pool), fit.loo, fit.mean_abs_error, fit.rank_correlation

A ridge regression on the shares (scikit-learn's RidgeCV, its penalty chosen by its own efficient
leave-one-out): with tens of runs a linear model is what the data can support (RegMix fits LightGBM
to 512 runs, and reports that a linear one ranks mixtures nearly as well). Its held-out error is
measured by leave-one-out: each run predicted by the model fitted to the others, the whole fit
(penalty choice included) done again each time; the summary gives the mean absolute error of those
predictions and their Spearman rank correlation with the measured losses (how well the fit orders
mixtures, which is what picking the best needs).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pretrainkit.errors import UserError

MIN_RUNS = 3  # leave-one-out needs at least two runs to fit on
ALPHAS = np.logspace(-6, 1, 15)


def require_scikit_learn() -> None:
    """Said before any proxy run trains, not after: the fit needs scikit-learn (the `mix` extra)."""
    try:
        import sklearn  # noqa: F401
    except ImportError:
        raise UserError(
            "ptk mix search needs scikit-learn, which is not installed: pip install 'pretrainkit[mix]'"
        ) from None


def _model():
    from sklearn.linear_model import RidgeCV

    return RidgeCV(alphas=ALPHAS)


@dataclass(frozen=True)
class Fit:
    model: object  # the RidgeCV fitted on every run
    loo: np.ndarray  # [runs]: each run's loss predicted without it
    mean_abs_error: float
    rank_correlation: float  # Spearman, of `loo` against the measured losses (nan when either is constant)

    def predict(self, shares: np.ndarray) -> np.ndarray:
        return self.model.predict(shares)


def fit_runs(shares: np.ndarray, losses: np.ndarray) -> Fit:
    from scipy.stats import spearmanr
    from sklearn.model_selection import LeaveOneOut, cross_val_predict

    model = _model().fit(shares, losses)
    loo = cross_val_predict(_model(), shares, losses, cv=LeaveOneOut())
    constant = np.ptp(loo) == 0 or np.ptp(losses) == 0
    rank = float("nan") if constant else float(spearmanr(loo, losses).statistic)
    return Fit(model, loo, float(np.mean(np.abs(loo - losses))), rank)
