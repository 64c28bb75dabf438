"""`ptk plan`, `ptk scaling fit` and `ptk init`: sizing a run before it starts.

    ptk plan --flops 1e21 --devices 64 --device-memory 80 --peak-flops 989e12
    ptk plan --config run.yaml --tokens 2B --devices 2
    ptk plan --config run.yaml --devices 8 --tp 2 --pp 2
    ptk plan --config moe.yaml --devices 16 --ep 8      # a mixture of experts: active N, experts over 8 ranks
    ptk scaling fit runs/s1 runs/s2 runs/s3 runs/s4 runs/s5 --flops 1e20 -o law.json
    ptk init runs/first --shards shards/web shards/code --minutes 60   # a first mixture.yaml and train.yaml

Quantities accept SI suffixes: `7.5B` parameters, `300B` tokens, `989T` FLOP/s.

For a mixture of experts (`model.n_experts`), N in C = 6ND is the active parameter count (what one
token runs: the dense parts, the router and experts_per_token experts per sparse layer), the loss law
(fitted on dense models) predicts nothing, and memory counts every expert, split over `parallel.ep`
(or --ep) ranks.

`ptk init RUN_NAME (--shards DIR... | --mixture YAML)` makes RUN_NAME the run directory (checkpoints,
metrics.jsonl and the resolved config.yaml go beside its two files, `init_files.py`). The sizes come
from `first_run.py`: this machine's sustained FLOP/s for `--minutes`, the law's compute-optimal split,
at most four passes over the data, the sequence length from the documents. That FLOP/s is a nominal
figure, so the proposed config is then run for a few steps and timed (`probe.py`; unless --no-measure):
the model is re-sized for the throughput seen (and timed again if its shape changed) and max_steps is
what fills --minutes with the measured start-up, steps and evaluations. Existing files are never
overwritten.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
from pathlib import Path

import numpy as np

from pretrainkit.arguments import int_in, number_in
from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic, writing_into
from pretrainkit.output_folders import TRAIN, check_folder
from pretrainkit.quantities import quantity
from pretrainkit.train.planning.init_files import (
    MIXTURE_FILE,
    TRAIN_FILE,
    minutes_text,
    mixture_from_shards,
    mixture_from_yaml,
    train_yaml,
)
from pretrainkit.train.planning.memory import (
    PARALLEL_STRATEGY,
    STATE_BYTES,
    STRATEGY_LABELS,
    ActivationShape,
    Split,
    memory_table,
)
from pretrainkit.train.planning.plan import LAWS, LossLaw, load_law, resolve_budget, training_seconds

GB = 1e9


# The ranges of the integer options: past them a plan means nothing (and 2**64 devices overflow torch's sizes)
VOCAB_SIZE = int_in(1, 1 << 32)
DEVICES = int_in(1, 10**7)
PARALLEL = int_in(1, 1 << 20)  # --tp, --pp, --micro-batch
SEQ_LEN = int_in(1, 1 << 20)


def human(value: float) -> str:
    """3 significant digits with an SI suffix: 7.50B, 1.33T."""
    for suffix, scale in (("P", 1e15), ("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def duration(seconds: float) -> str:
    for unit, scale in (("days", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds:.3g} s"


# How far outside the fitted range a law is still read (flagged as an extrapolation); further out,
# its power terms dominate and the number means nothing (N = 1 would "predict" a loss of 2569).
EXTRAPOLATION_FACTOR = 10.0


def _outside(value: float, lo: float, hi: float) -> float:
    """By what factor `value` lies outside [lo, hi] (1 inside)."""
    return max(lo / value, value / hi, 1.0)


def loss_line(law: LossLaw, params: float, tokens: float, loss: float, brief: bool = False) -> str:
    """The predicted loss, whose loss it is (not comparable across data or tokenizers) and whether
    (params, tokens) is an extrapolation; no number at all far outside the law's range. The sizes
    still follow from C = 6ND, so the plan itself is never refused. `brief`: without the reasons."""
    text = f"{loss:.4f} predicted"
    if not brief:
        text += f" for the law's own data and tokenizer ({law.data}), not for another corpus or tokenizer"
    if law.covers(params, tokens):
        return text
    (n_lo, n_hi), (d_lo, d_hi) = law.params_range, law.tokens_range
    factor = max(_outside(params, n_lo, n_hi), _outside(tokens, d_lo, d_hi))
    if brief:
        return (
            f"not predicted (outside the law's range by {factor:.3g}x)"
            if factor > EXTRAPOLATION_FACTOR
            else f"{text} (an extrapolation)"
        )
    where = (
        f"N = {human(params)} and D = {human(tokens)} lie outside the range the law was fitted on "
        f"(N {human(n_lo)}-{human(n_hi)}, D {human(d_lo)}-{human(d_hi)})"
    )
    if factor > EXTRAPOLATION_FACTOR:
        return f"not predicted: {where}, by {factor:.3g}x (the law is read up to {EXTRAPOLATION_FACTOR:g}x outside it)"
    return f"{text}; {where}: an extrapolation"


def numbers_may_be_negative(parser: argparse.ArgumentParser) -> None:
    """Read `--flops -1e21` as a value (then refused as not positive), as Python 3.13's argparse does;
    older ones take `-1e21` for an option and say "expected one argument"."""
    parser._negative_number_matcher = re.compile(r"^-\.?\d")


def law_formula(law: LossLaw) -> str:
    return f"L = {law.E:.4g} + {law.A:.4g}/N^{law.alpha:.4g} + {law.B:.4g}/D^{law.beta:.4g}"


def model_of_config(cfg, vocab_size: int | None, where: str):
    """The ModelConfig of a training config, its vocabulary from `vocab_size` or else from the mixture."""
    from pretrainkit.train.model.resolve import model_config

    if vocab_size is None:
        from pretrainkit.mixtures import load_mixture

        try:
            mix = load_mixture(cfg.data.mixture, verify=False, shard_cache=cfg.data.cache.shard_cache())
            vocab_size = mix.tokenizer.vocab_size
        except UserError as e:
            raise UserError(f"{where}: cannot find the vocabulary size ({e}); pass --vocab-size") from None
    return model_config(cfg, vocab_size, where)


# ---- ptk plan ---------------------------------------------------------------------------------------


def _split(args: argparse.Namespace, cfg, shape: ActivationShape | None) -> tuple[Split, int]:
    """The tensor/pipeline/expert split (--tp/--pp/--ep, else the config's) and the data-parallel size it
    leaves of --devices."""
    p = cfg.parallel if cfg is not None else None
    tp = args.tp or (p.tp if p else 1)
    pp = args.pp or (p.pp if p else 1)
    ep = args.ep or (p.ep if p else 1)
    if (tp > 1 or pp > 1 or ep > 1) and shape is None:
        raise UserError("--tp, --pp and --ep need --config: the split depends on the model's shape")
    if args.devices % (tp * pp):
        raise UserError(f"--devices {args.devices} is not a multiple of tp x pp = {tp} x {pp}")
    dp = args.devices // (tp * pp)
    if ep > 1:
        _check_ep(ep, dp, tp, shape)
    if p is None:
        return Split(tp=tp, pp=pp, ep=ep, microbatches=pp), dp
    b = cfg.batch
    microbatches = p.pp_microbatches or max(1, b.global_size // (b.micro_size * dp))
    return Split(
        tp=tp,
        pp=pp,
        ep=ep,
        stages_per_rank=p.stages if pp > 1 else 1,
        schedule=p.pp_schedule,
        microbatches=microbatches,
    ), dp


def _check_ep(ep: int, dp: int, tp: int, shape: ActivationShape) -> None:
    """Expert parallelism splits a mixture's experts over ep of its dp data-parallel devices."""
    if shape.experts is None:
        raise UserError(f"ep {ep}: the model has no experts to split (model.n_experts is not set)")
    if shape.experts.n_experts % ep:
        raise UserError(f"ep {ep} does not divide model.n_experts = {shape.experts.n_experts}")
    if dp % ep:
        raise UserError(f"ep {ep} does not divide the data-parallel size {dp} (--devices / (tp x pp))")
    if tp > 1:
        raise UserError(f"ep {ep} with tp {tp}: a mixture of experts is not split by tensor parallelism")


def _memory_lines(
    args: argparse.Namespace,
    params: float,
    shape: ActivationShape | None,
    micro_batch: int,
    seq_len: int,
    dtype: str,
    state_bytes: str,
    chosen: str | None,
    checkpointing: bool,
    split: Split,
    dp: int,
) -> list[str]:
    rows = memory_table(params, dp, state_bytes, shape, micro_batch, seq_len, dtype, split)
    b = STATE_BYTES[state_bytes]
    biggest = max(r.total or r.states.total for r in rows)
    unit, scale, exponent = ("GB", GB, 9) if biggest >= GB else ("MB", 1e6, 6)  # decimal, as the ZeRO paper
    layout = ""
    if split.tp > 1 or split.pp > 1:
        layout = f" = dp {dp} x tp {split.tp} x pp {split.pp}" + (
            f" ({split.schedule}, {split.microbatches} micro-batches; the largest stage)" if split.pp > 1 else ""
        )
    lines = [
        f"memory per device ({unit} = 1e{exponent} bytes) on {args.devices} device(s){layout}, Adam with "
        f"{b.param}+{b.grad}+{b.optimizer} bytes/param ({state_bytes})"
    ]
    if shape is None:
        lines.append("  activations: pass --config to count them (they depend on the model's shape)")
    else:
        lines.append(
            f"  activations: micro-batch {micro_batch} x {seq_len} tokens, {dtype}; "
            "ckpt = per-block activation checkpointing"
        )
    header = f"  {'strategy':<12} {'params':>8} {'grads':>8} {'optim':>8} {'states':>8}"
    if shape is not None:
        header += f" {'acts':>8} {'acts ckpt':>9} {'total':>8} {'total ckpt':>10}"
    if args.device_memory:
        header += f"  fits in {args.device_memory / GB:g} GB"
    lines.append(header)
    for r in rows:
        s = r.states
        line = f"  {STRATEGY_LABELS[r.strategy]:<12}" + "".join(
            f" {v / scale:8.3g}" for v in (s.params, s.grads, s.optimizer, s.total)
        )
        if shape is not None:
            line += (
                f" {r.activations / scale:8.3g} {r.activations_checkpointed / scale:9.3g} {r.total / scale:8.3g}"
                f" {r.total_checkpointed / scale:10.3g}"
            )
        if args.device_memory:
            if shape is None:
                verdict = "yes (model states)" if s.total <= args.device_memory else "no"
            elif r.total <= args.device_memory:
                verdict = "yes"
            elif r.total_checkpointed <= args.device_memory:
                verdict = "with checkpointing"
            else:
                verdict = "no"
            line += f"  {verdict}"
        if r.strategy == chosen:
            line += "   <- config" + (" (checkpointing on)" if checkpointing else "")
        lines.append(line)
    return lines


def _expert_lines(model, experts, seq_len: int) -> list[str]:
    """A mixture of experts' active and total parameters and its FLOPs per token."""
    total, active = model.num_params(), model.num_params(active=True)
    matmul = model.num_params(embeddings=False, active=True)
    attention = model.flops_per_token(seq_len) - 6 * matmul
    return [
        f"              the active parameters, of {human(total)} in total ({active / total:.1%}): "
        f"{experts.experts_per_token} of {experts.n_experts} experts per token in {experts.sparse_layers} of "
        f"{model.n_layers} layers",
        f"FLOPs/token   {model.flops_per_token(seq_len):.3g} = 6 x {human(matmul)}"
        f" active matmul parameters + {attention:.3g} attention at {seq_len} tokens (PaLM's count)",
    ]


def run_plan(args: argparse.Namespace) -> int:
    law = load_law(args.law)
    params, tokens, shape, chosen, checkpointing, cfg = args.params, args.tokens, None, None, False, None
    labels: dict[str, str] = {}
    micro_batch, seq_len, dtype, state_bytes = args.micro_batch, args.seq_len, args.activation_dtype, args.state_bytes
    if args.config:
        if args.params:
            raise UserError("give --params or --config, not both")
        from pretrainkit.train.config import load_config

        cfg = load_config(args.config)
        model = model_of_config(cfg, args.vocab_size, str(args.config))
        # What C = 6ND counts: of a mixture of experts, the parameters one token runs.
        params = float(model.num_params(active=True))
        shape = ActivationShape.from_model_config(model)
        micro_batch = micro_batch or cfg.batch.micro_size
        seq_len = seq_len or cfg.data.seq_len
        dtype = dtype or cfg.precision
        # The project's trainer keeps fp32 weights and Adam moments, bf16 autocast or not.
        state_bytes = state_bytes or "fp32"
        chosen, checkpointing = PARALLEL_STRATEGY[cfg.parallel.data], cfg.activation_checkpointing
        labels["params"] = f"{args.config}: the model's {'active ' if shape.experts else ''}N = {params:.3g}"
        if tokens is None and args.flops is None:
            tokens = float(cfg.max_steps * cfg.batch.global_size * cfg.data.seq_len)
            labels["tokens"] = f"{args.config}: max_steps x batch.global_size x data.seq_len = {tokens:.3g}"
    budget = resolve_budget(law, args.flops, params, tokens, labels)

    def origin(name: str) -> str:
        if name == "tokens" and args.config and args.tokens is None and args.flops is None:
            return "config: max_steps x batch.global_size x data.seq_len"
        if name in budget.given:
            return "given"
        return "from C = 6ND" if len(budget.given) == 2 else "compute-optimal"

    opt_n, opt_d = budget.optimal
    experts = shape.experts if shape is not None else None
    of_a = "" if experts is None else ", of a dense model"  # the law's optimum is a dense model's
    lines = [
        f"loss law      {law.name}: {law_formula(law)}",
        f"compute       C = {budget.flops:.3g} FLOPs ({'given' if args.flops else 'C = 6ND'})",
        f"parameters    N = {human(budget.params)} ({origin('params')}" + (f", {args.config})" if args.config else ")"),
    ]
    if experts is not None:
        lines += _expert_lines(model, experts, seq_len or model.max_seq_len)
    lines += [
        f"tokens        D = {human(budget.tokens)} ({origin('tokens')})",
        f"tokens/param  {budget.tokens_per_param:.3g}",
        "loss          not predicted: the law was fitted on dense models, not a mixture of experts"
        if experts is not None
        else f"loss          {loss_line(law, budget.params, budget.tokens, budget.loss)}",
        f"optimum       for this C{of_a}: N = {human(opt_n)}, D = {human(opt_d)} ({opt_d / opt_n:.3g} tokens/param), "
        f"loss {loss_line(law, opt_n, opt_d, budget.optimal_loss, brief=True)}",
    ]
    if args.peak_flops:
        seconds = training_seconds(budget.flops, args.devices, args.peak_flops, args.mfu)
        lines.append(
            f"time          {duration(seconds)} on {args.devices} device(s) of {human(args.peak_flops)} FLOP/s "
            f"at {args.mfu:.0%} MFU ({seconds * args.devices / 3600:,.0f} device-hours)"
        )
    else:
        lines.append("time          pass --peak-flops (per device) for the wall time")
    split, dp = _split(args, cfg, shape)
    lines += _memory_lines(
        args,
        model.num_params() if experts is not None else budget.params,  # memory holds every expert
        shape,
        micro_batch or 1,
        seq_len or 2048,
        dtype or "bf16",
        state_bytes or "mixed",
        chosen,
        checkpointing,
        split,
        dp,
    )
    print("\n".join(lines))
    return 0


# ---- ptk scaling fit --------------------------------------------------------------------------------


def _run_point(run_dir: Path, metric: str, vocab_size: int | None):
    from pretrainkit.train.config import load_config
    from pretrainkit.train.planning.scaling import RunPoint
    from pretrainkit.train.reports.run_log import read_run
    from pretrainkit.train.rundir.run_dir import RunDir

    config_path = RunDir(run_dir).config_file
    cfg = load_config(config_path)
    params = model_of_config(cfg, vocab_size, str(config_path)).num_params()
    run = read_run(run_dir)
    tokens = run.total_tokens()
    loss = run.final_val_loss() if metric == "val" else None
    if loss is None:
        loss = run.final_train_loss()
    if loss is None or tokens <= 0:
        raise UserError(f"{RunDir(run_dir).metrics}: no finished training steps to fit")
    return RunPoint(name=str(run_dir), params=float(params), tokens=tokens, loss=loss)


def _points_file(path: Path):
    from pretrainkit.train.planning.scaling import RunPoint

    points = []
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            points.append(
                RunPoint(
                    str(row.get("name", f"{path.name}:{i}")),
                    float(row["params"]),
                    float(row["tokens"]),
                    float(row["loss"]),
                )
            )
        except (ValueError, TypeError, KeyError, AttributeError) as e:
            raise UserError(f'{path}: line {i}: expected {{"params", "tokens", "loss"}} numbers ({e})') from None
    return points


def _prediction(text: str) -> tuple[float, float]:
    n, sep, d = text.partition(":")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected N:D (e.g. 1B:20B), got {text!r}")
    return quantity(n), quantity(d)


def run_scaling_fit(args: argparse.Namespace) -> int:
    from pretrainkit.train.planning.scaling import fit_loss_law

    points = [_run_point(Path(d), args.metric, args.vocab_size) for d in args.run_dirs]
    for f in args.points or []:
        points += _points_file(Path(f))
    fit = fit_loss_law(points, starts=args.starts, progress=True)
    law = dataclasses.replace(
        fit.law,
        params_range=(min(p.params for p in points), max(p.params for p in points)),
        tokens_range=(min(p.tokens for p in points), max(p.tokens for p in points)),
    )
    lines = [
        f"fitted on {len(points)} runs (Huber delta 1e-3 on log-loss, best of {fit.starts} L-BFGS starts, "
        f"objective {fit.objective:.3g})",
        f"  {law_formula(law)}",
        f"  E={law.E:.6g} A={law.A:.6g} B={law.B:.6g} alpha={law.alpha:.6g} beta={law.beta:.6g}",
        f"  {'run':<32} {'N':>8} {'D':>8} {'loss':>8} {'fitted':>8}",
    ]
    for p in points:
        lines.append(
            f"  {p.name[-32:]:<32} {human(p.params):>8} {human(p.tokens):>8} {p.loss:8.4f} "
            f"{law.loss(p.params, p.tokens):8.4f}"
        )
    for n, d in args.predict or []:
        lines.append(f"predicted loss at N={human(n)}, D={human(d)}: {law.loss(n, d):.4f}")
    for c in args.flops or []:
        n, d = law.optimal_split(c)
        lines.append(f"compute-optimal for C={c:.3g}: N={human(n)}, D={human(d)}, loss {law.loss(n, d):.4f}")
    if args.output:
        write_text_atomic(args.output, law.to_json())
        lines.append(f"wrote {args.output} (use it with ptk plan --law {args.output})")
    print("\n".join(lines))
    return 0


# ---- ptk report -------------------------------------------------------------------------------------


def run_init(args: argparse.Namespace) -> int:
    with writing_into(args.run_name):  # a full disk or read-only folder is one line naming the file
        return _run_init(args)


def _run_init(args: argparse.Namespace) -> int:
    from pretrainkit.mixtures import load_mixture
    from pretrainkit.train.config import load_config
    from pretrainkit.train.planning.first_run import Corpus, plan_first_run, this_machine, validates
    from pretrainkit.train.planning.plan import load_law
    from pretrainkit.train.planning.probe import measured_plan

    run = Path(args.run_name)
    for name in (MIXTURE_FILE, TRAIN_FILE):
        if (run / name).exists():
            raise UserError(f"{run / name}: exists; ptk init never overwrites (pick another RUN_NAME or remove it)")
    if run.exists() and not run.is_dir():
        raise UserError(f"{run}: exists and is not a directory")
    check_folder(run, TRAIN, "ptk init")  # RUN_NAME is the run directory (`run_dir: .`)
    law = load_law(args.law)
    text = mixture_from_shards(args.shards, run) if args.shards else mixture_from_yaml(args.mixture, run)
    write_text_atomic(run / MIXTURE_FILE, text)
    try:
        mix = load_mixture(run / MIXTURE_FILE)  # verified: a plan for altered shards would fail in ptk train
        lengths = np.concatenate([s.shard_set.doc_lengths() for s in mix.train_sources])
        corpus = Corpus(
            sum(s.train_tokens for s in mix.train_sources),
            int(np.median(lengths)),
            mix.tokenizer.vocab_size,
            min(s.split.heldout.tokens for s in mix.train_sources),
        )
        machine, probe = this_machine(), None
        plan = plan_first_run(corpus, machine, args.minutes, law)
        if not args.no_measure:
            plan, machine, probe = measured_plan(run, plan, machine, corpus, args.minutes, law)
        write_text_atomic(run / TRAIN_FILE, train_yaml(run, plan, machine, corpus, args.minutes, law.name, probe))
    except BaseException:  # no half-written RUN_NAME: the same command can run again
        (run / MIXTURE_FILE).unlink(missing_ok=True)
        raise
    load_config(run / TRAIN_FILE)  # what ptk train will read: a bug here is ours, not the user's
    sources = f"{len(mix.sources)} source{'s' if len(mix.sources) > 1 else ''}"
    print(
        f"ptk init: wrote {run / MIXTURE_FILE} ({sources}) and {run / TRAIN_FILE}: "
        f"{plan.params / 1e6:.3g}M parameters, {plan.max_steps} steps of {plan.global_size} x {plan.seq_len} "
        f"tokens ({plan.tokens / 1e6:.3g}M tokens, {plan.epochs:.2f} epochs, "
        f"{plan.tokens_per_param:.1f} tokens/param), "
        f"about {minutes_text(plan.minutes)} min on {machine.name}"
        + ("" if probe is None else f" (measured: {probe.step_s:.3g} s per step, {probe.fixed_s:.1f} s start-up)")
    )
    if not validates(plan, corpus):
        print(
            f"ptk init: note: validation is off in {run / TRAIN_FILE}: a source's held-out split "
            f"({corpus.heldout_tokens:,} tokens) is shorter than one sequence of {plan.seq_len + 1:,} tokens"
        )
    print(f"next: ptk train {run / TRAIN_FILE}" + (f" --nproc {plan.nproc}" if plan.nproc > 1 else ""))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "plan",
        help="compute-optimal size, tokens, loss, time and memory per device of a run",
        description="Any one or two of --flops, --params (or --config), --tokens: the rest follows "
        "from C = 6ND and the loss law. Memory per device under DDP and ZeRO-1/2/3.",
    )
    numbers_may_be_negative(p)
    p.add_argument("--flops", type=quantity, help="training compute budget C (FLOPs), e.g. 1e21")
    p.add_argument("--params", type=quantity, help="parameter count N, e.g. 7.5B")
    p.add_argument("--config", help="a training config (ptk train CONFIG.yaml): N, micro-batch, seq_len, precision")
    p.add_argument("--vocab-size", type=VOCAB_SIZE, help="with --config: instead of reading the mixture's manifest")
    p.add_argument("--tokens", type=quantity, help="training tokens D, e.g. 300B")
    p.add_argument(
        "--law",
        default="besiroglu",
        help=f"loss law: {', '.join(LAWS)} or a JSON file from `ptk scaling fit -o` (default besiroglu)",
    )
    p.add_argument(
        "--devices",
        type=DEVICES,
        default=1,
        help="devices in all (default 1); data-parallel over what tp x pp leave",
    )
    p.add_argument("--tp", type=PARALLEL, help="tensor-parallel size (default: the config's, else 1)")
    p.add_argument("--pp", type=PARALLEL, help="pipeline stages (default: the config's, else 1)")
    p.add_argument(
        "--ep", type=PARALLEL, help="expert-parallel size, of the data-parallel devices (default: the config's, else 1)"
    )
    p.add_argument("--device-memory", type=lambda t: quantity(t) * GB, help="GB per device, e.g. 80")
    p.add_argument("--peak-flops", type=quantity, help="peak FLOP/s of one device, e.g. 989T")
    p.add_argument(
        "--mfu",
        type=number_in(0, 1, lo_open=True),
        default=0.4,
        help="model FLOPs utilisation for the time (default 0.4)",
    )
    p.add_argument("--micro-batch", type=PARALLEL, help="sequences per device per micro-step (default: config, else 1)")
    p.add_argument("--seq-len", type=SEQ_LEN, help="tokens per sequence (default: config, else 2048)")
    p.add_argument("--activation-dtype", choices=("bf16", "fp32"), help="(default: config's precision, else bf16)")
    p.add_argument(
        "--state-bytes",
        choices=tuple(STATE_BYTES),
        help="mixed: 2+2+12 bytes/param (ZeRO paper); fp32: 4+4+8 (default: fp32 with --config, else mixed)",
    )
    p.set_defaults(func=run_plan)

    scaling = sub.add_parser("scaling", help="loss-law fits over finished runs").add_subparsers(
        dest="scaling_command", metavar="COMMAND", required=True
    )
    f = scaling.add_parser(
        "fit",
        help="fit L(N, D) = E + A/N^alpha + B/D^beta to the final losses of runs",
        description="Hoffmann et al. approach 3: Huber loss on log residuals, L-BFGS from several starts.",
    )
    numbers_may_be_negative(f)
    f.add_argument("run_dirs", nargs="*", metavar="RUN_DIR", help="finished runs (config.yaml + metrics.jsonl)")
    f.add_argument(
        "--points",
        action="append",
        metavar="FILE.jsonl",
        help='more points, one {"params", "tokens", "loss"} object per line',
    )
    f.add_argument(
        "--metric",
        choices=("val", "train"),
        default="val",
        help=(
            "final validation loss (mean over sources; default, falls back to train) "
            "or the mean of the last 10 training losses"
        ),
    )
    f.add_argument("--vocab-size", type=VOCAB_SIZE, help="instead of reading each run's mixture manifest")
    f.add_argument(
        "--starts", type=int_in(1, 10**4), default=16, help="L-BFGS starts from the best grid points (default 16)"
    )
    f.add_argument(
        "--predict", type=_prediction, action="append", metavar="N:D", help="print the loss at N:D, e.g. 1B:20B"
    )
    f.add_argument("--flops", type=quantity, action="append", metavar="C", help="print the compute-optimal N, D for C")
    f.add_argument("-o", "--output", help="write the fitted law as JSON (for ptk plan --law)")
    f.set_defaults(func=run_scaling_fit, local_outputs=("output",))

    p = sub.add_parser(
        "init",
        help="write a commented first mixture.yaml and train.yaml sized for this machine",
        description="Size a model, batch, sequence length and steps for the shards and this machine "
        "(compute-optimal for --minutes of training, at most 4 epochs) and write RUN_NAME/mixture.yaml "
        "and RUN_NAME/train.yaml, commented, ready for ptk train.",
    )
    p.add_argument("run_name", metavar="RUN_NAME", help="the run directory to create")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument(
        "--shards", nargs="+", metavar="DIR", help="shard sets, one source each, weighted by their tokens"
    )
    what.add_argument("--mixture", metavar="YAML", help="an existing mixture (copied, its paths rewritten)")
    p.add_argument(
        "--minutes",
        type=number_in(0, 10**6, lo_open=True),
        default=30.0,
        help="training time to size for (default %(default)s)",
    )
    p.add_argument("--law", default="besiroglu", help="loss law for the compute-optimal split (see ptk plan)")
    p.add_argument(
        "--no-measure",
        action="store_true",
        help="size from the nominal FLOP/s of this machine's cores or GPUs, without timing a few steps "
        "(the same files for the same inputs; the time is right only on an idle machine)",
    )
    p.set_defaults(func=run_init, local_outputs=("run_name",))
