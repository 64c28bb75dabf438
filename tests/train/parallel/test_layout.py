"""The `parallel` key: its string and mapping forms, and the layout checks that name the key and the divisor."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.train.config import config_from_dict, load_config, to_dict
from pretrainkit.train.model.resolve import model_config
from pretrainkit.train.parallel.mesh import Layout, check_layout

BASE = {
    "run_dir": "r",
    "data": {"mixture": "m.yaml", "seq_len": 32},
    "max_steps": 400,
    "model": {"d_model": 64, "n_layers": 4, "n_heads": 4, "n_kv_heads": 2, "ffn_hidden": 96, "tie_embeddings": False},
    "batch": {"global_size": 16, "micro_size": 2},
}

MOE = {"family": "qwen3_moe", "n_experts": 4, "experts_per_token": 2, "moe_ffn_dim": 32}


def layout(world: int, parallel, model: dict | None = None, batch: dict | None = None):
    raw = {
        **BASE,
        "parallel": parallel,
        "model": {**BASE["model"], **(model or {})},
        "batch": {**BASE["batch"], **(batch or {})},
    }
    cfg = config_from_dict(raw, "run.yaml")
    return check_layout(cfg, model_config(cfg, 100, "run.yaml"), world, "run.yaml")


def test_string_form_is_the_mapping_with_data_only(tmp_path: Path) -> None:
    cfg = config_from_dict({**BASE, "parallel": "fsdp"}, "x")
    assert (cfg.parallel.data, cfg.parallel.tp, cfg.parallel.pp) == ("fsdp", 1, 1)
    assert to_dict(cfg)["parallel"]["data"] == "fsdp"
    # --set works on either form, and the resolved config (mapping form) loads again.
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump({**BASE, "parallel": "zero2"}))
    cfg = load_config(path, ["parallel.tp=2", "parallel.pp_schedule=gpipe"])
    assert (cfg.parallel.data, cfg.parallel.tp, cfg.parallel.pp_schedule) == ("zero2", 2, "gpipe")
    path.write_text(yaml.safe_dump(to_dict(cfg)))
    assert load_config(path).parallel == cfg.parallel
    assert load_config(path, ["parallel=ddp"]).parallel.tp == 1


def test_layouts_split_the_world_with_tp_innermost() -> None:
    assert layout(8, {"data": "fsdp", "tp": 2, "pp": 2}) == (Layout(pp=2, dp_replicate=1, dp_shard=2, tp=2), 4)
    assert layout(8, {"data": "hsdp", "dp_replicate": 2}) == (Layout(pp=1, dp_replicate=2, dp_shard=4, tp=1), 1)
    assert layout(2, {"pp": 2, "pp_microbatches": 4})[1] == 4  # dp 1: ddp needs no wrapper
    assert config_from_dict({**BASE, "parallel": {"pp_schedule": "interleaved_1f1b"}}, "x").parallel.stages == 2
    # Expert parallelism takes its ranks from dp_shard (within each hsdp replica).
    hsdp_ep = {"data": "hsdp", "dp_replicate": 2, "ep": 2}
    assert layout(8, hsdp_ep, MOE)[0] == Layout(pp=1, dp_replicate=2, dp_shard=4, tp=1, ep=2)


@pytest.mark.parametrize(
    "world, parallel, model, message",
    [
        (
            2,
            {"tp": 2},
            {"n_heads": 3, "n_kv_heads": 3, "d_model": 48},
            "model.n_heads: 3 does not split over parallel.tp = 2",
        ),
        (4, {"tp": 4}, {"n_kv_heads": 2}, "model.n_kv_heads: 2 does not split over parallel.tp = 4"),
        (2, {"tp": 2}, {"ffn_hidden": 97}, "model.ffn_hidden: 97 does not split over parallel.tp = 2"),
        (2, {"pp": 2}, {"n_layers": 3}, r"model.n_layers: 3 does not split into parallel.pp x stages_per_rank = 2 x 1"),
        (
            2,
            {"pp": 2, "pp_schedule": "interleaved_1f1b"},
            {"n_layers": 6},
            "model.n_layers: 6 does not split into .* = 4",
        ),
        (2, {"pp": 2}, {"tie_embeddings": True}, "model.tie_embeddings: .* set model.tie_embeddings: false"),
        (2, {"pp": 2}, {"family": "gemma3", "tie_embeddings": True}, "model.tie_embeddings: .* different pipeline"),
        (6, {"tp": 4}, {"n_kv_heads": 4}, r"parallel: tp x pp = 4 x 1 = 4 does not divide the 6 processes"),
        (
            6,
            {"data": "hsdp", "dp_replicate": 4},
            {},
            "parallel.dp_replicate: 4 does not divide the data-parallel size 6",
        ),
        (4, {"data": "ddp", "tp": 2}, {}, "parallel.data: ddp does not compose with tp or pp over 2 data-parallel"),
        (2, {"pp": 2, "pp_microbatches": 3}, {}, "parallel.pp_microbatches: 3 does not divide the 16 rows"),
        (2, {"pp": 2, "pp_microbatches": 1}, {}, "parallel.pp_microbatches: 1f1b needs at least pp = 2"),
        (3, {"data": "fsdp"}, {}, "batch.global_size: 16 is not a multiple of batch.micro_size x data-parallel groups"),
        (
            2,
            {"data": "fsdp", "ep": 2},
            {},
            r"model.n_experts: None does not split over parallel.ep = 2 \(a dense model",
        ),
        (
            4,
            {"data": "fsdp", "ep": 4},
            {**MOE, "n_experts": 6},
            "model.n_experts: 6 does not split over parallel.ep = 4",
        ),
        (
            6,
            {"data": "fsdp", "ep": 4},
            MOE,
            r"parallel.ep: 4 does not divide the data-parallel shard size 6 \(= 6 processes",
        ),
        (
            8,
            {"data": "hsdp", "dp_replicate": 4, "ep": 4},
            MOE,
            "parallel.ep: 4 does not divide the data-parallel shard size 2",
        ),
    ],
)
def test_impossible_layouts_name_the_key_and_the_divisor(world, parallel, model, message) -> None:
    with pytest.raises(UserError, match="run.yaml: " + message):
        layout(world, parallel, model)


@pytest.mark.parametrize(
    "parallel, message",
    [
        ({"data": "tp"}, "parallel.data: must be one of ddp, zero1, zero2, fsdp, hsdp"),
        ({"pp_schedule": "zb"}, "parallel.pp_schedule: must be one of gpipe, 1f1b, interleaved_1f1b"),
        ({"tp": 0}, "parallel.tp: must be >= 1"),
        ({"dp_replicate": 2}, "parallel.dp_replicate: needs data: hsdp"),
        ({"stages_per_rank": 2}, "parallel.stages_per_rank: more than one stage per rank needs"),
        ({"pp_schedule": "interleaved_1f1b", "stages_per_rank": 1}, "parallel.stages_per_rank: interleaved_1f1b needs"),
        ({"tensor": 2}, "parallel.tensor: unknown key"),
        ({"ep": 0}, "parallel.ep: must be >= 1"),
        ({"ep": 2}, "parallel.ep: needs data: fsdp, zero2 or hsdp .*, got 'ddp'"),
        ({"data": "zero1", "ep": 2}, "parallel.ep: needs data: fsdp, zero2 or hsdp"),
        ({"data": "fsdp", "ep": 2, "tp": 2}, r"parallel.ep: does not compose with parallel.tp \(2\); use tp: 1"),
        ({"data": "fsdp", "ep": 2, "pp": 2}, r"parallel.ep: does not compose with parallel.pp \(2\); use pp: 1"),
    ],
)
def test_bad_parallel_values_name_the_key(parallel, message) -> None:
    with pytest.raises(UserError, match=message):
        config_from_dict({**BASE, "parallel": parallel}, "run.yaml")


def test_ptk_train_refuses_a_layout_before_starting_processes(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(
        tmp_path, parallel={"tp": 2}, model={"d_model": 48, "n_layers": 2, "n_heads": 3, "n_kv_heads": 3}
    )
    assert main(["train", str(config), "--nproc", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == f"ptk: error: {config}: model.n_heads: 3 does not split over parallel.tp = 2"
