"""`ptk mix search --executor ray`: the proxy runs as Ray tasks on a local 2-CPU Ray instance give what
local runs give."""

from __future__ import annotations

import logging
import os

import pytest

# Ray binds the instance it starts to the machine's network address unless told this; the test stays
# on the loopback interface.
os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
import ray  # noqa: E402  (a dev dependency: this test fails, not skips, without it)

pytestmark = pytest.mark.ray_in_process


@pytest.fixture(scope="module")
def local_ray():
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=96 << 20,
        log_to_driver=False,
        logging_level=logging.ERROR,
    )
    yield
    ray.shutdown()


def test_proxy_runs_on_ray_give_what_local_runs_give(search, ptk, local_ray, tmp_path) -> None:
    out = tmp_path / "out"
    code, _, err = ptk(*search.argv(out), "--runs", 3, "--executor", "ray", "--parallel", 2)
    assert code == 0, err[-3000:]
    assert search.first_runs(out, 3) == search.first_runs(search.out, 3)
