"""The filters' character tables (`kernels.tables`): made from Python's `str` methods once, saved where
numba keeps its machine code, and read back by later processes; a damaged file is made again."""

from __future__ import annotations

import numpy as np
import pytest

from pretrainkit.dataprep.filter import kernels


@pytest.fixture
def fresh_tables(monkeypatch, tmp_path):
    """`tables()` with its saved file under tmp_path and nothing remembered by this process."""
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    kernels.tables.cache_clear()
    yield kernels._tables_file()
    kernels.tables.cache_clear()


def test_tables_are_saved_once_and_read_back_the_same(fresh_tables):
    made = kernels._made_tables()
    first = kernels.tables()
    assert fresh_tables.is_file()
    kernels.tables.cache_clear()
    again = kernels.tables()
    for a, b, c in zip(made, first, again):
        assert a.dtype == b.dtype == c.dtype and np.array_equal(a, b) and np.array_equal(a, c)
    words = kernels.scan_words("Don't STOP")  # the kernels read the tables read back
    assert words.count == 2 and words.lower_hashes[1] == kernels.word_hash("stop")[0]


@pytest.mark.parametrize("damage", [b"", b"not a zip file", "truncated"])
def test_a_damaged_tables_file_is_made_again(fresh_tables, damage):
    kernels.tables()
    whole = fresh_tables.read_bytes()
    fresh_tables.write_bytes(whole[: len(whole) // 2] if damage == "truncated" else damage)
    kernels.tables.cache_clear()
    classes, lower = kernels.tables()
    made = kernels._made_tables()
    assert np.array_equal(classes, made[0]) and np.array_equal(lower, made[1])
    assert fresh_tables.read_bytes() == whole  # saved whole again
