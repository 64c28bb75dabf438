"""Loss, perplexity and bits per byte of a model on a list of documents: every token predicted exactly once.

    score = score_documents(model, docs, lengths, eos_id, seq_len=256, batch_size=8, device=torch.device("cpu"))
    score.loss, score.perplexity, score.bits_per_byte(text_bytes)

The documents form one stream `EOS d0 EOS d1 EOS ... EOS d_last EOS`, as training joins them (the
leading EOS gives a document's first token the context training gives it), cut into windows of
`seq_len + 1` tokens that share one token with the next window; so every token after the leading
EOS, the closing EOS of each document included, is a target exactly once, and the last, shorter
window is scored too. Losses are summed in float64 over the tokens in the stream's order, so the
same model, documents and settings give the same numbers. Bits per byte is the summed loss in bits
over the UTF-8 bytes of the documents' text, comparable across tokenizers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pretrainkit.progress import progress_bar

IGNORE_INDEX = -100


@dataclass(frozen=True)
class Score:
    documents: int
    tokens: int  # predicted tokens (each document's tokens and its closing EOS)
    nats: float  # summed cross-entropy
    windows: int
    batches: int  # forward passes of up to batch_size windows: all of them, never a subset

    @property
    def loss(self) -> float:
        return self.nats / self.tokens

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss)

    def bits_per_byte(self, text_bytes: int) -> float:
        return self.nats / math.log(2) / text_bytes


def stream_windows(docs: Iterable[np.ndarray], eos_id: int, seq_len: int) -> Iterator[np.ndarray]:
    """Windows of the stream `EOS d0 EOS ... EOS`, each `seq_len + 1` tokens (the last may be shorter),
    consecutive windows sharing one token; generated without holding the whole stream."""
    width = seq_len + 1
    buffer = np.empty(2 * width, dtype=np.int64)
    buffer[0], filled = eos_id, 1
    for doc in docs:
        if filled + len(doc) + 1 > len(buffer):
            buffer = np.concatenate([buffer[:filled], np.empty(len(doc) + width, dtype=np.int64)])
        buffer[filled : filled + len(doc)] = doc
        buffer[filled + len(doc)] = eos_id
        filled += len(doc) + 1
        while filled >= width:
            yield buffer[:width].copy()
            buffer[: filled - seq_len] = buffer[seq_len:filled]  # the window's last token is the next one's first
            filled -= seq_len
    if filled > 1:
        yield buffer[:filled].copy()


@torch.no_grad()
def score_documents(
    model: torch.nn.Module,
    docs: Iterable[np.ndarray],
    lengths: np.ndarray,
    eos_id: int,
    seq_len: int,
    batch_size: int,
    device: torch.device,
    desc: str = "eval",
    on_targets: Callable[[np.ndarray], None] | None = None,
) -> Score:
    """Sum the model's cross-entropy over every token of `docs`, whose token counts are `lengths`
    (for the progress bar; see the module docstring). `on_targets`, if given, is handed each batch's
    target losses (float64, in the stream's order: `per_document.DocumentLosses`)."""
    model.eval()
    targets_total = int(np.sum(np.asarray(lengths, dtype=np.int64) + 1))
    nats, counted, windows, batches = 0.0, 0, 0, 0
    batch: list[np.ndarray] = []

    def run(rows: list[np.ndarray]) -> None:
        nonlocal nats, counted, windows, batches
        t = max(len(r) for r in rows) - 1
        inputs = torch.full((len(rows), t), eos_id, dtype=torch.long)
        targets = torch.full((len(rows), t), IGNORE_INDEX, dtype=torch.long)
        for i, r in enumerate(rows):
            inputs[i, : len(r) - 1] = torch.from_numpy(r[:-1])
            targets[i, : len(r) - 1] = torch.from_numpy(r[1:])
        logits = model(inputs.to(device))
        ce = F.cross_entropy(
            logits.float().flatten(0, 1), targets.to(device).flatten(), reduction="sum", ignore_index=IGNORE_INDEX
        )
        nats += float(ce.double())
        if on_targets is not None:
            flat = targets.flatten()
            every = F.cross_entropy(logits.float().flatten(0, 1), flat.to(device), reduction="none")
            on_targets(every[(flat != IGNORE_INDEX).to(device)].double().cpu().numpy())
        n = int((targets != IGNORE_INDEX).sum())
        counted += n
        windows += len(rows)
        batches += 1
        bar.update(n)

    with progress_bar(total=targets_total, desc=desc, unit="tok", unit_scale=True) as bar:
        for window in stream_windows(docs, eos_id, seq_len):
            batch.append(window)
            if len(batch) == batch_size:
                run(batch)
                batch = []
        if batch:
            run(batch)
    assert counted == targets_total, (counted, targets_total)
    return Score(len(lengths), counted, nats, windows, batches)
