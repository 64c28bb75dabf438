"""Fitting the loss law L(N, D) = E + A/N^alpha + B/D^beta to the final losses of finished runs.

    points = [RunPoint("s1", params=2e7, tokens=4e8, loss=3.9), ...]
    fit = fit_loss_law(points)
    fit.law.loss(1e9, 2e10)

Hoffmann et al. 2022, approach 3: parameters (a, b, e, alpha, beta) with A = exp(a), B = exp(b),
E = exp(e); the model's log-loss is LSE(a - alpha log N, b - beta log D, e); the objective is the Huber
loss (delta 1e-3) of its residuals against the observed log-losses, minimised with L-BFGS from the
best starts of Hoffmann's initialisation grid; the best minimum wins. Float64 throughout and a
fixed grid, so the same points always give the same law.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import torch

from pretrainkit.errors import UserError
from pretrainkit.progress import progress_bar
from pretrainkit.train.planning.plan import LossLaw

HUBER_DELTA = 1e-3
# Hoffmann et al.'s grid of initialisations (appendix D.2).
GRID = {
    "a": [0.0, 5.0, 10.0, 15.0, 20.0, 25.0],
    "b": [0.0, 5.0, 10.0, 15.0, 20.0, 25.0],
    "e": [-1.0, -0.5, 0.0, 0.5, 1.0],
    "alpha": [0.0, 0.5, 1.0, 1.5, 2.0],
    "beta": [0.0, 0.5, 1.0, 1.5, 2.0],
}


@dataclass(frozen=True)
class RunPoint:
    """One finished run: its parameter count, training tokens and final loss."""

    name: str
    params: float
    tokens: float
    loss: float


@dataclass(frozen=True)
class LawFit:
    law: LossLaw
    objective: float  # Huber loss at the optimum
    starts: int  # L-BFGS runs made


def _objective(
    theta: torch.Tensor, log_n: torch.Tensor, log_d: torch.Tensor, log_l: torch.Tensor, delta: float
) -> torch.Tensor:
    """Huber loss of the log residuals per parameter row; theta is [..., 5] = (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta[..., :, None].unbind(-2)  # each [..., 1], broadcasting over the points
    terms = torch.stack((a - alpha * log_n, b - beta * log_d, e.expand(*e.shape[:-1], log_n.shape[0])))
    residual = torch.logsumexp(terms, dim=0) - log_l
    return torch.nn.functional.huber_loss(residual, torch.zeros_like(residual), reduction="none", delta=delta).sum(-1)


def fit_loss_law(
    points: list[RunPoint], delta: float = HUBER_DELTA, starts: int = 16, max_iter: int = 200, progress: bool = False
) -> LawFit:
    """Fit the law to `points`; L-BFGS runs from the `starts` best grid points."""
    if len(points) < 5:
        raise UserError(f"the loss law has 5 coefficients: fitting needs at least 5 runs, got {len(points)}")
    for p in points:
        if not (p.params > 0 and p.tokens > 0 and p.loss > 0 and math.isfinite(p.loss)):
            raise UserError(
                f"{p.name}: parameters, tokens and loss must be positive (got N={p.params}, "
                f"D={p.tokens}, loss={p.loss})"
            )
    log_n = torch.tensor([math.log(p.params) for p in points], dtype=torch.float64)
    log_d = torch.tensor([math.log(p.tokens) for p in points], dtype=torch.float64)
    log_l = torch.tensor([math.log(p.loss) for p in points], dtype=torch.float64)

    grid = torch.tensor(list(itertools.product(*GRID.values())), dtype=torch.float64)
    with torch.no_grad():
        grid_loss = _objective(grid, log_n, log_d, log_l, delta)
    # A stable sort keeps ties in grid order, so the chosen starts never depend on the platform.
    order = torch.sort(grid_loss, stable=True).indices[:starts]

    best_theta, best_loss = None, math.inf
    for i in progress_bar(order.tolist(), desc="L-BFGS starts", unit="start", disable=not progress):
        theta = grid[i].clone().requires_grad_(True)
        opt = torch.optim.LBFGS(
            [theta],
            lr=1.0,
            max_iter=max_iter,
            tolerance_grad=1e-12,
            tolerance_change=1e-15,
            history_size=50,
            line_search_fn="strong_wolfe",
        )

        def closure(opt: torch.optim.LBFGS = opt, theta: torch.Tensor = theta) -> torch.Tensor:
            opt.zero_grad()
            loss = _objective(theta, log_n, log_d, log_l, delta)
            loss.backward()
            return loss

        opt.step(closure)
        with torch.no_grad():
            final = float(_objective(theta, log_n, log_d, log_l, delta))
        if math.isfinite(final) and final < best_loss:
            best_theta, best_loss = theta.detach().clone(), final
    if best_theta is None:
        raise UserError("the loss-law fit did not converge from any start")
    a, b, e, alpha, beta = best_theta.tolist()
    if alpha <= 0 or beta <= 0:
        raise UserError(
            f"the fitted exponents are not positive (alpha={alpha:.3g}, beta={beta:.3g}): "
            "the runs do not show loss falling with size and tokens"
        )
    law = LossLaw(E=math.exp(e), A=math.exp(a), B=math.exp(b), alpha=alpha, beta=beta, name="fit")
    return LawFit(law=law, objective=best_loss, starts=len(order))
