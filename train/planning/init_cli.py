"""`ptk init RUN_NAME (--shards DIR... | --mixture YAML)`: a commented first mixture.yaml and train.yaml.

    ptk init runs/first --shards shards/web shards/code          # sources weighted by their tokens
    ptk init runs/first --mixture mixtures/mine.yaml --minutes 60
    ptk train runs/first/train.yaml

RUN_NAME becomes the run directory (checkpoints, metrics.jsonl and the resolved config.yaml go
beside the two files). The sizes come from `train/planning/first_run.py`: this machine's sustained
FLOP/s for `--minutes`, the law's compute-optimal split, at most four passes over the data, the
sequence length from the documents. That FLOP/s is a nominal figure, so the proposed config is then
run for a few steps and timed (`train/planning/probe.py`; unless --no-measure): the model is re-sized
for the throughput seen (and timed again if its shape changed) and max_steps is what fills --minutes
with the measured start-up, steps and evaluations. Existing files are never overwritten.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import numpy as np
import yaml

from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic

MIXTURE_FILE, TRAIN_FILE = "mixture.yaml", "train.yaml"
PROBE_FILE = ".ptk-init-probe.yaml"  # the proposed config, run for a few steps to time it; removed after


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("init", help="write a commented first mixture.yaml and train.yaml sized for this machine",
                       description="Size a model, batch, sequence length and steps for the shards and this machine "
                       "(compute-optimal for --minutes of training, at most 4 epochs) and write RUN_NAME/mixture.yaml "
                       "and RUN_NAME/train.yaml, commented, ready for ptk train.")  # fmt: skip
    p.add_argument("run_name", metavar="RUN_NAME", help="the run directory to create")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--shards", nargs="+", metavar="DIR", help="shard sets, one source each, weighted by their tokens")
    what.add_argument("--mixture", metavar="YAML", help="an existing mixture (copied, its paths rewritten)")
    p.add_argument("--minutes", type=float, default=30.0, help="training time to size for (default %(default)s)")
    p.add_argument("--law", default="besiroglu", help="loss law for the compute-optimal split (see ptk plan)")
    p.add_argument("--no-measure", action="store_true",
                   help="size from the nominal FLOP/s of this machine's cores or GPUs, without timing a few steps "
                   "(the same files for the same inputs; the time is right only on an idle machine)")  # fmt: skip
    p.set_defaults(func=run_init)


def _rel(path: Path, start: Path) -> str:
    return os.path.relpath(path.resolve(), start.resolve())


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
        lines += [f"  - name: {name}  # {ss.num_docs:,} documents, {ss.num_tokens:,} tokens",
                  f"    shards: {_rel(path, run)}",
                  f"    weight: {ss.num_tokens / total:.4g}"]  # fmt: skip
    return "\n".join(lines) + "\n"


def mixture_from_yaml(given: str, run: Path) -> str:
    from pretrainkit.mixtures.config import read_mixture_config

    cfg = read_mixture_config(given)
    doc = {"seed": cfg.seed, "holdout": {"fraction": cfg.holdout.fraction, "min_tokens": cfg.holdout.min_tokens},
           "sources": []}  # fmt: skip
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
    from pretrainkit.train.planning.first_run import checkpoint_every, eval_every

    m = plan.model
    speed = (f"~{machine.flops_per_s:.2g} FLOP/s sustained, an estimate" if probe is None else
             f"~{machine.flops_per_s:.2g} FLOP/s over the minutes, measured: {probe.step_s:.3g} s per step,\n"
             f"# {probe.eval_s:.2g} s per evaluation and {probe.fixed_s:.1f} s start-up and shut-down "
             f"in a {probe.steps}-step run")  # fmt: skip
    why = (f"the tokens are capped at 4 passes over the data (the optimum for {minutes:g} minutes wants more)\n"
           "# and the model is sized for those tokens, so it trains in less time than that"
           if plan.data_limited else f"the {law_name} law's compute-optimal split of {minutes:g} minutes of this machine")  # fmt: skip
    return f"""\
# First training config for {run.name}, written by `ptk init` for this machine ({machine.name},
# {speed}) and {corpus.train_tokens:,} training tokens.
# Edit freely: `ptk plan --config` on this file shows memory per device; `ptk train --set key=value` overrides.
#
# Plan: {m.num_params() / 1e6:.3g}M parameters trained on {plan.tokens / 1e6:.3g}M tokens ({plan.epochs:.2f} passes over the data),
# {plan.tokens_per_param:.1f} tokens per parameter ({plan.optimal_tokens_per_param:.1f} would be compute-optimal for this size): about
# {_minutes(plan.minutes)} minutes here{f' with --nproc {plan.nproc}' if plan.nproc > 1 else ''}. Sizes: {why}.
run_dir: .  # this directory: checkpoints/, metrics.jsonl, config.yaml (the resolved config)
max_steps: {plan.max_steps}
data:
  mixture: {MIXTURE_FILE}
  seq_len: {plan.seq_len}  # the median document has {corpus.median_doc_tokens:,} tokens
model:  # Llama-style; the vocabulary ({corpus.vocab_size:,}) comes from the shards' tokenizer
  d_model: {m.d_model}
  n_layers: {m.n_layers}
  n_heads: {m.n_heads}
