"""pretrainkit.files: what a failed write removes (only temporaries that are the command's)."""

from __future__ import annotations

import errno

import pytest

from pretrainkit.errors import UserError
from pretrainkit.files import remove_temporaries, temporary_path, writing_into


def test_a_failed_write_removes_this_process_temporaries_by_name_and_nothing_else(tmp_path):
    mine = temporary_path(tmp_path / "sub" / "index.exact")  # a write cut short before its own cleanup
    mine.parent.mkdir()
    mine.write_bytes(b"half")
    others = [tmp_path / "sub" / "index.exact.tmp-1", tmp_path / "notes.tmp-v2.txt"]
    for p in others:
        p.write_bytes(b"not this process's")
    with pytest.raises(UserError, match="no space left on device"), writing_into(tmp_path):
        raise OSError(errno.ENOSPC, "No space left on device")
    assert not mine.exists()
    assert all(p.read_bytes() == b"not this process's" for p in others)


def test_an_owned_directory_loses_only_names_of_temporaries(tmp_path):
    left = [tmp_path / "shard-00000.bin.tmp-4711", tmp_path / "deep" / "part.tmp-12"]
    kept = [tmp_path / "draft.tmp-v2.txt", tmp_path / "a.tmp-", tmp_path / "deep" / "b.tmp-12.txt"]
    (tmp_path / "deep").mkdir()
    for p in left + kept:
        p.write_bytes(b"x")
    remove_temporaries(tmp_path, recursive=True)
    assert [p.exists() for p in left + kept] == [False] * len(left) + [True] * len(kept)
