"""Atomic writes of several files at once: each is synced to disk before it takes its name, and a
failure leaves none of them and no temporaries."""

from __future__ import annotations

import os

import pytest

from pretrainkit import files
from pretrainkit.files import TMP_MARK, atomic_writes


def test_atomic_writes_syncs_every_file_before_it_is_renamed(tmp_path, monkeypatch):
    paths = [tmp_path / f"f{i}.bin" for i in range(5)]
    synced = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        assert TMP_MARK in name and os.path.getsize(name) > 0  # the data is there, under its temporary name
        synced.append(name.split(TMP_MARK)[0])
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    with atomic_writes(paths) as outs:
        for i, f in enumerate(outs):
            f.write(bytes([i]) * (i + 1))
        assert not any(p.exists() for p in paths)
    assert sorted(synced) == sorted(str(p) for p in paths)
    assert [p.read_bytes() for p in paths] == [bytes([i]) * (i + 1) for i in range(5)]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)


def test_atomic_writes_that_fail_leave_nothing(tmp_path):
    paths = [tmp_path / "a.bin", tmp_path / "b.bin"]
    with pytest.raises(RuntimeError):
        with atomic_writes(paths) as outs:
            outs[0].write(b"x")
            raise RuntimeError("stop")
    assert list(tmp_path.iterdir()) == []
