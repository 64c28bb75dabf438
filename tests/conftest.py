"""Session-wide test settings: the loader-index cache lives in the session's temporary folder; copies
of a tokenizer.json that keep or change its vocabulary; in-process training on one thread; the files of
the heavy tiers collected first. (The tests that start Ray inside the test process run in a pytest
process of their own: Makefile, test.)"""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

_BUCKET_NUMBERS = itertools.count()
HEAVY_TIERS = ("slow", "distributed", "faults")


@pytest.hookimpl(trylast=True)  # after tests/faults/conftest.py has marked its tests
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The files holding a test of a heavy tier first, each file's tests kept together and in order.
    pytest-xdist (`--dist loadfile --no-loadscope-reorder`: Makefile) hands out files in this order, so
    the long ones start first and the last minutes go to short files on every worker: left to itself it
    hands out files by their number of tests, and a file of one 2-minute test came last."""
    heavy = {item.path for item in items if any(item.get_closest_marker(tier) for tier in HEAVY_TIERS)}
    items.sort(key=lambda item: item.path not in heavy)


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


@pytest.fixture
def tokenizer_variant():
    """Write a copy of a BPE tokenizer.json: "reserialized" is the same tokenizer in other bytes (other
    indentation, sorted keys, each merge as a pair); "swapped" exchanges the ids of two ordinary tokens
    (the same vocab size and merges, other ids)."""

    def write(source: Path, out: Path, how: str) -> Path:
        data = json.loads(Path(source).read_text(encoding="utf-8"))
        model = data["model"]
        if how == "reserialized":
            model["merges"] = [m.split(" ") if isinstance(m, str) else m for m in model["merges"]]
            text = json.dumps(data, indent=4, sort_keys=True, ensure_ascii=True)
        elif how == "swapped":
            added = {t["id"] for t in data["added_tokens"]}
            a, b = [token for token, i in sorted(model["vocab"].items(), key=lambda kv: kv[1]) if i not in added][-2:]
            model["vocab"][a], model["vocab"][b] = model["vocab"][b], model["vocab"][a]
            text = json.dumps(data, ensure_ascii=False)
        else:
            raise ValueError(how)
        assert text != Path(source).read_text(encoding="utf-8")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(text, encoding="utf-8")
        return out

    return write


@pytest.fixture
def one_thread():
    """In-process training on one thread, as torchrun's processes run: on this shared 2-core machine
    two OpenMP threads run ~30x slower whenever another process competes for a core."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def s3_server_session():
    """One S3 server (moto, on the loopback, keys checked) for the session's tests (`fixtures/s3_server.py`)."""
    from fixtures.s3_server import s3_server

    with s3_server() as server:
        yield server


@pytest.fixture
def s3(s3_server_session, monkeypatch):
    """The session's S3 server, with this test's processes configured for it through the standard AWS
    variables, and a bucket of the test's own (`s3.bucket`, as `s3://NAME`)."""
    import s3fs

    for name, value in s3_server_session.environment().items():
        monkeypatch.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()  # instances hold the credentials they were made with
    s3_server_session.bucket = s3_server_session.make_bucket(f"test-{next(_BUCKET_NUMBERS)}")
    yield s3_server_session
    s3fs.S3FileSystem.clear_instance_cache()
