"""Learning-rate schedules hit their documented values; weight decay skips norms and embeddings;
clipping bounds the gradient norm and reports the norm before clipping."""

from __future__ import annotations

import math

import pytest
import torch

from pretrainkit.train.loop.optim import Schedule, lr_at, param_groups
from pretrainkit.train.model.llama import ModelConfig, Transformer
from pretrainkit.train.parallel.data_parallel import clip_grad_norm


def test_warmup_then_cosine_documented_values() -> None:
    s = Schedule(lr=1.0, min_lr=0.1, warmup_steps=10, max_steps=110, kind="cosine")
    assert lr_at(1, s) == pytest.approx(0.1)
    assert lr_at(5, s) == pytest.approx(0.5)
    assert lr_at(10, s) == pytest.approx(1.0)
    assert lr_at(60, s) == pytest.approx(0.55)  # halfway: (lr + min_lr) / 2
    assert lr_at(110, s) == pytest.approx(0.1)
    assert lr_at(35, s) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi / 4)))
    lrs = [lr_at(t, s) for t in range(10, 111)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:]))


def test_warmup_stable_decay_documented_values() -> None:
    s = Schedule(lr=1.0, min_lr=0.0, warmup_steps=10, max_steps=100, kind="wsd", decay_fraction=0.2)
    assert lr_at(5, s) == pytest.approx(0.5)
    assert [lr_at(t, s) for t in (10, 50, 80)] == [1.0, 1.0, 1.0]
    assert lr_at(90, s) == pytest.approx(0.5)
    assert lr_at(100, s) == pytest.approx(0.0)


def test_no_warmup_starts_at_full_rate() -> None:
    assert lr_at(1, Schedule(lr=2.0, min_lr=0.0, warmup_steps=0, max_steps=10)) == pytest.approx(
        2.0 * (1 + math.cos(math.pi / 10)) / 2
    )


@pytest.mark.parametrize("tie", [True, False])
def test_weight_decay_only_on_linear_weights(tie: bool) -> None:
    model = Transformer(
        ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=8, tie_embeddings=tie)
    )
    decay, no_decay = param_groups(model, 0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    decayed = {names[id(p)] for p in decay["params"]}
    kept = {names[id(p)] for p in no_decay["params"]}
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert "tok_embeddings.weight" in kept and all("norm" in n or "embeddings" in n for n in kept)
    assert ("output.weight" in decayed) == (not tie)
    assert "layers.0.attention.wq.weight" in decayed and "layers.1.feed_forward.w2.weight" in decayed
    assert len(decayed) + len(kept) == len(list(model.parameters()))


def test_clipping_bounds_the_gradient_and_reports_the_pre_clip_norm() -> None:
    torch.manual_seed(0)
    model = Transformer(ModelConfig(vocab_size=50, d_model=32, n_layers=2, n_heads=4, max_seq_len=8))
    x = torch.randint(0, 50, (4, 8))
    (model(x).square().sum() * 100).backward()
    before = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    reported = clip_grad_norm(model, max_norm=0.5)
    after = torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in model.parameters()]))
    assert reported.item() == pytest.approx(before.item(), rel=1e-5)
    assert before.item() > 0.5 and after.item() == pytest.approx(0.5, rel=1e-4)
    assert clip_grad_norm(model, max_norm=0.0).item() == pytest.approx(after.item(), rel=1e-5)  # 0: report only
