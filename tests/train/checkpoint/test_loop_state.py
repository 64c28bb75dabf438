"""LoopState: the loop's part of a checkpoint's meta.json, read by name and type from the layout checkpoints
have always had (`extra`), the oldest ones without `mixture` and `tokenizer` included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrainkit.errors import UserError
from pretrainkit.train.checkpoint.loop_state import LOOP_KEY, LoopState

EXTRA = {
    "loader": {"seq_len": 32, "global_batch_size": 8, "batch": 5},
    "mixture": "f" * 64,
    "tokenizer": "t" * 64,
    "next_batch": 6,
    "skip": [4, 2],
    "spikes": {"losses": [3.0], "grad_norms": [1.0]},
    "rollbacks": 1,
}


def test_round_trip_through_json_and_the_old_layout(tmp_path: Path) -> None:
    meta = json.loads(json.dumps({"step": 6, LOOP_KEY: EXTRA}))
    state = LoopState.from_meta(meta, tmp_path / "meta.json")
    assert (state.next_batch, state.skip, state.rollbacks, state.loader["seq_len"]) == (6, (2, 4), 1, 32)
    assert (state.mixture_fingerprint, state.tokenizer_sha256) == ("f" * 64, "t" * 64)
    assert LoopState.from_meta({LOOP_KEY: state.to_json()}, tmp_path) == state
    old = {k: v for k, v in EXTRA.items() if k not in ("mixture", "tokenizer")}
    assert LoopState.from_meta({LOOP_KEY: old}, tmp_path).tokenizer_sha256 is None
    assert LoopState.from_meta({"step": 6}, tmp_path) is None  # no loop's record (e.g. a bench's checkpoint)


def test_a_malformed_loop_state_names_the_file_and_the_key(tmp_path: Path) -> None:
    broken = {k: v for k, v in EXTRA.items() if k != "next_batch"}
    with pytest.raises(UserError, match=rf"{tmp_path / 'meta.json'}: extra: missing or malformed .*next_batch"):
        LoopState.from_meta({LOOP_KEY: broken}, tmp_path / "meta.json")
