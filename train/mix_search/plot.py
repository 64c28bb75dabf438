"""`OUT/search.png`: how well the fit predicts (left) and which weights the runs and the proposal have (right).

    draw_search(path, names, shares, losses, loo, best, best_predicted)

Left: each run's measured target loss against its leave-one-out prediction, with the diagonal
(points on it: predicted without seeing the run). Right: the weights of every run as stacked bars,
ordered by measured loss (best at the top), with the proposal above them. Written atomically,
without matplotlib's version in the file.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from pretrainkit.files import write_bytes_atomic
from pretrainkit.train.reports.report import PNG_METADATA


def draw_search(
    path: Path,
    names: list[str],
    shares: np.ndarray,
    losses: np.ndarray,
    loo: np.ndarray,
    best: np.ndarray,
    best_predicted: float,
) -> None:
    import io

    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 0.9 + 0.3 * max(len(losses) + 1, 12)), dpi=100, layout="constrained")
    fit_ax, weights_ax = fig.subplots(1, 2, width_ratios=(1, 1.3))
    low, high = float(min(losses.min(), loo.min())), float(max(losses.max(), loo.max()))
    pad = (high - low) * 0.05 or 0.01
    fit_ax.plot([low - pad, high + pad], [low - pad, high + pad], color="0.6", linewidth=1)
    fit_ax.scatter(loo, losses, s=18)
    for i, (x, y) in enumerate(zip(loo, losses)):
        fit_ax.annotate(f"{i:03d}", (x, y), fontsize=7, xytext=(3, 2), textcoords="offset points")
    fit_ax.set(
        xlabel="predicted target loss (leave-one-out)",
        ylabel="measured target loss",
        title="fit: each run predicted without it",
    )
    order = np.argsort(losses, kind="stable")[::-1]  # the best run drawn at the top, under the proposal
    rows = [*(shares[i] for i in order), best]
    labels = [*(f"run {i:03d}: {losses[i]:.4f}" for i in order), f"best.yaml: {best_predicted:.4f} (predicted)"]
    left = np.zeros(len(rows))
    for j, name in enumerate(names):
        widths = np.array([r[j] for r in rows])
        weights_ax.barh(range(len(rows)), widths, left=left, label=name)
        left += widths
    weights_ax.set_yticks(range(len(rows)), labels, fontsize=8)
    weights_ax.set(xlim=(0, 1), xlabel="share of training sequences", title="weights, by target loss")
    weights_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.1), ncols=min(len(names), 6), fontsize=8)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata=PNG_METADATA)
    write_bytes_atomic(path, buffer.getvalue())
