"""`ptk eval ... --per-document OUT.jsonl`: every document's mean loss, ranked, and a histogram of them.

    losses = DocumentLosses(eval_set.lengths)
    score_documents(model, eval_set.documents(), eval_set.lengths, ..., on_targets=losses.add)
    rows = document_rows(eval_set.name, eval_set.origin, eval_set.lengths, losses.nats)  # per set
    ranked = write_ranking(path, rows)      # sorted, written atomically
    print(format_histogram(histogram(ranked)))

A document's targets are its tokens and its closing EOS, scored once in the stream `ptk eval` scores
(`scoring.py`: each with the context of the documents before it in the window), so its figures are
the share of the eval's loss it holds: `tokens` (its length + 1) and `loss`, their mean loss in
nats per token. Rows: `id`, `source` (the eval's source: shard set, text input or mixture source),
`shard`, `index` (the document's index in its shard set, or its position among a text input's
documents), `input` and `line` (where it was read; for a shard set as `ptk trace` gives them, null
for a document that came with an id of its own), `url` for a crawled page (no key otherwise), `tokens`
and `loss`. Sorted by loss, highest first,
ties by source then index, so the same model and documents give the same file. What comes to the top
is what the model finds least like its training data: gibberish, a language it did not see, markup;
what comes last is what it finds most predictable, repeated boilerplate among it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable

import numpy as np

from pretrainkit.files import atomic_write

DIGITS = 6  # as `ptk eval`'s figures: the noise-level digits stay out of the ranking's ties
BINS = 10


class DocumentLosses:
    """Target losses in the stream's order summed per document (`score_documents(on_targets=...)`)."""

    def __init__(self, lengths: np.ndarray) -> None:
        self.ends = np.cumsum(np.asarray(lengths, dtype=np.int64) + 1)  # each document's targets end here
        self.nats = np.zeros(len(self.ends), dtype=np.float64)
        self.seen = 0

    def add(self, losses: np.ndarray) -> None:
        docs = np.searchsorted(self.ends, np.arange(self.seen, self.seen + len(losses)), side="right")
        if len(docs):
            lo = int(docs[0])
            self.nats[lo : int(docs[-1]) + 1] += np.bincount(docs - lo, weights=losses)
        self.seen += len(losses)


def document_rows(source: str, origin: Callable[[int], dict], lengths: np.ndarray, nats: np.ndarray) -> list[dict]:
    """One row per document of an eval set (module docstring); `origin(i)`: the i-th document's `shard`,
    `index`, `id`, `input`, `line` and `url` if it has one."""
    rows = []
    for i, (length, total) in enumerate(zip(lengths.tolist(), nats.tolist())):
        where = origin(i)
        tokens = length + 1
        loss = float(f"{total / tokens:.{DIGITS}g}")
        rows.append({"id": where["id"], "source": source, **_without(where, "id"), "tokens": tokens, "loss": loss})
    return rows


def _without(row: dict, key: str) -> dict:
    return {k: v for k, v in row.items() if k != key}


def write_ranking(path: str, rows: list[dict]) -> list[dict]:
    """`rows` sorted (loss descending, a non-finite one first, then source and index), written to `path`
    as JSON lines, atomically."""
    ranked = sorted(rows, key=lambda r: (-_finite_or_top(r["loss"]), r["source"], r["index"]))
    with atomic_write(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in ranked)
    return ranked


def _finite_or_top(loss: float) -> float:
    """A non-finite loss ranks first: it is the document to look at."""
    return loss if math.isfinite(loss) else math.inf


def histogram(rows: list[dict], bins: int = BINS) -> list[dict]:
    """The documents' mean losses in `bins` equal bins from the lowest to the highest: `lo`, `hi`, `documents`."""
    losses = np.array([r["loss"] for r in rows if math.isfinite(r["loss"])], dtype=np.float64)
    if not len(losses):
        return []
    counts, edges = np.histogram(losses, bins=bins if losses.min() < losses.max() else 1)
    return [
        {"lo": float(f"{lo:.4g}"), "hi": float(f"{hi:.4g}"), "documents": int(n)}
        for lo, hi, n in zip(edges[:-1].tolist(), edges[1:].tolist(), counts.tolist())
    ]


def format_histogram(bins: list[dict], width: int = 40) -> str:
    """A text histogram, one line per bin: its loss range, its documents and a bar."""
    most = max((b["documents"] for b in bins), default=0)
    lines = ["documents by mean loss (nats/token)"]
    for b in bins:
        bar = "#" * math.ceil(width * b["documents"] / most) if b["documents"] else ""
        lines.append(f"  {b['lo']:8.4f} - {b['hi']:8.4f}  {b['documents']:>7,}  {bar}".rstrip())
    return "\n".join(lines)
