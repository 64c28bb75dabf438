"""`ptk train` under tensor and pipeline parallelism on real data: the same losses as one process, checkpoints
that resume under another layout (tp2 -> fsdp on 2 -> 1 process; pp2 -> 1 process) with the same data
order and losses, and `ptk export` from each layout giving the same model."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from pretrainkit.cli import main
from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.train.checkpoint.export import load_exported

# Pipeline stages cannot share a tied embedding (tensor parallelism can: test_train_parallel.py).
RUN = {
    "max_steps": 12,
    "checkpoint": {"every": 4, "keep": 3},
    "eval": {"every": 0},
    "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "tie_embeddings": False},
}


@pytest.fixture(scope="module")
def reference(session_kit, tmp_path_factory) -> tuple[Path, list[dict]]:
    """One process, uninterrupted: its run dir and training rows."""
    root = tmp_path_factory.mktemp("ref")
    proc = session_kit.ptk(session_kit.config(root, **RUN))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return root / "run", session_kit.rows(root / "run")


def losses(rows: list[dict]) -> list[tuple[int, float, float]]:
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows]


def assert_close(got: list[dict], want: list[dict]) -> None:
    """Within 1e-4: another layout sums in another order, and 12 steps at lr 1e-2 grow fp32's rounding
    (~1e-7 after one step, see test_train_parallel.py) to ~1e-5; another batch would differ by ~1e-1."""
    assert [r["step"] for r in got] == [r["step"] for r in want]
    for a, b in zip(got, want):
        assert (a["loss"], a["grad_norm"]) == pytest.approx((b["loss"], b["grad_norm"]), rel=1e-4), a["step"]


def resumed_copy(kit, src: Path, dst: Path, step: int, nproc: int, parallel: str) -> list[dict]:
    """Run dir `src` as if stopped after checkpoint `step`, resumed under `parallel` on `nproc` processes;
    the training rows it wrote after `step`."""
    shutil.copytree(src.parent, dst.parent)
    for ckpt in (dst / "checkpoints").iterdir():
        if int(ckpt.name.split("-")[1]) > step:
            shutil.rmtree(ckpt)
    proc = kit.ptk(dst.parent / "run.yaml", "--set", f"parallel={parallel}", "--set", f"run_dir={dst}", nproc=nproc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"resuming from {dst}/checkpoints/step-{step:07d}" in proc.stderr
    return [r for r in kit.rows(dst) if r["step"] > step]


def exported_val_loss(run_dir: Path, out: Path, mixture: Path) -> float:
    assert main(["export", str(run_dir), "-o", str(out)]) == 0
    model, _ = load_exported(out)
    x, y = MixtureSampler(load_mixture(mixture), seq_len=32, global_batch_size=8).validation_batches("wiki", 8, 1)[0]
    with torch.no_grad():
        return F.cross_entropy(model(x).flatten(0, 1), y.flatten()).item()


@pytest.mark.slow
@pytest.mark.distributed
def test_tp2_resumes_under_fsdp_then_one_process_and_exports(kit, tmp_path: Path, reference) -> None:
    ref_dir, reference = reference
    tp = kit.config(tmp_path / "tp", parallel={"tp": 2}, **RUN)
    proc = kit.ptk(tp, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_close(kit.rows(tmp_path / "tp" / "run"), reference)  # both processes read the group's rows

    fsdp = resumed_copy(kit, tmp_path / "tp" / "run", tmp_path / "fsdp" / "run", 4, 2, "fsdp")
    assert_close(fsdp, reference[4:])
    one = resumed_copy(kit, tmp_path / "fsdp" / "run", tmp_path / "one" / "run", 8, 1, "ddp")
    assert_close(one, reference[8:])

    want = exported_val_loss(ref_dir, tmp_path / "ref.safetensors", kit.mixture)
    for name in ("tp", "one"):
        assert exported_val_loss(
            tmp_path / name / "run", tmp_path / f"{name}.safetensors", kit.mixture
        ) == pytest.approx(want, rel=1e-4)


@pytest.mark.slow
@pytest.mark.distributed
def test_pp2_resumes_on_one_process_and_exports(kit, tmp_path: Path, reference) -> None:
    ref_dir, reference = reference
    pp = kit.config(tmp_path / "pp", parallel={"pp": 2, "pp_schedule": "1f1b"}, **RUN)
    proc = kit.ptk(pp, nproc=2)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_close(kit.rows(tmp_path / "pp" / "run"), reference)

    one = resumed_copy(kit, tmp_path / "pp" / "run", tmp_path / "one" / "run", 4, 1, "ddp")
    assert_close(one, reference[4:])
    want = exported_val_loss(ref_dir, tmp_path / "ref.safetensors", kit.mixture)
    got = exported_val_loss(tmp_path / "pp" / "run", tmp_path / "pp.safetensors", kit.mixture)
    assert got == pytest.approx(want, rel=1e-4)


@pytest.mark.slow
@pytest.mark.distributed
def test_pp2_starts_from_an_exported_model_like_one_process(kit, tmp_path: Path, reference) -> None:
    ref_dir, _ = reference
    exported = tmp_path / "base.safetensors"
    assert main(["export", str(ref_dir), "-o", str(exported)]) == 0
    start = {**RUN, "max_steps": 4, "init_from": str(exported)}
    runs = {}
    for name, nproc, parallel in (("one", 1, "ddp"), ("pp", 2, {"pp": 2, "pp_schedule": "gpipe"})):
        proc = kit.ptk(kit.config(tmp_path / name, **{**start, "parallel": parallel}), nproc=nproc)
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs[name] = kit.rows(tmp_path / name / "run")
    assert_close(runs["pp"], runs["one"])  # each stage took its own tensors of the exported file
    assert runs["one"][0]["loss"] < reference[1][-1]["loss"] + 0.5  # it started from the trained model
