"""`ptk export`: a checkpoint (FSDP2 shards or a single process) as one safetensors file that loads
without torch.distributed and computes the same loss as the trainer did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pretrainkit.cli import main
from pretrainkit.errors import UserError
from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.train.checkpoint.export import load_exported


def test_export_loads_alone_and_reproduces_the_validation_loss(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(
        tmp_path,
        max_steps=6,
        activation_checkpointing=True,
        eval={"every": 6, "batches": 1},
        checkpoint={"every": 0, "keep": 1},
    )
    assert main(["train", str(config)]) == 0
    out = tmp_path / "model.safetensors"
    assert main(["export", str(tmp_path / "run"), "-o", str(out)]) == 0
    assert "ptk export: step 6" in capsys.readouterr().out
    assert not torch.distributed.is_initialized()
    model, cfg = load_exported(out)
    assert cfg.vocab_size == 257 and cfg.max_seq_len == 32 and model.output.weight is model.tok_embeddings.weight

    # The exported weights give the loss the trainer logged on the held-out rows at step 6.
    sampler = MixtureSampler(load_mixture(kit.mixture), seq_len=32, global_batch_size=8)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()][-1]
    for source, value in logged["val_loss"].items():
        x, y = sampler.validation_batches(source, 8, 1)[0]
        with torch.no_grad():
            loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()
        assert loss == pytest.approx(value, rel=1e-5)

    # A directory target gets model.safetensors + config.json; bf16 halves the size.
    assert (
        main(
            [
                "export",
                str(tmp_path / "run" / "checkpoints" / "step-0000006"),
                "-o",
                str(tmp_path / "d"),
                "--dtype",
                "bf16",
            ]
        )
        == 0
    )
    assert json.loads((tmp_path / "d" / "pretrainkit_model.json").read_text())["d_model"] == 32
    assert (tmp_path / "d" / "model.safetensors").stat().st_size < out.stat().st_size * 0.6
    load_exported(tmp_path / "d")


def test_export_without_checkpoint_is_a_user_error(tmp_path: Path, capsys) -> None:
    assert main(["export", str(tmp_path), "-o", str(tmp_path / "m.safetensors")]) == 2
    assert "no valid checkpoint" in capsys.readouterr().err
    (tmp_path / "bad.safetensors").write_bytes(b"not a model")
    with pytest.raises(UserError, match="not an exported pretrainkit model"):
        load_exported(tmp_path / "bad.safetensors")
