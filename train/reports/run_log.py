"""Reading a run directory's logs: `metrics.jsonl` (training and validation rows) and `events.jsonl`.

    run = read_run("runs/base")
    run.train["loss"], run.val["web"], run.events, run.final_val_loss()

Training rows carry `step, loss, lr, grad_norm, tokens` (cumulative), `tokens_per_s` (and `mfu` when the device's
peak is known); validation rows carry `{"step", "val_loss": {source: value}}` and, with `eval.tasks`,
`"tasks": {"NAME/acc": value, "NAME/acc_norm": value}`, `"task_items"` and `"task_chance"` per task; events rows (loss
spikes, written by `train/loop/training_loop.py`) carry `step`, `loss`, `grad_norm`, window statistics, `reason`
and `action`; only `step` is required here. A resumed run may log a step twice:
the last row for a step wins, as it is the one the surviving run produced. A continued run
(`init_from`) also has `init_from.json` (its base's path, step and tokens), and its `config.yaml`
names the mixture whose replayed and validation-only sources the report marks.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from pretrainkit.errors import UserError, quoted, shortened
from pretrainkit.mixtures.config import read_mixture_config
from pretrainkit.train.rundir.names import METRICS_FILE
from pretrainkit.train.rundir.run_dir import RunDir

TRAIN_KEYS = ("loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu")


@dataclass
class RunLog:
    """One run's logged series, ordered by step; a missing value is NaN."""

    path: Path
    steps: list[int] = field(default_factory=list)
    train: dict[str, list[float]] = field(default_factory=dict)
    val_steps: list[int] = field(default_factory=list)
    val: dict[str, list[float]] = field(default_factory=dict)  # source -> value per val step (NaN if absent)
    task_steps: list[int] = field(default_factory=list)
    tasks: dict[str, list[float]] = field(default_factory=dict)  # "NAME/acc" -> value per task step (NaN if absent)
    task_items: dict[str, int] = field(default_factory=dict)  # task -> items scored (the last row's)
    task_chance: dict[str, float] = field(default_factory=dict)  # task -> what guessing scores
    events: list[dict] = field(default_factory=list)
    # Where the run starts: a run continued from another (`init_from`) begins after the base run's
    # steps and tokens (RUN_DIR/init_from.json); 0 and 0 for a run from scratch.
    base: str | None = None
    base_step: int = 0
    base_tokens: float | None = 0.0  # None: the base (an export) does not record its tokens
    source_notes: dict[str, str] = field(default_factory=dict)  # source -> "replayed" / "eval only"
    notes: list[str] = field(default_factory=list)  # what the report could not tell, for its summary

    @property
    def name(self) -> str:
        return self.path.name

    def positions(self, axis: str, steps: list[int]) -> list[float]:
        """Where `steps` of this run lie on the `axis` ("step" or "tokens"), the base run's included."""
        if axis == "step":
            return [self.base_step + s for s in steps]
        at = {0: 0.0, **dict(zip(self.steps, self.train.get("tokens", [])))}
        base = self.base_tokens or 0.0
        return [base + at.get(s, math.nan) for s in steps]

    def total_tokens(self) -> float:
        """Tokens trained on: `tokens` is cumulative, so the last logged value."""
        seen = [t for t in self.train.get("tokens", []) if math.isfinite(t)]
        return seen[-1] if seen else 0.0

    def final_val_loss(self) -> float | None:
        """The mean over sources of the last validation pass, or None without one."""
        if not self.val_steps:
            return None
        last = [v[-1] for v in self.val.values() if math.isfinite(v[-1])]
        return sum(last) / len(last) if last else None

    def final_train_loss(self, window: int = 10) -> float | None:
        """The mean of the last `window` training losses (one step's loss is noisy)."""
        losses = [x for x in self.train.get("loss", [])[-window:] if math.isfinite(x)]
        return sum(losses) / len(losses) if losses else None


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    rows = []
    try:
        with open(path, "rb") as f:  # bytes: a line that is not UTF-8 is named like any other bad line
            for line_no, raw in enumerate(f, 1):
                try:
                    line = raw.decode("utf-8")
                except UnicodeDecodeError as e:
                    raise UserError(
                        f"{path}: line {line_no}: not UTF-8 text (byte {e.start + 1} is 0x{raw[e.start]:02x})"
                    ) from None
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except ValueError as e:
                    raise UserError(f"{path}: line {line_no}: not valid JSON ({e})") from None
                if not isinstance(row, dict):
                    raise UserError(f"{path}: line {line_no}: expected a JSON object")
                rows.append((line_no, row))
    except OSError as e:
        raise UserError(f"{path}: cannot read: {e.strerror}") from None
    return rows


