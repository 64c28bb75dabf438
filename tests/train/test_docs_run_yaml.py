"""The minimal annotated run.yaml of docs/training-and-layouts.md is a valid training config with the values
it explains."""

from __future__ import annotations

import re
from pathlib import Path

from pretrainkit.train.config import load_config

PAGE = Path(__file__).resolve().parents[2] / "docs" / "training-and-layouts.md"


def test_the_documented_run_yaml_loads(tmp_path: Path) -> None:
    section = PAGE.read_text(encoding="utf-8").split("## A minimal run.yaml", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.S).group(1)
    (tmp_path / "run.yaml").write_text(block)
    cfg = load_config(tmp_path / "run.yaml")
    assert cfg.run_dir == str((tmp_path / "runs" / "first").resolve())
    assert cfg.data.mixture == str((tmp_path / "mixture.yaml").resolve())
    assert (cfg.max_steps, cfg.data.seq_len, cfg.model.d_model, cfg.batch.global_size) == (1000, 512, 256, 32)
    assert cfg.eval.every == 100 and cfg.checkpoint.every == 200 and cfg.optim.lr == 1e-3
