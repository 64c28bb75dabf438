"""The fault suite's workspace: built once per session, never modified (each test damages copies)."""

from __future__ import annotations

import pytest

from fixtures.corpora import DATA, need_data
from fixtures.fault_commands import Workspace


@pytest.fixture(scope="session")
def workspace(tmp_path_factory) -> Workspace:
    need_data(DATA / "reuters21578")
    return Workspace.build(tmp_path_factory.mktemp("fault-workspace"))