def _number(value: object, path: Path, line_no: int, key: str) -> float:
    if value is None:
        return math.nan
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UserError(f"{path}: line {line_no}: {key} must be a number, got {quoted(value)}")
    return float(value)


def _numbers(values: object, path: Path, line_no: int, key: str) -> dict[str, float]:
    """A row's mapping of names to numbers (`val_loss` by source, `tasks`, `task_items`, `task_chance`)."""
    if not isinstance(values, dict):
        raise UserError(f"{path}: line {line_no}: {key} must map names to numbers")
    return {str(k): _number(v, path, line_no, f"{key}.{shortened(str(k))}") for k, v in values.items()}


def _step(row: dict, path: Path, line_no: int) -> int:
    step = row.get("step")
    if isinstance(step, bool) or not isinstance(step, int):
        raise UserError(f"{path}: line {line_no}: step must be an integer, got {quoted(step)}")
    return step


def read_run(run_dir: str | Path) -> RunLog:
    """Parse RUN_DIR/metrics.jsonl (required) and RUN_DIR/events.jsonl (optional)."""
    folder = RunDir(run_dir)
    metrics = folder.metrics
    if not metrics.is_file():
        raise UserError(f"{folder.local}: no {METRICS_FILE} (is it a run directory?)")
    train_rows: dict[int, dict[str, float]] = {}
    val_rows: dict[int, dict[str, float]] = {}
    task_rows: dict[int, dict[str, float]] = {}
    task_items: dict[str, int] = {}
    task_chance: dict[str, float] = {}
    for line_no, row in _read_jsonl(metrics):
        step = _step(row, metrics, line_no)
        if "val_loss" in row:
            val_rows[step] = _numbers(row["val_loss"], metrics, line_no, "val_loss")
            if "tasks" in row:
                task_rows[step] = _numbers(row["tasks"], metrics, line_no, "tasks")
                task_items.update(_numbers(row.get("task_items", {}), metrics, line_no, "task_items"))
                task_chance.update(_numbers(row.get("task_chance", {}), metrics, line_no, "task_chance"))
        elif "loss" in row:
            train_rows[step] = {k: _number(row.get(k), metrics, line_no, k) for k in TRAIN_KEYS}
    run = RunLog(path=folder.local)
    run.steps = sorted(train_rows)
    run.train = {k: [train_rows[s][k] for s in run.steps] for k in TRAIN_KEYS}
    run.val_steps = sorted(val_rows)
    sources = sorted({src for r in val_rows.values() for src in r})
    run.val = {src: [val_rows[s].get(src, math.nan) for s in run.val_steps] for src in sources}
    run.task_steps = sorted(task_rows)
    keys = sorted({key for r in task_rows.values() for key in r})
    run.tasks = {key: [task_rows[s].get(key, math.nan) for s in run.task_steps] for key in keys}
    run.task_items = {name: int(n) for name, n in task_items.items()}
    run.task_chance = task_chance
    _read_lineage(run, folder)
    events = folder.events
    if events.is_file():
        for line_no, row in _read_jsonl(events):
            _step(row, events, line_no)
            run.events.append(row)
        run.events.sort(key=lambda e: e["step"])
    return run


def _read_lineage(run: RunLog, folder: RunDir) -> None:
    """The base run (RUN_DIR/init_from.json) and which sources replay or only validate (the mixture
    named in RUN_DIR/config.yaml), when those files are there."""
    base = folder.base_file
    if base.is_file():
        try:
            info = json.loads(base.read_text(encoding="utf-8"))
            run.base, run.base_step, run.base_tokens = str(info["path"]), int(info["step"]), info.get("tokens")
        except (ValueError, KeyError, TypeError) as e:
            raise UserError(f"{base}: not a valid record of the base run ({e})") from None
    config = folder.config_file
    if not config.is_file():
        return
    try:
        mixture = (yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data", {}).get("mixture")
        if mixture is None:
            return
        sources = read_mixture_config(mixture).sources
    except (UserError, OSError, UnicodeDecodeError, yaml.YAMLError, AttributeError) as e:
        run.notes.append(f"replayed sources not marked: the run's mixture is unreadable ({e})")
        return  # a moved or edited mixture costs the marks, not the report
    for source in sources:
        if source.replay is not None:
            run.source_notes[source.name] = "replayed"
        elif source.eval_only:
            run.source_notes[source.name] = "eval only"