batch:
  global_size: {plan.global_size}  # sequences per optimizer step ({plan.global_size * plan.seq_len:,} tokens), on all processes
  micro_size: {plan.micro_size}  # sequences per forward/backward; lower it if memory runs out
optim:
  lr: {plan.lr:g}
  min_lr: {plan.lr / 10:g}
  warmup_steps: {plan.warmup_steps}
  schedule: cosine  # or wsd (warmup-stable-decay)
precision: {plan.precision}
eval: {{every: {eval_every(plan.max_steps)}, batches: 4}}  # validation loss per source
checkpoint: {{every: {checkpoint_every(plan.max_steps)}, keep: 2}}  # the same command resumes from the newest
# logging: {{tensorboard: true}}  # or wandb: {{project: NAME, mode: offline}}  (pip install 'pretrainkit[tracking]')
"""


def run_init(args: argparse.Namespace) -> int:
    from pretrainkit.mixtures import load_mixture
    from pretrainkit.train.config import load_config
    from pretrainkit.train.planning.first_run import Corpus, plan_first_run, this_machine
    from pretrainkit.train.planning.plan import load_law

    if not args.minutes > 0:
        raise UserError(f"--minutes must be > 0, got {args.minutes}")
    run = Path(args.run_name)
    for name in (MIXTURE_FILE, TRAIN_FILE):
        if (run / name).exists():
            raise UserError(f"{run / name}: exists; ptk init never overwrites (pick another RUN_NAME or remove it)")
    if run.exists() and not run.is_dir():
        raise UserError(f"{run}: exists and is not a directory")
    law = load_law(args.law)
    text = mixture_from_shards(args.shards, run) if args.shards else mixture_from_yaml(args.mixture, run)
    write_text_atomic(run / MIXTURE_FILE, text)
    mix = load_mixture(run / MIXTURE_FILE, verify=False)
    lengths = np.concatenate([s.shard_set.doc_lengths() for s in mix.train_sources])
    corpus = Corpus(sum(s.train_tokens for s in mix.train_sources), int(np.median(lengths)), mix.tokenizer.vocab_size)
    machine, probe = this_machine(), None
    plan = plan_first_run(corpus, machine, args.minutes, law)
    if not args.no_measure:
        try:
            plan, machine, probe = measured_plan(run, plan, machine, corpus, args.minutes, law)
        except BaseException:  # no half-written RUN_NAME: the same command can run again
            (run / MIXTURE_FILE).unlink(missing_ok=True)
            raise
    write_text_atomic(run / TRAIN_FILE, train_yaml(run, plan, machine, corpus, args.minutes, law.name, probe))
    load_config(run / TRAIN_FILE)  # what ptk train will read: a bug here is ours, not the user's
    sources = f"{len(mix.sources)} source{'s' if len(mix.sources) > 1 else ''}"
    print(f"ptk init: wrote {run / MIXTURE_FILE} ({sources}) and {run / TRAIN_FILE}: "
          f"{plan.params / 1e6:.3g}M parameters, {plan.max_steps} steps of {plan.global_size} x {plan.seq_len} "
          f"tokens ({plan.tokens / 1e6:.3g}M tokens, {plan.epochs:.2f} epochs, {plan.tokens_per_param:.1f} tokens/param), "
          f"about {_minutes(plan.minutes)} min on {machine.name}"
          + ("" if probe is None else f" (measured: {probe.step_s:.3g} s per step, {probe.fixed_s:.1f} s start-up)"))  # fmt: skip
    print(f"next: ptk train {run / TRAIN_FILE}" + (f" --nproc {plan.nproc}" if plan.nproc > 1 else ""))
    return 0


def measured_plan(run: Path, plan, machine, corpus, minutes: float, law):
    """Time `plan` on this machine; re-size the model for the throughput seen (timing it again when its
    shape changes) and fit max_steps to `minutes`. Returns the plan, the measured machine and the probe."""
    from pretrainkit.train.planning.first_run import plan_first_run
    from pretrainkit.train.planning.probe import fit_to_minutes, measured_machine

    probe = _probe(run, plan, machine, corpus, minutes, law.name)
    measured = measured_machine(machine, plan, probe, minutes)
    resized = plan_first_run(corpus, measured, minutes, law)
    shape = ("model", "seq_len", "global_size", "micro_size", "nproc")
    if any(getattr(resized, k) != getattr(plan, k) for k in shape):
        probe = _probe(run, resized, measured, corpus, minutes, law.name)
        measured = measured_machine(measured, resized, probe, minutes)
    return fit_to_minutes(resized, probe, minutes, corpus), measured, probe


def _probe(run: Path, plan, machine, corpus, minutes: float, law_name: str):
    from pretrainkit.train.planning.probe import measure, probe_steps

    path = run / PROBE_FILE
    write_text_atomic(path, train_yaml(run, plan, machine, corpus, minutes, law_name))
    try:
        return measure(path, plan.nproc, probe_steps(plan, machine))
    finally:
        path.unlink(missing_ok=True)


def _minutes(m: float) -> str:
    return f"{m:.0f}" if m >= 10 else f"{m:.1f}"
