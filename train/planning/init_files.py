"""The two files `ptk init` writes into RUN_NAME: a mixture.yaml (one source per shard set, weighted by
its tokens, or a given mixture with its paths rewritten) and the commented train.yaml of a first-run plan.

    text = mixture_from_shards(["shards/web", "shards/code"], Path("runs/first"))
    text = train_yaml(run, plan, machine, corpus, minutes=30, law_name="besiroglu", probe=probe)
"""

from __future__ import annotations

import os
from pathlib import Path

import yaml

from pretrainkit.remote.urls import is_url

MIXTURE_FILE, TRAIN_FILE = "mixture.yaml", "train.yaml"


def _rel(path: Path | str, start: Path) -> str:
    """`path` relative to `start`; a URL as it is."""
    if is_url(path):
        return str(path)
    return os.path.relpath(Path(path).resolve(), start.resolve())


def mixture_from_shards(dirs: list[str], run: Path) -> str:
    from pretrainkit.shards import ShardSet

    sets = [(Path(d), ShardSet.open(d)) for d in dirs]
    names: list[str] = []
    for path, _ in sets:
        name = path.resolve().name
        names.append(name if name not in names else f"{name}-{len(names)}")
    total = sum(ss.num_tokens for _, ss in sets)
    lines = [
        f"# Mixture written by `ptk init` for {run.name}: one source per shard set, weighted by its tokens,",
        "# so each is read in proportion to its size (weights are normalized; set one to 0, or",
        "# `eval_only: true`, to validate on it without training). Paths are relative to this file.",
        "seed: 0  # decides every source's shuffle",
        "holdout: {fraction: 0.01, min_tokens: 16384}  # per source, never trained on: validation loss",
        "sources:",
    ]
    for name, (path, ss) in zip(names, sets):
        lines += [
            f"  - name: {name}  # {ss.num_docs:,} documents, {ss.num_tokens:,} tokens",
            f"    shards: {_rel(path, run)}",
            f"    weight: {ss.num_tokens / total:.4g}",
        ]
    return "\n".join(lines) + "\n"


def mixture_from_yaml(given: str, run: Path) -> str:
    from pretrainkit.mixtures.config import read_mixture_config

    cfg = read_mixture_config(given)
    doc = {
        "seed": cfg.seed,
        "holdout": {"fraction": cfg.holdout.fraction, "min_tokens": cfg.holdout.min_tokens},
        "sources": [],
    }
    for s in cfg.sources:
        entry = {"name": s.name, "shards": _rel(s.shards, run), "weight": s.weight}
        if s.max_epochs is not None:
            entry["max_epochs"] = s.max_epochs
        if s.replay is not None:
            entry["replay"] = {"from": _rel(s.replay.from_path, run), "mode": s.replay.mode}
        doc["sources"].append(entry)
    head = f"# Mixture copied by `ptk init` from {given} (paths rewritten relative to this file).\n"
    return head + yaml.safe_dump(doc, sort_keys=False)


def train_yaml(run: Path, plan, machine, corpus, minutes: float, law_name: str, probe=None) -> str:
    from pretrainkit.train.planning.first_run import checkpoint_every, eval_every, validates

    m = plan.model
    speed = (
        f"~{machine.flops_per_s:.2g} FLOP/s sustained, an estimate"
        if probe is None
        else f"~{machine.flops_per_s:.2g} FLOP/s over the minutes, measured: {probe.step_s:.3g} s per step,\n"
        f"# {probe.eval_s:.2g} s per evaluation and {probe.fixed_s:.1f} s start-up and shut-down "
        f"in a {probe.steps}-step run"
    )
    why = (
        f"the tokens are capped at 4 passes over the data (the optimum for {minutes:g} minutes wants more)\n"
        "# and the model is sized for those tokens, so it trains in less time than that"
        if plan.data_limited
        else f"the {law_name} law's compute-optimal split of {minutes:g} minutes of this machine"
    )
    return f"""\
# First training config for {run.name}, written by `ptk init` for this machine ({machine.name},
# {speed}) and {corpus.train_tokens:,} training tokens.
# Edit freely: `ptk plan --config` on this file shows memory per device; `ptk train --set key=value` overrides.
#
# Plan: {m.num_params() / 1e6:.3g}M parameters trained on {plan.tokens / 1e6:.3g}M tokens \
({plan.epochs:.2f} passes over the data),
# {plan.tokens_per_param:.1f} tokens per parameter \
({plan.optimal_tokens_per_param:.1f} would be compute-optimal for this size): about
# {minutes_text(plan.minutes)} minutes here{f" with --nproc {plan.nproc}" if plan.nproc > 1 else ""}. Sizes: {why}.
run_dir: .  # this directory: checkpoints/, metrics.jsonl, config.yaml (the resolved config)
max_steps: {plan.max_steps}
data:
  mixture: {MIXTURE_FILE}
  seq_len: {plan.seq_len}  # the median document has {corpus.median_doc_tokens:,} tokens
  document_masking: true  # each packed document attends to itself only (false: to the whole row)
model:  # Llama-style; the vocabulary ({corpus.vocab_size:,}) comes from the shards' tokenizer
  d_model: {m.d_model}
  n_layers: {m.n_layers}
  n_heads: {m.n_heads}
batch:
  global_size: {plan.global_size}  # sequences per optimizer step \
({plan.global_size * plan.seq_len:,} tokens), on all processes
  micro_size: {plan.micro_size}  # sequences per forward/backward; lower it if memory runs out
optim:
  lr: {plan.lr:g}
  min_lr: {plan.lr / 10:g}
  warmup_steps: {plan.warmup_steps}
  schedule: cosine  # or wsd (warmup-stable-decay)
precision: {plan.precision}
{_eval_line(eval_every(plan.max_steps), validates(plan, corpus), corpus.heldout_tokens)}
checkpoint: {{every: {checkpoint_every(plan.max_steps)}, keep: 2}}  # the same command resumes from the newest
# logging: {{tensorboard: true}}  # or wandb: {{project: NAME, mode: offline}}  (pip install 'pretrainkit[tracking]')
"""


def _eval_line(every: int, validating: bool, heldout_tokens: int | None) -> str:
    if validating:
        return f"eval: {{every: {every}, batches: 4}}  # validation loss per source"
    return (
        f"eval: {{every: 0, batches: 4}}  # off: a source's held-out split ({heldout_tokens:,} tokens)\n"
        "# is shorter than one sequence; with more documents per source, every: N gives a validation loss"
    )


def minutes_text(m: float) -> str:
    return f"{m:.0f}" if m >= 10 else f"{m:.1f}"
