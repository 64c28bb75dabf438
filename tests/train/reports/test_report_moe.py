"""A mixture of experts' logs and report: every training row has `aux_loss`, the evaluation steps'
rows `expert_load` (tokens per expert of each sparse layer in the step's global batch), and `ptk report`
adds the routers' panels and summary lines; `expert_load` is read as each layer's imbalance, and a bad
one is a one-line error naming file and line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from matplotlib.image import imread

from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.train.reports.report import summary_text
from pretrainkit.train.reports.run_log import read_run

MIXTRAL = {
    "family": "mixtral",
    "d_model": 32,
    "n_layers": 2,
    "n_heads": 4,
    "n_kv_heads": 2,
    "n_experts": 4,
    "experts_per_token": 2,
    "norm_topk_prob": True,
    "router_aux_loss_coef": 0.01,
}


def test_moe_run_logs_aux_loss_and_expert_load_and_reports_them(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(
        tmp_path, model=MIXTRAL, max_steps=6, eval={"every": 4, "batches": 1}, checkpoint={"every": 0, "keep": 1}
    )
    assert main(["train", str(config)]) == 0
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    train = [r for r in rows if "loss" in r]
    assert [list(r)[:3] for r in train] == [["step", "loss", "aux_loss"]] * 6
    assert all(2.0 <= r["aux_loss"] < 4.0 for r in train)  # top-2 of 4: 2 when balanced, 4 at worst
    loads = {r["step"]: r["expert_load"] for r in train if "expert_load" in r}
    assert sorted(loads) == [4, 6]  # eval.every and the last step
    for load in loads.values():
        assert sorted(load) == ["0", "1"] and all(len(c) == 4 for c in load.values())
        assert all(sum(c) == 8 * 32 * 2 for c in load.values())  # global batch x seq_len x top-2

    capsys.readouterr()
    assert main(["report", str(tmp_path / "run"), "-o", str(tmp_path / "report.png")]) == 0
    out = capsys.readouterr().out
    assert (
        "7 panels: training loss, validation loss, learning rate, gradient norm, tokens/s, router aux loss, expert load"
        in out
    )
    assert imread(tmp_path / "report.png").shape[:2] == (1250, 1500)
    assert f"  aux loss     first {train[0]['aux_loss']:.4g}, last {train[-1]['aux_loss']:.4g}" in out
    assert "  expert load  busiest expert / mean at step 6: worst layer " in out


def test_expert_load_is_read_as_each_layers_imbalance(tmp_path: Path) -> None:
    base = {"lr": 1e-3, "grad_norm": 1.0, "tokens": 512, "tokens_per_s": 900.0}
    rows = [
        {"step": 1, "loss": 5.0, "aux_loss": 2.5, **base},
        {
            "step": 2,
            "loss": 4.0,
            "aux_loss": 2.2,
            **base,
            "expert_load": {"1": [40, 10, 10, 20], "3": [20, 20, 20, 20]},
        },
        {"step": 3, "loss": 3.0, "aux_loss": 2.1, **base, "expert_load": {"1": [25, 15, 20, 20], "3": [0, 0, 0, 0]}},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = read_run(tmp_path)
    assert run.load_steps == [2, 3] and run.train["aux_loss"] == [2.5, 2.2, 2.1]
    assert run.load_imbalance["1"] == [2.0, 1.25] and run.load_imbalance["3"][0] == 1.0
    assert "worst layer 1 1.25, mean over layers 1.25 (1 = balanced)" in summary_text(run)  # layer 3 got no tokens

    rows[2]["expert_load"] = {"1": [25, "many"]}
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=r"metrics.jsonl: line 3: expert_load.1 must be a number, got 'many'$"):
        read_run(tmp_path)
    rows[2]["expert_load"] = [25, 15]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(UserError, match=r"metrics.jsonl: line 3: expert_load must map layers to tokens per expert$"):
        read_run(tmp_path)
