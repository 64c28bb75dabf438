"""Connected components of a duplicate graph, each represented by its smallest key.

    members, roots = connected_components(np.array([[5, 2], [9, 5], [7, 8]]))
    # members [5, 8, 9], roots [2, 7, 2]: every non-root node with the first key of its cluster

Keys are input positions, so the smallest key of a cluster is its first document in input order,
the one dedup keeps. Vectorized min-label propagation with pointer jumping (hooking labels onto
smaller labels), so it runs in numpy time even for millions of edges.
"""

from __future__ import annotations

import numpy as np


def connected_components(edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(members, roots) for every node that is not the smallest of its component, by member."""
    if len(edges) == 0:
        return np.empty(0, np.int64), np.empty(0, np.int64)
    nodes, inverse = np.unique(edges, return_inverse=True)
    a, b = inverse.reshape(-1, 2).T
    label = np.arange(len(nodes))
    while True:
        low = np.minimum(label[a], label[b])
        new = label.copy()
        for targets in (a, b, label[a], label[b]):
            np.minimum.at(new, targets, low)
        while not np.array_equal(jumped := new[new], new):
            new = jumped
        if np.array_equal(new, label):
            break
        label = new
    is_member = label != np.arange(len(nodes))
    return nodes[is_member].astype(np.int64), nodes[label[is_member]].astype(np.int64)
