"""Expert parallelism (`parallel.ep`, train/parallel/expert.py) against one process, on a tiny mixture of
experts (4 experts, top-2, both layers sparse): `ep: 2` on 2 processes (fsdp; zero2 with activation
checkpointing) trains 6 steps with the losses, grad norms and validation loss of one process (under
bf16, of one bf16 process to bf16's rounding). A checkpoint
written under ep 2 holds the experts in their full shape and resumes on one process with the model and
AdamW state bit for bit, then trains on as the ep 2 run did; a one-process checkpoint resumes under ep 2.
On 4 processes (slow): the experts also FSDP-sharded outside the ep group, under hsdp, and one per rank.

One 2-process launch; the one-process runs (the reference, which writes a checkpoint, and the resume from
the ep 2 checkpoint) run in this process through the same worker (fixtures/train_worker.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint import FileSystemReader

from fixtures.train_worker import launch, run
from pretrainkit.train.parallel.distributed import end_process_groups, init_distributed

STEPS, SAVED = 6, 3
MOE = {"family": "qwen3_moe", "n_experts": 4, "experts_per_token": 2, "moe_ffn_dim": 24}
REL = 1e-5  # measured: at most 2.3e-7 (grad norms), 5e-8 (losses) over the 6 steps


def spec(name: str, parallel, config: dict | None = None, **checkpoint) -> dict:
    """A 6-step run of the MoE; `save` / `resume` as the worker takes them."""
    config = {"parallel": parallel, "model": MOE, **(config or {})}
    return {"name": name, "steps": STEPS, "global_size": 8, "micro_size": 2, "config": config, **checkpoint}


def in_process(specs: list[dict]) -> dict:
    """The worker's runs on one process: this one."""
    env = init_distributed("cpu")
    try:
        return {s["name"]: run(s, env) for s in specs}
    finally:
        end_process_groups()


def assert_same(a: dict, b: dict) -> None:
    for key in ("loss", "grad_norm", "val"):
        assert a[key] == pytest.approx(b[key], rel=REL), key


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, dict]:
    tmp = tmp_path_factory.mktemp("ep")

    def save(name: str) -> dict:
        return {"save": {"step": SAVED, "dir": str(tmp / name), "state": str(tmp / f"{name}.pt")}}

    def resume(name: str, state: str) -> dict:
        return {"resume": {"dir": str(tmp / name), "state": str(tmp / state)}}

    results = in_process([spec("one", "ddp", **save("one")), spec("one_bf16", "fsdp", {"precision": "bf16"})])
    ep2 = {"data": "fsdp", "ep": 2}
    two = [
        spec("ep2", ep2, **save("ep2")),
        spec("ep2_zero2_ckpt", {"data": "zero2", "ep": 2}, {"activation_checkpointing": True}),
        spec("ep2_bf16", ep2, {"precision": "bf16"}),
        spec("ep2_from_one", ep2, **resume("one", "ep2_from_one.pt")),
    ]
    results |= launch(tmp, two, 2)
    results |= in_process([spec("one_from_ep2", "ddp", **resume("ep2", "one_from_ep2.pt"))])
    return tmp, results


@pytest.mark.distributed
def test_ep2_trains_like_one_process(runs) -> None:
    _, r = runs
    assert r["one"]["loss"][0] != r["one"]["loss"][-1]  # it trained
    assert_same(r["ep2"], r["one"])
    assert_same(r["ep2_zero2_ckpt"], r["one"])
    # Every FSDP module (2 blocks, their experts, the root) averages over the 2 data-parallel ranks.
    assert r["ep2"]["divide_factors"] == [2.0] * 5


@pytest.mark.distributed
def test_ep2_bf16_trains_like_one_bf16_process(runs) -> None:
    _, r = runs
    # Both under FSDP's bf16 policy; bf16 keeps 8 bits of mantissa and the two sum in other orders (measured
    # 1.4e-5 on losses, 2.6e-4 on grad norms).
    for key in ("loss", "grad_norm", "val"):
        assert r["ep2_bf16"][key] == pytest.approx(r["one_bf16"][key], rel=1e-3), key
    assert r["one_bf16"]["loss"] != pytest.approx(r["one"]["loss"], rel=1e-6)  # bf16 was used


@pytest.mark.distributed
def test_an_ep2_checkpoint_resumes_on_one_process_bit_for_bit(runs) -> None:
    tmp, r = runs
    saved, loaded = torch.load(tmp / "ep2.pt"), torch.load(tmp / "one_from_ep2.pt")
    assert saved["model"].keys() == loaded["model"].keys() and saved["optim"].keys() == loaded["optim"].keys()
    for name, value in saved["model"].items():
        assert torch.equal(loaded["model"][name], value), name
    for name, state in saved["optim"].items():
        for key, value in state.items():
            assert torch.equal(loaded["optim"][name][key], value), (name, key)
    # The experts were saved whole, under the names and shapes a one-process checkpoint has.
    shapes = {
        name: FileSystemReader(tmp / which / "step-0000003").read_metadata().state_dict_metadata
        for name, which in (("one", "one"), ("ep2", "ep2"))
    }
    assert {k: getattr(v, "size", None) for k, v in shapes["ep2"].items()} == {
        k: getattr(v, "size", None) for k, v in shapes["one"].items()
    }
    assert tuple(shapes["ep2"]["model.layers.1.feed_forward.experts.w2"].size) == (4, 32, 24)
    # From there one process trains on as the ep 2 run did.
    assert r["one_from_ep2"]["loss"] == pytest.approx(r["ep2"]["loss"][SAVED:], rel=REL)
    assert r["one_from_ep2"]["val"] == pytest.approx(r["ep2"]["val"], rel=REL)


@pytest.mark.distributed
def test_a_one_process_checkpoint_resumes_under_ep2(runs) -> None:
    tmp, r = runs
    one, resumed = torch.load(tmp / "one.pt"), torch.load(tmp / "ep2_from_one.pt")
    for name, value in one["model"].items():
        assert torch.equal(resumed["model"][name], value), name
    assert r["ep2_from_one"]["loss"] == pytest.approx(r["one"]["loss"][SAVED:], rel=REL)
    assert r["ep2_from_one"]["val"] == pytest.approx(r["one"]["val"], rel=REL)


@pytest.mark.slow
@pytest.mark.distributed
def test_four_processes_shard_experts_outside_the_ep_group(runs, tmp_path: Path) -> None:
    _, r = runs
    four = launch(
        tmp_path,
        [
            spec("fsdp_ep2", {"data": "fsdp", "ep": 2}),  # each expert FSDP-sharded over the other ep group
            spec("hsdp_ep2", {"data": "hsdp", "dp_replicate": 2, "ep": 2}),  # and replicated
            spec("ep4", {"data": "fsdp", "ep": 4}),  # one expert per rank
        ],
        4,
    )
    for name in ("fsdp_ep2", "hsdp_ep2", "ep4"):
        assert_same(four[name], r["one"])
        assert four[name]["divide_factors"] == [4.0] * 5
