"""The compiled copy of kept pieces (records, shingle sets, ids): exactly the pieces a slow reference picks."""

from __future__ import annotations

import numpy as np
import pytest

from pretrainkit.dataprep.kernels.pieces import copy_kept


@pytest.mark.parametrize("ends_with_newline", [True, False])
@pytest.mark.parametrize("kept_share", [0.0, 0.3, 0.9])
def test_copy_kept_takes_exactly_the_kept_pieces(ends_with_newline, kept_share):
    rng = np.random.default_rng(int(kept_share * 10) + ends_with_newline)
    lines = [bytes(rng.integers(32, 127, size=rng.integers(0, 40), dtype=np.uint8)) + b"\n" for _ in range(500)]
    block = b"".join(lines) + (b"" if ends_with_newline else b"a record's start")
    data = np.frombuffer(block, np.uint8)
    ends = np.flatnonzero(data == ord("\n")) + 1
    flags = rng.random(len(lines) + (not ends_with_newline)) < kept_share
    pieces = lines + ([] if ends_with_newline else [b"a record's start"])
    out = np.empty(len(block), np.uint8)
    copied = copy_kept(data, ends, flags, out)
    assert out[:copied].tobytes() == b"".join(p for p, f in zip(pieces, flags) if f)
