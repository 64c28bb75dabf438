"""How fast this machine trains a proposed first run, measured, and the run's steps sized from that.

    probe = measure("runs/first/.ptk-init-probe.yaml", nproc=2, steps=probe_steps(plan, machine))  # timed
    plan = fit_to_minutes(plan, probe, minutes=30, corpus=corpus)  # max_steps that fill the minutes

An estimate from a nominal FLOP/s holds on an idle machine only; a shared one, a slow disk or a
launcher's start-up make the run take several times longer. So the probe runs the config exactly as
the user will (`ptk train CONFIG --nproc N`: launcher, processes, shard checks, data loader, model)
for a few seconds' worth of steps (PROBE_SECONDS at the nominal speed, within PROBE_STEPS) in a
temporary run directory, with one evaluation at the last step, and times:
- step_s: the mean step after the first (metrics.jsonl's tokens_per_s; the first carries warm-up; the
  mean, not the median, since a shared machine's slow steps recur in the real run too);
- eval_s: that evaluation (metrics.jsonl's val_seconds);
- fixed_s: the rest of its wall time (start-up, the first step's extra, the final checkpoint,
  shut-down), paid once per run.
A run of N steps with E evaluations then takes about fixed_s + N * step_s + E * eval_s.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from pretrainkit.train.planning.first_run import (
    MAX_EPOCHS,
    Corpus,
    FirstRun,
    Machine,
    eval_every,
    plan_first_run,
    validates,
    warmup_steps,
)
from pretrainkit.train.planning.init_files import train_yaml
from pretrainkit.train.rundir.run_dir import RunDir

PROBE_SECONDS = 3.0
PROBE_FILE = ".ptk-init-probe.yaml"  # the proposed config, run for a few steps to time it; removed after
PROBE_STEPS = (4, 20)


@dataclass(frozen=True)
class Probe:
    steps: int
    step_s: float
    eval_s: float
    fixed_s: float

    def overhead_s(self, max_steps: int) -> float:
        """What a run of `max_steps` steps spends besides its steps: start-up and the like, and evaluations
        (every eval_every(max_steps) steps and at the last)."""
        every = eval_every(max_steps)
        return self.fixed_s + (max_steps // every + (max_steps % every != 0)) * self.eval_s

    def seconds(self, max_steps: int) -> float:
        """Estimated wall time of a run of `max_steps` steps."""
        return self.overhead_s(max_steps) + max_steps * self.step_s


def probe_steps(plan: FirstRun, machine: Machine) -> int:
    """Steps that take about PROBE_SECONDS at the machine's nominal FLOP/s, within PROBE_STEPS."""
    step_flops = plan.model.flops_per_token(plan.seq_len) * plan.global_size * plan.seq_len
    lo, hi = PROBE_STEPS
    return max(lo, min(hi, round(PROBE_SECONDS * machine.flops_per_s / step_flops)))


def measure(config: str | Path, nproc: int, steps: int, validate: bool = True) -> Probe:
    """Run `ptk train CONFIG --nproc N` for `steps` steps in a temporary run directory and time it (with
    one evaluation at the last step when `validate`)."""
    run_dir = Path(tempfile.mkdtemp(prefix="ptk-init-probe-"))
    cmd = [
        sys.executable,
        "-m",
        "pretrainkit.cli",
        "train",
        str(config),
        "--nproc",
        str(nproc),
        "--set",
        f"run_dir={run_dir}",
        "--set",
        f"max_steps={steps}",
        "--set",
        f"eval.every={steps if validate else 0}",
        "--set",
        "checkpoint.every=0",
        "--set",
        "optim.warmup_steps=1",
    ]
    try:
        start = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - start
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(
                f"{config}: the probe run (a few steps of it, to time this machine) failed: {last} "
                "(ptk init --no-measure sizes the run without it)"
            )
        rows = [json.loads(line) for line in RunDir(run_dir).metrics.read_text(encoding="utf-8").splitlines()]
    finally:
        shutil.rmtree(run_dir, ignore_errors=True)
    train = [r for r in rows if "loss" in r]
    step_tokens = train[0]["tokens"]
    step_s = statistics.fmean(step_tokens / r["tokens_per_s"] for r in train[1:])
    eval_s = next((r["val_seconds"] for r in rows if "val_seconds" in r), 0.0)
    return Probe(steps, step_s, eval_s, max(0.0, wall - steps * step_s - eval_s))


def fit_to_minutes(plan: FirstRun, probe: Probe, minutes: float, corpus: Corpus) -> FirstRun:
    """`plan` with the most steps whose estimated wall time fits `minutes`, within MAX_EPOCHS passes."""
    step_tokens = plan.global_size * plan.seq_len
    cap = max(1, MAX_EPOCHS * corpus.train_tokens // step_tokens)
    budget = minutes * 60
    fits = max(1, math.floor((budget - probe.fixed_s) / probe.step_s))
    while fits > 1 and probe.seconds(fits) > budget:  # the evaluations' share: a few steps' worth
        fits = max(1, fits - math.ceil((probe.seconds(fits) - budget) / probe.step_s))
    steps = min(fits, cap)
    return dataclasses.replace(
        plan,
        max_steps=steps,
        warmup_steps=warmup_steps(steps),
        tokens=steps * step_tokens,
        epochs=steps * step_tokens / corpus.train_tokens,
        data_limited=fits > cap,
        minutes=probe.seconds(steps) / 60,
    )


def measured_machine(machine: Machine, plan: FirstRun, probe: Probe, minutes: float) -> Machine:
    """`machine` with the FLOP/s the probe saw, scaled by the share of `minutes` left to the steps (start-up
    and evaluations take the rest), so that planning for `minutes` on it sizes the model for what it can do."""
    step_flops = plan.model.flops_per_token(plan.seq_len) * plan.global_size * plan.seq_len
    share = max(0.05, 1 - probe.overhead_s(plan.max_steps) / (minutes * 60))
    return dataclasses.replace(machine, flops_per_s=step_flops / probe.step_s * share)


def measured_plan(run: Path, plan, machine, corpus, minutes: float, law):
    """Time `plan` on this machine; re-size the model for the throughput seen (timing it again when its
    shape changes) and fit max_steps to `minutes`. Returns the plan, the measured machine and the probe."""
    probe = _probe(run, plan, machine, corpus, minutes, law.name)
    measured = measured_machine(machine, plan, probe, minutes)
    resized = plan_first_run(corpus, measured, minutes, law)
    shape = ("model", "seq_len", "global_size", "micro_size", "nproc")
    if any(getattr(resized, k) != getattr(plan, k) for k in shape):
        probe = _probe(run, resized, measured, corpus, minutes, law.name)
        measured = measured_machine(measured, resized, probe, minutes)
    return fit_to_minutes(resized, probe, minutes, corpus), measured, probe


def _probe(run: Path, plan, machine, corpus, minutes: float, law_name: str):
    path = run / PROBE_FILE
    write_text_atomic(path, train_yaml(run, plan, machine, corpus, minutes, law_name))
    try:
        return measure(path, plan.nproc, probe_steps(plan, machine), validates(plan, corpus))
    finally:
        path.unlink(missing_ok=True)
