"""`ptk report` on a real base run and its continuation: the continued run at its real position (steps
or tokens), the smoothed loss over the faint raw one, replayed sources marked, MFU only when logged."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest
import yaml

from pretrainkit.cli import main
from pretrainkit.train.reports.report import RUN_COLORS, build_figure, smoothed
from pretrainkit.train.reports.run_log import read_run


@pytest.fixture(scope="module")
def runs(session_kit, tmp_path_factory) -> tuple[Path, Path]:
    import torch

    root = tmp_path_factory.mktemp("report_continued")
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    base_cfg = session_kit.config(root / "base", max_steps=8, eval={"every": 4, "batches": 1})
    assert main(["train", str(base_cfg)]) == 0
    shards = session_kit.mixture.parent
    (root / "cont").mkdir()
    (root / "cont" / "mix.yaml").write_text(
        yaml.safe_dump(
            {
                "seed": 2,
                "holdout": {"fraction": 0.02, "min_tokens": 2048},
                "sources": [
                    {"name": "shakespeare", "shards": str(shards / "shakespeare"), "weight": 0.7},
                    {
                        "name": "wiki",
                        "shards": str(shards / "wiki"),
                        "weight": 0.3,
                        "replay": {"from": str(root / "base" / "run")},
                    },
                ],
            }
        )
    )
    cont_cfg = session_kit.config(
        root / "cont", max_steps=6, eval={"every": 3, "batches": 1}, init_from=str(root / "base" / "run")
    )
    cfg = yaml.safe_load(cont_cfg.read_text())
    cfg["data"]["mixture"] = "mix.yaml"
    cont_cfg.write_text(yaml.safe_dump(cfg))
    assert main(["train", str(cont_cfg)]) == 0
    torch.set_num_threads(before)
    return root / "base" / "run", root / "cont" / "run"


def _panel(fig, title: str):
    return next(ax for ax in fig.axes if ax.get_title() == title)


def _lines_of(ax, color: str) -> list:
    """The run's data lines (not the vertical marks at its start or its spikes)."""
    return [line for line in ax.get_lines() if line.get_color() == color and len(set(line.get_xdata())) > 1]


def test_a_continued_run_is_drawn_after_its_base_in_steps_and_in_tokens(runs, capsys) -> None:
    base, cont = read_run(runs[0]), read_run(runs[1])
    assert cont.base_step == 8 and cont.base_tokens == base.total_tokens() == 8 * 8 * 32
    fig, panels = build_figure([base, cont], "step")
    loss = _panel(fig, "training loss")
    base_lines, cont_lines = _lines_of(loss, RUN_COLORS[0]), _lines_of(loss, RUN_COLORS[1])
    assert [list(line.get_xdata()) for line in base_lines] == [list(range(1, 9))] * 2  # raw and smoothed
    assert [list(line.get_xdata()) for line in cont_lines] == [list(range(9, 15))] * 2
    starts = [line.get_xdata()[0] for line in loss.get_lines() if line.get_linestyle() == ":"]
    assert starts == [8]  # the dotted line where the continued run begins
    val = _lines_of(_panel(fig, "validation loss"), RUN_COLORS[1])
    assert [list(line.get_xdata()) for line in val] == [[11, 14]] * 2  # its validation at its steps 3 and 6
    fig, _ = build_figure([base, cont], "tokens")
    cont_tokens = [8 * 8 * 32 + 8 * 32 * k for k in range(1, 7)]
    assert [list(line.get_xdata()) for line in _lines_of(_panel(fig, "training loss"), RUN_COLORS[1])] == [
        cont_tokens
    ] * 2
    assert _panel(fig, "learning rate").get_xlabel() == "tokens"
    assert main(["report", str(runs[0]), "--compare", str(runs[1]), "--x", "tokens"]) == 0
    out = capsys.readouterr().out
    assert f"continues    {runs[0] / 'checkpoints' / 'step-0000008'} (step 8, 2,048 tokens); drawn from there" in out


def test_smoothed_loss_over_the_faint_raw_one(runs) -> None:
    run = read_run(runs[0])
    fig, _ = build_figure([run])
    raw, smooth = _lines_of(_panel(fig, "training loss"), RUN_COLORS[0])
    assert list(raw.get_ydata()) == run.train["loss"] and raw.get_alpha() < 0.5
    assert smooth.get_label().startswith("smoothed") and smooth.get_linewidth() > raw.get_linewidth()
    noisy = list(np.random.default_rng(0).normal(3.0, 0.5, size=400))
    assert smoothed(noisy, 20)[0] == noisy[0]  # debiased: the first value is not pulled towards 0
    assert statistics.pstdev(smoothed(noisy, 20)[50:]) < statistics.pstdev(noisy) / 3


def test_replayed_sources_are_marked_and_mfu_is_drawn_only_when_logged(runs, tmp_path, capsys) -> None:
    base, cont = read_run(runs[0]), read_run(runs[1])
    assert cont.source_notes == {"wiki": "replayed"} and base.source_notes == {}
    fig, panels = build_figure([cont])
    labels = [line.get_label() for line in _lines_of(_panel(fig, "validation loss"), RUN_COLORS[0])]
    assert labels == ["shakespeare", "wiki (replayed)"]
    assert panels == ["training loss", "validation loss", "learning rate", "gradient norm", "tokens/s"]
    assert sorted(ax.get_title() for ax in fig.axes) == sorted(panels)  # no empty MFU panel on a CPU run
    # The same run as a GPU would log it, with MFU: the sixth panel is back.
    rows = [json.loads(line) for line in (runs[1] / "metrics.jsonl").read_text().splitlines()]
    (tmp_path / "metrics.jsonl").write_text(
        "".join(json.dumps({**r, "mfu": 0.4} if "loss" in r else r) + "\n" for r in rows)
    )
    fig, panels = build_figure([read_run(tmp_path)])
    assert panels[-1] == "MFU" and len(_lines_of(_panel(fig, "MFU"), RUN_COLORS[0])) == 1
    assert main(["report", str(runs[1]), "-o", str(tmp_path / "r.png")]) == 0
    out = capsys.readouterr().out
    assert "val wiki      last" in out and out.split("val wiki")[1].splitlines()[0].endswith("(replayed)")
    assert "(5 panels: training loss, validation loss, learning rate, gradient norm, tokens/s)" in out
