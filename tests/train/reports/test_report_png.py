"""`ptk report` on real training runs: PNG panels, spike marks, overlays, a text summary, byte-identical output.

Two short real runs of `ptk train` on byte-level shards of Tiny Shakespeare and of Python PEPs (from
../shared/data) write the metrics.jsonl the report reads; a loss-spike event in the documented
events.jsonl format is added to one of them.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from matplotlib.image import imread

from fixtures.corpora import DATA, need_data
from pretrainkit.cli import main
from pretrainkit.shards import write_shards
from pretrainkit.train.reports.report import SPIKE_COLOR

ROOT = Path(__file__).resolve().parents[3]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _byte_shards(texts: list[str], out: Path) -> None:
    docs = [np.frombuffer(t.encode("utf-8"), dtype=np.uint8).astype(np.uint16) for t in texts]
    write_shards(docs, out, vocab_size=257, eos_id=256, tokenizer_sha256="b" * 64)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[Path, Path]:
    shakespeare, peps = need_data(DATA / "tinyshakespeare" / "input.txt"), need_data(DATA / "python_peps" / "peps")
    root = tmp_path_factory.mktemp("report_runs")
    _byte_shards(
        [s for s in shakespeare.read_text(encoding="utf-8")[:150_000].split("\n\n") if s.strip()], root / "shakespeare"
    )
    _byte_shards([p.read_text(encoding="utf-8") for p in sorted(peps.glob("pep-*.rst"))[:12]], root / "peps")
    (root / "mix.yaml").write_text(
        yaml.safe_dump(
            {
                "seed": 1,
                "sources": [
                    {"name": "shakespeare", "shards": "shakespeare", "weight": 0.5},
                    {"name": "peps", "shards": "peps", "weight": 0.5},
                ],
            }
        )
    )
    dirs, procs = [], []
    for name, lr in (("small-lr", 3e-3), ("big-lr", 1e-2)):
        config = root / f"{name}.yaml"
        config.write_text(
            yaml.safe_dump(
                {
                    "run_dir": name,
                    "seed": 0,
                    "max_steps": 8,
                    "data": {"mixture": "mix.yaml", "seq_len": 64},
                    "model": {"d_model": 32, "n_layers": 2, "n_heads": 2},
                    "batch": {"global_size": 8, "micro_size": 8},
                    "optim": {"lr": lr, "min_lr": lr / 10, "warmup_steps": 2},
                    "eval": {"every": 4, "batches": 1},
                }
            )
        )
        # Both runs at once: each spends most of its time starting up, not training.
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "pretrainkit.cli", "train", str(config)],
                cwd=ROOT,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        dirs.append(root / name)
    for proc in procs:
        # timeout: a bound for a hang, not for speed (a loaded machine runs this many times slower)
        _, err = proc.communicate(timeout=900)
        assert proc.returncode == 0, err[-2000:]
    # The row format of train/loop.py; the second spike's loss is not finite (JSON NaN, as Python writes it).
    spikes = [
        {
            "step": 5,
            "batch": 4,
            "loss": 9.5,
            "grad_norm": 30.0,
            "window_mean": 4.1,
            "window_std": 0.2,
            "window_grad_median": 1.0,
            "reason": "loss 9.5 > mean + 6 std",
            "action": "skip",
        },
        {
            "step": 7,
            "batch": 6,
            "loss": math.nan,
            "grad_norm": math.inf,
            "window_mean": 4.0,
            "window_std": 0.2,
            "window_grad_median": 1.0,
            "reason": "non-finite loss",
            "action": "skip",
        },
    ]
    (dirs[1] / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in spikes))
    return dirs[0], dirs[1]


def _spike_pixels(png: Path) -> int:
    rgb = (imread(png)[..., :3] * 255).round()
    red = np.array([int(SPIKE_COLOR[i : i + 2], 16) for i in (1, 3, 5)])
    return int((np.abs(rgb - red).max(axis=-1) <= 8).sum())


@pytest.mark.slow
def test_report_draws_every_panel_and_is_byte_identical(runs, tmp_path, capsys):
    plain, spiky = runs
    a, b = tmp_path / "a" / "report.png", tmp_path / "b" / "report.png"
    assert main(["report", str(spiky), "-o", str(a)]) == 0
    out = capsys.readouterr().out
    assert main(["report", str(spiky), "-o", str(b)]) == 0
    capsys.readouterr()
    assert a.read_bytes()[:8] == PNG_SIGNATURE and a.read_bytes() == b.read_bytes()
    assert imread(a).shape[:2] == (850, 1500)
    assert "5 panels: training loss, validation loss, learning rate, gradient norm, tokens/s" in out  # no MFU on a CPU
    assert "steps        1..8 (8 logged), 4,096 tokens" in out  # 8 steps x 8 sequences x 64 targets
    assert "val shakespeare" in out and "val peps" in out
    assert "spike events 2" in out and "step 5: loss 9.5 (loss 9.5 > mean + 6 std), action skip" in out
    assert "step 7: loss - (non-finite loss), action skip" in out
    assert (tmp_path / "a" / "report.txt").read_text() in out
    # The spike is drawn in red; a run without events has no red at all.
    assert _spike_pixels(a) > 50
    assert main(["report", str(plain), "-o", str(tmp_path / "plain.png")]) == 0
    assert _spike_pixels(tmp_path / "plain.png") == 0


@pytest.mark.slow
def test_report_compare_overlays_runs(runs, tmp_path, capsys):
    plain, spiky = runs
    assert main(["report", str(plain), "--compare", str(spiky)]) == 0
    out = capsys.readouterr().out
    assert out.count("run ") == 2 and f"wrote {plain / 'report.png'}" in out
    single = tmp_path / "single.png"
    assert main(["report", str(plain), "-o", str(single)]) == 0
    assert (plain / "report.png").read_bytes() != single.read_bytes()


def test_report_errors_name_the_file(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "no metrics.jsonl" in capsys.readouterr().err
    rows = [
        {"step": 1, "loss": 5.0, "lr": 1e-3, "grad_norm": 1.0, "tokens": 512, "tokens_per_s": 900.0},
        {"step": 2, "loss": "high"},
    ]
    (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "metrics.jsonl: line 2: loss must be a number, got 'high'" in err
    (tmp_path / "metrics.jsonl").write_text(json.dumps(rows[0]) + "\n")
    (tmp_path / "events.jsonl").write_text('{"loss": 9.0}\n')
    assert main(["report", str(tmp_path)]) == 2
    assert "events.jsonl: line 1: step must be an integer" in capsys.readouterr().err
