"""The compiled kernels' cache (`pretrainkit.dataprep.kernels.numba_cache`): a first run says it compiles
and fills the cache, workers included; a second run finds it and says nothing."""

from __future__ import annotations

import json

import pytest

from fixtures.first_run import run_twice_from_an_empty_cache
from pretrainkit.dataprep.kernels.numba_cache import cache_dir

MESSAGE = "compiling kernels (first run only)"


@pytest.mark.slow  # every kernel compiled into an empty cache: half a minute
def test_a_first_run_says_it_compiles_and_fills_the_cache_a_second_run_is_silent(tmp_path, reuters_docs):
    from fixtures.corpora import write_jsonl

    src = write_jsonl(reuters_docs[:200] + reuters_docs[:20], tmp_path / "in" / "r.jsonl")
    runs = run_twice_from_an_empty_cache(["dedup", str(src), "--workers", "2"], tmp_path)
    cache = tmp_path / "numba-cache"
    assert MESSAGE in runs[0].stderr and MESSAGE not in runs[1].stderr
    cached = {p.name.split("-")[0] for p in cache.rglob("*.nbi")}
    # minhash's kernels compile in the scan's workers, rows' in the resolve's: all in the one cache
    assert any(n.startswith("minhash.") for n in cached) and any(n.startswith("rows.") for n in cached), cached
    assert json.loads((tmp_path / "out0" / "stats.json").read_text()) == json.loads(
        (tmp_path / "out1" / "stats.json").read_text()
    )


def test_the_cache_goes_to_the_users_cache_dir_only_where_the_package_dir_is_not_writable(tmp_path):
    unwritable = (
        tmp_path / "no-such-site-packages" / "dedup"
    )  # os.access: not writable (a missing folder, even to root)
    xdg = {"XDG_CACHE_HOME": str(tmp_path / "xdg"), "HOME": str(tmp_path / "home")}
    assert cache_dir(unwritable, xdg) == str(tmp_path / "xdg" / "pretrainkit" / "numba")
    assert cache_dir(unwritable, {"HOME": str(tmp_path / "home")}) == str(
        tmp_path / "home" / ".cache" / "pretrainkit" / "numba"
    )
    assert cache_dir(unwritable, dict(xdg, NUMBA_CACHE_DIR="/chosen")) is None  # the user's choice stands
    assert cache_dir(tmp_path, xdg) is None  # numba writes beside the modules
