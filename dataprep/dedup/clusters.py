"""Dedup's cluster stage: connected components of the verified links, each labelled by its smallest
key, in a label array that may be a memory-mapped file.

    cluster(link_files, labels_path, total, budget)  # the stage, in the main process: a labels file
    label = np.arange(n_keys, dtype=np.uint32)       # or np.memmap(...) of the same, in a work dir
    label_components(label, lambda: iter(edge_chunks), chunk_keys=1 << 20)
    # label[k] is now the smallest key of k's component (k itself when k is alone)

Clusters are transitive: two documents are in one cluster when a chain of links joins them, each
link a pair whose similarity reaches the threshold, so two members of a cluster may be less similar
than that to each other (and to the cluster's kept document).

Keys are input positions, so the smallest key of a cluster is its first document in input order,
the one dedup keeps. Edges are read again on every pass, a chunk at a time, so memory holds one
chunk of edges and what numpy touches of `label` (4 bytes per key); nothing else grows with the
graph. Each pass hooks every edge's endpoints and their current labels onto the smaller label
(min-label propagation with root hooking), then shortcuts every label to its root (pointer
jumping); it stops after a pass that changed no label. A label never exceeds its key and always
names a key of the same component, so the fixpoint is the component's minimum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.dedup.pairs import pair_chunks
from pretrainkit.files import atomic_write

LABEL = np.dtype("<u4")


def cluster(link_files: list[Path], labels_path: Path, total: int, budget: DedupBudget) -> None:
    """Write `labels_path`: uint32 [total], the smallest key of each key's component over the links
    (the key itself when it has none), built in place in a memory-mapped temporary, then renamed."""
    if labels_path.exists():  # finished by an earlier, interrupted run
        return
    with atomic_write(labels_path, durable=False) as f:
        for lo in range(0, total, budget.range_docs):
            f.write(np.arange(lo, min(lo + budget.range_docs, total), dtype=LABEL).tobytes())
        f.flush()
        label = np.memmap(f.name, dtype=LABEL, mode="r+", shape=(total,))
        label_components(
            label, lambda: (c for p in link_files for c in pair_chunks(p, budget.range_docs)), budget.range_docs
        )
        label.flush()
        del label


def label_components(label: np.ndarray, edge_chunks: Callable[[], Iterable[np.ndarray]], chunk_keys: int) -> int:
    """Turn `label` (the identity over all keys on entry) into each key's component minimum, given
    `edge_chunks()`: a fresh iterable of int [n, 2] key pairs on each call. Returns the passes made."""
    passes = 0
    while True:
        passes += 1
        changed = False
        for edges in edge_chunks():
            if len(edges) == 0:
                continue
            a, b = edges[:, 0], edges[:, 1]
            la, lb = label[a], label[b]
            differ = la != lb
            if not differ.any():
                continue
            changed = True
            a, b, la, lb = a[differ], b[differ], la[differ], lb[differ]
            low = np.minimum(la, lb)
            for targets in (a, b, la, lb):
                np.minimum.at(label, targets, low)
        if not changed:
            return passes
        _shortcut(label, chunk_keys)


def _shortcut(label: np.ndarray, chunk_keys: int) -> None:
    """label[k] = its root, for every k, a chunk of keys at a time in key order: a label is never
    above its key, so every key below the chunk already points at a root when the chunk is done."""
    for lo in range(0, len(label), chunk_keys):
        seg = np.array(label[lo : lo + chunk_keys])
        while True:
            jumped = label[seg]
            if np.array_equal(jumped, seg):
                break
            seg = jumped
            label[lo : lo + len(seg)] = seg
