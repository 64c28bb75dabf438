"""A spike's documents in events.jsonl: every target of the step's global batch attributed to the document it
belongs to (exact offsets, document masking, documents spanning windows), ranked by loss contribution; and in
a real run, a spike planted in some rows names those rows' documents, with losses that add up to the step's."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from pretrainkit.train.config import load_config
from pretrainkit.train.loop import spike_documents
from pretrainkit.train.loop.run import run_training
from pretrainkit.train.loop.spike_documents import top_documents
from pretrainkit.train.reports.report import DOCUMENTS_SHOWN, summary_text
from pretrainkit.train.reports.run_log import read_run
from pretrainkit.train.reports.trace import trace_step


def segment(source: str, index: int, start: int, end: int) -> dict:
    return {"source": source, "shard": "s.arrow", "index": index, "id": f"{source}{index}", "input": None,
            "line": None, "start": start, "end": end}  # fmt: skip


def test_targets_belong_to_the_document_of_the_token_they_predict() -> None:
    # seq_len 4: windows of 5 tokens. Window 0: doc a's tokens 3-5, doc b's 0-2; window 1: doc b's 2-7.
    windows = [[segment("x", 0, 3, 6), segment("y", 1, 0, 2)], [segment("y", 1, 2, 7)]]
    losses = np.array([[1.0, 2.0, 4.0, 8.0], [16.0, 32.0, 64.0, 128.0]])
    counted = np.ones_like(losses, dtype=bool)
    b, a = top_documents(windows, losses, counted)
    # Window 0's first token is no target there; a's other two are targets 0 and 1, b's two are targets 2, 3;
    # window 1 is all b's: its first token again no target.
    assert (b["index"], b["tokens"], b["loss"]) == (1, 6, 4.0 + 8.0 + 16 + 32 + 64 + 128)
    assert (a["index"], a["tokens"], a["loss"]) == (0, 2, 3.0)
    assert b["share"] == pytest.approx(b["loss"] / 255) and a["share"] == pytest.approx(3 / 255)
    assert {k: a[k] for k in ("source", "shard", "id", "input", "line")} == {
        "source": "x", "shard": "s.arrow", "id": "x0", "input": None, "line": None,
    }  # fmt: skip
    counted[0, 2] = False  # document masking: b's first token is no target
    losses[0, 2] = 0.0
    assert top_documents(windows, losses, counted)[0]["tokens"] == 5
    assert [d["index"] for d in top_documents(windows, losses, counted, top=1)] == [1]


def test_ranking_puts_a_non_finite_document_first_and_breaks_ties_by_source_and_index() -> None:
    windows = [[segment("b", 0, 0, 3)], [segment("a", 5, 0, 3)], [segment("a", 2, 0, 3)], [segment("c", 1, 0, 3)]]
    losses = np.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0], [1.0, math.nan]])
    ranked = top_documents(windows, losses, np.ones_like(losses, dtype=bool))
    assert [(d["source"], d["index"]) for d in ranked] == [("c", 1), ("a", 2), ("a", 5), ("b", 0)]


def test_segments_that_do_not_fill_a_window_are_an_error() -> None:
    with pytest.raises(ValueError, match="window 0: segments of 4 tokens, not seq_len . 1 = 5"):
        top_documents([[segment("x", 0, 0, 4)]], np.zeros((1, 4)), np.ones((1, 4), dtype=bool))


SPIKE_BATCH, GARBAGE_ROWS = 9, range(2, 6)  # global rows of the spike's batch replaced by random bytes


def garbage_rows(batch: int, micro: list) -> list:
    """Global batch SPIKE_BATCH's rows GARBAGE_ROWS (micro-batches of 2 rows, one process) as random bytes."""
    if batch != SPIKE_BATCH:
        return micro
    g, out, row = torch.Generator().manual_seed(batch), [], 0
    for x, y in micro:
        x, y = x.clone(), y.clone()
        for i in range(len(x)):
            if row + i in GARBAGE_ROWS:
                window = torch.randint(0, 256, (x.shape[1] + 1,), generator=g)
                x[i], y[i] = window[:-1], window[1:]
        out.append((x, y))
        row += len(x)
    return out


@pytest.mark.parametrize("masking", [False, True])
def test_a_planted_spike_names_its_documents_and_their_losses_add_up_to_the_step(
    kit, tmp_path: Path, monkeypatch, masking: bool
) -> None:
    monkeypatch.setattr(spike_documents, "TOP_DOCUMENTS", 1000)  # every document of the batch, to add them up
    config = kit.config(
        tmp_path,
        max_steps=SPIKE_BATCH + 1,
        data={"document_masking": masking},
        checkpoint={"every": 0},
        eval={"every": 0},
        spikes={"action": "skip", "window": 5, "min_history": 4, "loss_sigmas": 1.0, "grad_factor": 0},
    )
    run_training(load_config(config), str(config), transform=garbage_rows)
    run = tmp_path / "run"
    (event,) = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
    rows = kit.rows(run)
    assert (event["step"], event["batch"], event["action"]) == (SPIKE_BATCH + 1, SPIKE_BATCH, "skip")
    docs = event["documents"]
    # Every target of the step counted once, and the recomputed forward gives the step's loss.
    step_tokens = rows[-1]["tokens"] - rows[-2]["tokens"]
    assert sum(d["tokens"] for d in docs) == step_tokens
    assert math.fsum(d["loss"] for d in docs) / step_tokens == pytest.approx(event["loss"], rel=1e-5)
    assert math.fsum(d["share"] for d in docs) == pytest.approx(1.0)
    assert [d["loss"] for d in docs] == sorted((d["loss"] for d in docs), reverse=True)
    # Each is found as `ptk trace` finds it; the documents mostly in planted rows have the highest mean loss.
    trace = trace_step(str(run), event["step"])
    by_key = {(d["source"], d["index"]): d for d in docs}
    planted: dict[tuple, list[int]] = {}  # a document's tokens in planted rows, and in all
    for w, window in enumerate(trace["windows"]):
        for s in window["segments"]:
            key = (s["source"], s["index"])
            assert {k: s[k] for k in ("shard", "id", "input", "line")} == {
                k: by_key[key][k] for k in ("shard", "id", "input", "line")
            }
            n = planted.setdefault(key, [0, 0])
            n[0] += (s["end"] - s["start"]) * (w in GARBAGE_ROWS)
            n[1] += s["end"] - s["start"]
    assert len(docs) == len(planted)
    mean = {key: d["loss"] / d["tokens"] for key, d in by_key.items() if d["tokens"]}
    mostly = [m for key, m in mean.items() if planted[key][0] * 2 > planted[key][1]]
    clean = [m for key, m in mean.items() if not planted[key][0]]
    assert mostly and clean and min(mostly) > max(clean)
    # `ptk report` lists the first few under the event, the highest contribution first.
    summary = summary_text(read_run(run)).splitlines()
    at = summary.index(next(line for line in summary if line.startswith(f"    step {SPIKE_BATCH + 1}: loss ")))
    top = docs[0]
    assert summary[at + 1] == (
        f"      {top['id']} ({top['source']} {top['shard']} #{top['index']}): loss {top['loss']:.4g} over "
        f"{top['tokens']:,} tokens (mean {top['loss'] / top['tokens']:.4g}, {top['share']:.1%} of the step's)"
    )
    more = len(docs) - DOCUMENTS_SHOWN
    assert summary[at + 1 + DOCUMENTS_SHOWN] == f"      ... {more} more document{'s' * (more > 1)} in the event"
