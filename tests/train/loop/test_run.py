"""`ptk train` end to end on real text shards: loss falls, metrics/config/checkpoints written, errors clean."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from pretrainkit.cli import main
from pretrainkit.train.config import load_config, to_dict

ROW_KEYS = {"step", "loss", "lr", "grad_norm", "tokens", "tokens_per_s"}


def test_ptk_train_learns_and_writes_its_run_dir(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, max_steps=24, checkpoint={"every": 8, "keep": 2}, eval={"every": 12, "batches": 1})
    assert main(["train", str(config)]) == 0
    err = capsys.readouterr().err
    assert "ptk train: steps 1-24 of 24" in err and "ptk eval --mixture scores all): shakespeare" in err
    run = tmp_path / "run"
    rows = kit.rows(run)
    assert [r["step"] for r in rows] == list(range(1, 25))
    assert all(ROW_KEYS <= r.keys() and "mfu" not in r for r in rows)  # no known peak on a CPU
    assert [r["tokens"] for r in rows[:2]] == [8 * 32, 2 * 8 * 32]
    first, last = rows[0]["loss"], sum(r["loss"] for r in rows[-4:]) / 4
    assert first == pytest.approx(5.55, abs=0.3) and last < first - 1.5  # it learned bytes
    val = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if "val_loss" in line]
    assert [v["step"] for v in val] == [12, 24] and set(val[0]["val_loss"]) == {"shakespeare", "wiki"}
    assert val[1]["val_loss"]["shakespeare"] < val[0]["val_loss"]["shakespeare"]
    assert yaml.safe_load((run / "config.yaml").read_text()) == to_dict(load_config(config))
    assert sorted(p.name for p in (run / "checkpoints").iterdir()) == ["step-0000016", "step-0000024"]
    assert (run / "events.jsonl").read_text() == ""

    assert main(["train", str(config)]) == 0  # same command again: already done
    assert "already reached max_steps=24" in capsys.readouterr().err


def test_val_loss_and_eval_loss_say_how_much_of_the_held_out_split_they_cover(kit, tmp_path: Path, capsys) -> None:
    from pretrainkit.mixtures import load_mixture

    # eval.batches 2 of 8 rows of 32 tokens: a subset; 1000: as many batches as the held-out split holds.
    for batches in (2, 1000):
        config = kit.config(
            tmp_path / str(batches),
            max_steps=2,
            eval={"every": 2, "batches": batches},
            checkpoint={"every": 0, "keep": 1},
        )
        assert main(["train", str(config)]) == 0
        summary = capsys.readouterr().err
        logged = [
            json.loads(line) for line in (tmp_path / str(batches) / "run" / "metrics.jsonl").read_text().splitlines()
        ]
        val = [row for row in logged if "val_loss" in row][-1]
        for source in load_mixture(kit.mixture).sources:
            rows = min(2 * 8, source.heldout_tokens // 33) if batches == 2 else source.heldout_tokens // 33
            want_batches, want_tokens = math.ceil(rows / 8), rows * 32
            assert val["val_batches"][source.name] == want_batches and val["val_tokens"][source.name] == want_tokens
            assert (
                f"{source.name} {val['val_loss'][source.name]:.4f} ({want_batches} batches, {want_tokens:,} tokens)"
                in summary
            )
        assert "val loss (first held-out batches only; ptk eval --mixture scores all): " in summary

    # `ptk eval` on the same checkpoint and held-out splits: all of them, with the counts that cover them.
    assert main(["eval", str(tmp_path / "1000" / "run"), "--mixture", str(kit.mixture), "--batch-size", "4"]) == 0
    out = capsys.readouterr().out.splitlines()
    held = [s.heldout_tokens for s in load_mixture(kit.mixture).sources]
    per_source = [math.ceil(t / 32) for t in held]  # windows of 33 tokens, each sharing one with the next
    tokens, windows, batches = sum(held), sum(per_source), sum(math.ceil(w / 4) for w in per_source)
    assert (
        out[1] == f"eval loss over all {batches:,} batches of up to 4 windows ({windows:,} windows, {tokens:,} tokens)"
    )


def test_bad_config_key_fails_in_one_line_naming_it(kit, tmp_path: Path) -> None:
    config = kit.config(tmp_path)
    proc = kit.ptk(config, "--set", "optim.lrr=0.1", nproc=2)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"ptk: error: {config}: optim.lrr: unknown key")


def test_missing_mixture_and_bad_world_split_are_user_errors(kit, tmp_path: Path, capsys) -> None:
    config = kit.config(tmp_path, data={"mixture": str(tmp_path / "absent.yaml"), "seq_len": 32})
    assert main(["train", str(config)]) == 2
    assert "absent.yaml" in capsys.readouterr().err
    config = kit.config(tmp_path / "odd", batch={"global_size": 6, "micro_size": 2})
    proc = kit.ptk(config, nproc=2)
    assert (
        proc.returncode != 0
        and "batch.global_size: 6 is not a multiple of batch.micro_size x data-parallel groups (2 x 2)" in proc.stderr
    )
    assert "Traceback" not in proc.stderr


def test_a_corrupt_shard_stops_training_with_one_line_naming_it(kit, tmp_path, capsys):
    import shutil

    data = tmp_path / "data"
    shutil.copytree(kit.mixture.parent, data, ignore=shutil.ignore_patterns("mix-*.yaml"))
    shard = sorted((data / "wiki").glob("shard-*"))[0]
    raw = bytearray(shard.read_bytes())
    raw[len(raw) // 2] ^= 0xFF  # same size: only the sha256 check can catch it
    shard.write_bytes(bytes(raw))
    config = kit.config(tmp_path, data={"mixture": str(data / kit.mixture.name), "seq_len": 32})
    assert main(["train", str(config)]) == 2
    err = capsys.readouterr().err
    assert f"{shard}: altered" in err and err.count("ptk: error") == 1


def test_document_masking_trains_on_targets_within_documents_and_resumes_exactly(kit, tmp_path: Path, capsys) -> None:
    import shutil

    import numpy as np

    from pretrainkit.mixtures import MixtureSampler, load_mixture

    config = kit.config(
        tmp_path, max_steps=8, checkpoint={"every": 4, "keep": 2}, eval={"every": 0}, data={"document_masking": True}
    )
    assert main(["train", str(config)]) == 0
    run = tmp_path / "run"
    rows = kit.rows(run)
    # Every target but those of the EOS inputs (the next documents' first tokens; byte-level EOS is 256).
    first = MixtureSampler(load_mixture(kit.mixture), seq_len=32, global_batch_size=8).batch(0)[0][:, :-1]
    eos = int(np.count_nonzero(first == 256))
    assert eos > 0 and rows[0]["tokens"] == 8 * 32 - eos
    # The loader state is unchanged by masking: resumed from step 4, steps 5-8 are the same to the bit.
    shutil.rmtree(run / "checkpoints" / "step-0000008")
    capsys.readouterr()
    assert main(["train", str(config)]) == 0
    err = capsys.readouterr().err
    assert "resuming from" in err and "(step 4)" in err
    assert [r["loss"] for r in kit.rows(run)] == [r["loss"] for r in rows]
