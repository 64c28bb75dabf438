"""The area under the ROC curve of scores against binary labels: how the tests and the benchmark
compare a classifier with fastText's own.

    roc_auc([True, False, True], [0.9, 0.2, 0.4])   # 1.0

It is the probability that a positive scores above a negative, ties counting half (Mann-Whitney U
from the average ranks of the scores)."""

from __future__ import annotations

import numpy as np


def roc_auc(positive, scores) -> float:
    positive = np.asarray(positive, bool)
    n_pos, n_neg = int(positive.sum()), int((~positive).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("the AUC needs positives and negatives")
    _, inverse, counts = np.unique(np.asarray(scores, np.float64), return_inverse=True, return_counts=True)
    ends = np.cumsum(counts)
    ranks = ((ends - counts + 1 + ends) / 2)[inverse]  # each score's average rank, from 1
    return float((ranks[positive].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
