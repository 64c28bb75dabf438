"""A clone without ../shared/data and with an empty user cache (no `make test-data` run): the tests that
read the real corpora fail and say what they need, instead of skipping (106 of 217 used to skip and the
suite passed); skipping them takes an explicit PTK_ALLOW_MISSING_DATA=1, which CI ignores."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("pretrainkit", "dataprep", "shards", "mixtures", "train", "bench", "fixtures")


def run_suite_part(clone: Path, **env: str) -> subprocess.CompletedProcess:
    base = {k: v for k, v in os.environ.items() if k not in ("CI", "PTK_ALLOW_MISSING_DATA")}
    base["XDG_CACHE_HOME"] = str(clone.parent / "empty-cache")  # the data folder is there: absent
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/shards/test_shards_reader.py"]
    return subprocess.run(cmd, cwd=clone, capture_output=True, text=True, env={**base, "PYTHONPATH": str(clone), **env})


@pytest.mark.slow
def test_a_clone_without_the_shared_data_fails_loudly(tmp_path: Path) -> None:
    clone = tmp_path / "clone"  # its ../shared/data is tmp_path/shared/data: absent, so the cache is read
    ignore = shutil.ignore_patterns("__pycache__", "results")
    for name in PACKAGES:
        shutil.copytree(ROOT / name, clone / name, ignore=ignore)
    shutil.copytree(ROOT / "tests" / "shards", clone / "tests" / "shards", ignore=ignore)
    for name in ("pyproject.toml", "tests/conftest.py"):
        shutil.copy(ROOT / name, clone / name)

    loud = run_suite_part(clone)
    assert loud.returncode == 1, loud.stdout[-2000:]
    data = tmp_path / "empty-cache" / "pretrainkit" / "test-data"
    assert f"{data}/wikitext2/valid.txt is absent: the tests read real corpora" in loud.stdout
    assert "`make test-data` fills" in loud.stdout
    assert " skipped" not in loud.stdout

    asked = run_suite_part(clone, PTK_ALLOW_MISSING_DATA="1")
    assert asked.returncode == 0 and " skipped" in asked.stdout and " failed" not in asked.stdout, asked.stdout[-2000:]

    under_ci = run_suite_part(clone, PTK_ALLOW_MISSING_DATA="1", CI="true")
    assert under_ci.returncode == 1 and "is absent" in under_ci.stdout, under_ci.stdout[-2000:]
