"""Session-wide test settings: the loader-index cache lives in the session's temporary folder."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def index_cache_dir(tmp_path_factory):
    """Every test (and every process it starts) caches shard-set indices in one temporary folder."""
    path = tmp_path_factory.mktemp("ptk-cache")
    old = os.environ.get("PTK_CACHE_DIR")
    os.environ["PTK_CACHE_DIR"] = str(path)
    yield path
    if old is None:
        os.environ.pop("PTK_CACHE_DIR", None)
    else:
        os.environ["PTK_CACHE_DIR"] = old
