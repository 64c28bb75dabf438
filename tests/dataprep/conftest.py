"""Fixtures for dataprep tests: real corpora from ../shared/data written as JSONL inputs."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import corpora  # noqa: E402


def need_shared_data() -> None:
    if corpora.shared_data_dir() is None:
        pytest.skip("../shared/data is absent: the real corpora these tests use live there")


@pytest.fixture(scope="session")
def reuters_docs() -> list[tuple[str, str]]:
    need_shared_data()
    return corpora.reuters_documents(files=6)


@pytest.fixture(scope="session")
def license_docs() -> list[tuple[str, str]]:
    need_shared_data()
    return corpora.license_documents()


@pytest.fixture(scope="session")
def reuters_jsonl(tmp_path_factory, reuters_docs) -> Path:
    return corpora.write_jsonl(reuters_docs, tmp_path_factory.mktemp("reuters") / "reuters.jsonl")
