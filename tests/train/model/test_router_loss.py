"""The routers' load-balancing loss (train/model/router_loss.py) against transformers for Qwen3-MoE,
OLMoE and Mixtral: the function itself, step 1's `loss` (the cross-entropy alone) and `aux_loss` of a
run initialized from a tiny random model (one micro-batch and two), its `expert_load`, and the gradient
of the objective (cross-entropy + router_aux_loss_coef x aux loss), eager and with activation checkpointing,
and with the run's own router_aux_loss_coef. Layouts over processes: tests/train/parallel/test_parallel.py."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest
import torch
import yaml

from pretrainkit.cli import main
from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.train.checkpoint.init_from import find_init_source, initialize
from pretrainkit.train.config import config_from_dict
from pretrainkit.train.loop.trainer import Trainer
from pretrainkit.train.model.resolve import model_config
from pretrainkit.train.model.router_loss import load_balancing_loss
from pretrainkit.train.parallel.distributed import init_distributed, shutdown

MOE_FAMILIES = ("qwen3_moe", "olmoe", "mixtral")
SEQ, BATCH = 32, 8
COEF = 0.5  # large, so that a wrong aux term in the objective shows in the gradients


def transformers_loss_function(family: str):
    return importlib.import_module(f"transformers.models.{family}.modeling_{family}").load_balancing_loss_func


def sparse_layers(hf) -> list[int]:
    """The layers of a transformers MoE model that have a router, in order."""
    return sorted({int(name.split(".")[2]) for name, _ in hf.named_parameters() if name.endswith("mlp.gate.weight")})


def transformers_step(hf, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
    """transformers' cross-entropy and aux loss of predicting y from x, and the router logits of each sparse layer."""
    y = y.contiguous()  # transformers views the labels flat
    out = hf(x, labels=y, shift_labels=y, output_router_logits=True)
    return out.loss - hf.config.router_aux_loss_coef * out.aux_loss, out.aux_loss, list(out.router_logits)


