"""The documents a spiking step's loss came from: its global batch's documents ranked by loss contribution.

    losses, counted = trainer.token_losses(micro)          # every target's loss of the step's global batch
    top = top_documents(batch_segments(sampler, batch), losses.numpy(), counted.numpy())
    top[0]  # {"source", "shard", "index", "id", "input", "line", "tokens", "loss", "share"}

A document's loss contribution to a step is the summed token loss (cross-entropy in nats) of its
segments in the step's global batch: its share of the step's loss, which is the sum over all of the
batch's documents divided by the batch's target tokens. A target belongs to the document of the token
it predicts: window token p (p >= 1) is the target of input position p - 1, so a segment over window
tokens [a, b) owns targets [max(a, 1) - 1, b - 1); the window's first token is no target (windows are
disjoint pieces of a source's stream, each predicting only within itself). Under document masking a
document's first token is never a target (its input is the EOS before it), so it counts for nothing
there (`counted`).

Per document, summed over its segments (a document may span windows): `tokens` (its targets that count),
`loss` (their summed loss) and `share` (loss / the batch's summed loss). The segments are `ptk trace`'s
(`batch_segments`), so each ranked document is found the same way: source, shard, index, id, input and
line. Ranked by `loss`, highest first (a non-finite loss first of all: it is what broke the step), ties
by source and index; the first `TOP_DOCUMENTS`.
"""

from __future__ import annotations

import math

import numpy as np

TOP_DOCUMENTS = 10  # documents a spike's event in events.jsonl lists


def top_documents(
    windows: list[list[dict]], losses: np.ndarray, counted: np.ndarray, top: int | None = None
) -> list[dict]:
    """The `top` (default `TOP_DOCUMENTS`) documents of a global batch by loss contribution (module
    docstring). `windows`: each window's segments (`batch_segments`); `losses`, `counted`: float
    [windows, seq_len] and bool, every target's loss and whether it counts (`Trainer.token_losses`)."""
    total = math.fsum(losses[counted].tolist())
    docs: dict[tuple[str, int], dict] = {}
    for w, segments in enumerate(windows):
        a = 0  # the segment's first token in the window
        for s in segments:
            b = a + s["end"] - s["start"]
            targets = slice(max(a, 1) - 1, b - 1)
            key = (s["source"], s["index"])
            where = {k: s[k] for k in ("source", "shard", "index", "id", "input", "line", "url") if k in s}
            doc = docs.setdefault(key, where | {"tokens": 0, "loss": []})
            doc["tokens"] += int(counted[w, targets].sum())
            doc["loss"] += losses[w, targets][counted[w, targets]].tolist()
            a = b
        if a != losses.shape[1] + 1:
            raise ValueError(f"window {w}: segments of {a} tokens, not seq_len + 1 = {losses.shape[1] + 1}")
    for doc in docs.values():
        doc["loss"] = math.fsum(doc["loss"])
        doc["share"] = doc["loss"] / total if total else None

    def rank(doc: dict) -> tuple:
        loss = doc["loss"]
        return (-(math.inf if math.isnan(loss) else loss), doc["source"], doc["index"])

    return sorted(docs.values(), key=rank)[: TOP_DOCUMENTS if top is None else top]