@pytest.mark.parametrize("family", MOE_FAMILIES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_load_balancing_loss_is_transformers(family: str, dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(0)
    for n_experts, top_k, layers in ((8, 2, 3), (4, 1, 1), (6, 3, 2)):
        logits = [(torch.randn(40, n_experts, generator=g) * 2).to(dtype) for _ in range(layers)]
        theirs = transformers_loss_function(family)(tuple(logits), n_experts, top_k)
        torch.testing.assert_close(load_balancing_loss(logits, n_experts, top_k), theirs, rtol=1e-6, atol=0)
    # Pooled over layers before the product: two layers, each routing all tokens to a different expert,
    # balance each other (top_k = 1, probabilities near one-hot: about 1), while each alone scores n_experts.
    one, other = torch.full((10, 4), -30.0), torch.full((10, 4), -30.0)
    one[:, 0], other[:, 1] = 30.0, 30.0
    assert load_balancing_loss([one, other], 4, 1).item() == pytest.approx(2.0)
    assert load_balancing_loss([one], 4, 1).item() == pytest.approx(4.0)


def first_batch(mix: Path) -> tuple[torch.Tensor, torch.Tensor]:
    tokens, _ = MixtureSampler(load_mixture(mix), seq_len=SEQ, global_batch_size=BATCH).batch(0)
    tokens = torch.from_numpy(tokens)
    return tokens[:, :-1], tokens[:, 1:]


@pytest.mark.parametrize("family, micro", [(f, BATCH) for f in MOE_FAMILIES] + [("qwen3_moe", BATCH // 2)])
def test_step_one_loss_and_aux_loss_are_transformers(
    kit, hf_model_with_tokenizer, tmp_path: Path, family: str, micro: int
) -> None:
    """`loss` is the cross-entropy alone and `aux_loss` transformers' aux loss on the same rows (with two
    micro-batches, the mean of each one's); `expert_load` counts each sparse layer's top-k choices."""
    directory, hf, mix = hf_model_with_tokenizer(family, router_aux_loss_coef=COEF)
    config = kit.config(
        tmp_path,
        data={"mixture": str(mix), "seq_len": SEQ},
        init_from=str(directory),
        max_steps=1,
        optim={"warmup_steps": 1},
        checkpoint={"every": 0, "keep": 1},
        eval={"every": 0},
        batch={"global_size": BATCH, "micro_size": micro},
    )
    raw = yaml.safe_load(config.read_text())
    del raw["model"]  # the shape (and router_aux_loss_coef) come from config.json
    config.write_text(yaml.safe_dump(raw))
    assert main(["train", str(config)]) == 0
    (row,) = kit.rows(tmp_path / "run")

    x, y = first_batch(mix)
    with torch.no_grad():
        ce, _, router_logits = transformers_step(hf, x, y)
        aux = [transformers_step(hf, xs, ys)[1] for xs, ys in zip(x.split(micro), y.split(micro))]
    assert row["loss"] == pytest.approx(ce.item(), rel=2e-4)
    assert row["aux_loss"] == pytest.approx(sum(aux).item() / len(aux), rel=1e-3)
    assert row["aux_loss"] > 2.0  # top-2: 2 when perfectly balanced; this random router is not
    top_k = hf.config.num_experts_per_tok
    expected = {
        str(layer): torch.bincount(
            torch.topk(torch.softmax(logits.float(), -1), top_k).indices.flatten(), minlength=logits.shape[1]
        ).tolist()
        for layer, logits in zip(sparse_layers(hf), router_logits)
    }
    assert row["expert_load"] == expected
    assert all(sum(counts) == BATCH * SEQ * top_k for counts in expected.values())


def router_grads(model: torch.nn.Module) -> dict[int, torch.Tensor]:
    """Layer index -> its router's gradient, whatever wraps the blocks (activation checkpointing, compile)."""
    out = {}
    for name, p in model.named_parameters():
        if name.endswith("feed_forward.router.weight"):
            out[int(name.split(".")[1])] = p.grad
    return out


# `compile: true` passes this too (with checkpointing: 30 s with inductor's cache warm, minutes cold), too
# slow for here; test_parallel.py compiles dense models.
@pytest.mark.parametrize(
    "layout",
    [{}, {"activation_checkpointing": True}, {"model": {"router_aux_loss_coef": 0.0}}],
    ids=["eager", "checkpointing", "coef_0"],
)
def test_objective_gradient_is_cross_entropy_plus_coef_times_aux_loss(hf_model, layout: dict) -> None:
    """Two micro-batches of 4 rows: the routers' gradients equal transformers' for the mean over the
    micro-batches of (cross-entropy + router_aux_loss_coef x aux loss), whose cross-entropy part is
    the global batch's; `loss` is that cross-entropy, `aux_loss` the aux losses' mean. The run's
    `model.router_aux_loss_coef` replaces config.json's: 0 leaves the aux loss logged, out of the objective."""
    directory, hf = hf_model("qwen3_moe", router_aux_loss_coef=COEF)
    (directory / "tokenizer.json").write_text("{}")  # only hashed: these batches are not tokenized
    cfg = config_from_dict(
        {
            "run_dir": "unused",
            "data": {"mixture": "unused", "seq_len": 16},
            "init_from": str(directory),
            "max_steps": 1,
            "optim": {"clip": 0.0, "warmup_steps": 1},
            "batch": {"global_size": 8, "micro_size": 4},
            **layout,
        },
        "test",
    )
    env = init_distributed("cpu")
    try:
        mcfg = model_config(cfg, 300)
        coef = layout.get("model", {}).get("router_aux_loss_coef", COEF)
        assert mcfg.router_aux_loss_coef == coef
        trainer = Trainer(cfg, mcfg, env)
        initialize(trainer.model, trainer.optimizer, find_init_source(directory), with_optimizer=False)
        rows = torch.randint(0, 300, (8, 17), generator=torch.Generator().manual_seed(0))
        grads = trainer.gradients([(m[:, :-1], m[:, 1:]) for m in rows.split(4)])
        ours = router_grads(trainer.model)
    finally:
        shutdown()
    steps = [transformers_step(hf, m[:, :-1], m[:, 1:]) for m in rows.split(4)]
    assert grads.loss == pytest.approx(sum(ce.item() for ce, _, _ in steps) / 2, rel=2e-5)
    assert grads.routing.aux_loss == pytest.approx(sum(aux.item() for _, aux, _ in steps) / 2, rel=1e-5)
    assert sorted(ours) == sparse_layers(hf) == [1, 2]
    gates = [dict(hf.named_parameters())[f"model.layers.{layer}.mlp.gate.weight"] for layer in sorted(ours)]
    ce_part = torch.autograd.grad(sum(ce for ce, _, _ in steps) / 2, gates, retain_graph=True)
    aux_part = torch.autograd.grad(sum(COEF * aux for _, aux, _ in steps) / 2, gates)
    for layer, ce_grad, aux_grad in zip(sorted(ours), ce_part, aux_part):
        assert aux_grad.abs().max() > 0.05 * ce_grad.abs().max()  # the aux term would count in it
        theirs = ce_grad + aux_grad if coef else ce_grad
        torch.testing.assert_close(ours[layer], theirs, rtol=1e-4, atol=1e-4 * theirs.abs().max().item())
