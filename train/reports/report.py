"""Pictures and a one-screen summary of training runs, drawn from their logs.

    runs = [read_run("runs/base"), read_run("runs/bigger")]
    panels = draw_report(runs, "report.png")      # the first run, the others overlaid
    print(summary_text(runs[0]))

The figure has six panels: training loss, validation loss per source, learning rate, gradient
norm, tokens/s and MFU; loss-spike events are marked (dashed red lines on the loss and gradient
norm, and a red cross at the spike's loss). Drawn with matplotlib's Agg canvas and no date or software stamp, so the same
logs give a byte-identical PNG.
"""

from __future__ import annotations

import io
import math
import statistics
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from pretrainkit.files import write_bytes_atomic
from train.reports.run_log import RunLog

PANELS = ("training loss", "validation loss", "learning rate", "gradient norm", "tokens/s", "MFU")
SPIKE_COLOR = "#d62728"
# Run colours skip red, which marks spikes.
RUN_COLORS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
PNG_METADATA = {"Software": None}  # matplotlib would otherwise stamp its version into the file


def _finite(xs: list[int], ys: list[float]) -> tuple[list[int], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys) if math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def draw_report(runs: list[RunLog], path: str | Path) -> list[str]:
    """Draw the panels for `runs` (the first is the main one) into a PNG at `path`; return the panel titles."""
    fig = Figure(figsize=(15, 8.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    axes = dict(zip(PANELS, fig.subplots(2, 3).flat))
    several = len(runs) > 1
    for i, run in enumerate(runs):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        label = run.name if several else None
        for panel, key in (("training loss", "loss"), ("learning rate", "lr"), ("gradient norm", "grad_norm"),
                           ("tokens/s", "tokens_per_s"), ("MFU", "mfu")):
            xs, ys = _finite(run.steps, run.train[key])
            if ys:
                axes[panel].plot(xs, ys, color=color, linewidth=1.2, label=label)
        styles = ("-", "--", ":", "-.")
        for j, (source, values) in enumerate(run.val.items()):
            xs, ys = _finite(run.val_steps, values)
            if ys:
                axes["validation loss"].plot(xs, ys, color=color, linestyle=styles[j % len(styles)], marker="o",
                                             markersize=3, label=f"{run.name}: {source}" if several else source)
        # A spike's loss may be infinite or NaN: those get only the dashed line.
        spikes = [e for e in run.events if isinstance(e.get("loss"), (int, float)) and math.isfinite(e["loss"])]
        if spikes:
            axes["training loss"].scatter([e["step"] for e in spikes], [e["loss"] for e in spikes], marker="x",
                                          s=60, color=SPIKE_COLOR, zorder=3, label="spike" if i == 0 else None)
        for e in run.events:
            for panel in ("training loss", "gradient norm"):
                axes[panel].axvline(e["step"], color=SPIKE_COLOR, linestyle="--", linewidth=0.8)
    for title, ax in axes.items():
        ax.set_title(title)
        ax.set_xlabel("step")
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        if not ax.has_data():
            ax.text(0.5, 0.5, f"no {title} logged", ha="center", va="center", transform=ax.transAxes, color="gray")
            ax.set_xticks([])
            ax.set_yticks([])
    axes["learning rate"].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.suptitle(" vs ".join(run.name for run in runs))
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata=PNG_METADATA)
    write_bytes_atomic(path, buffer.getvalue())
    return list(PANELS)


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else None


def summary_text(run: RunLog) -> str:
    """A one-screen summary of one run: progress, losses, speed and spike events."""
    losses = [v for v in run.train["loss"] if math.isfinite(v)]
    lines = [f"run {run.path}"]
    if not run.steps:
        return "\n".join(lines + ["  no training steps logged"]) + "\n"
    lines.append(f"  steps        {run.steps[0]}..{run.steps[-1]} ({len(run.steps)} logged), "
                 f"{run.total_tokens():,.0f} tokens")
    if losses:
        lines.append(f"  train loss   first {_fmt(losses[0])}, last {_fmt(losses[-1])}, min {_fmt(min(losses))}, "
                     f"mean of last 10 {_fmt(run.final_train_loss())}")
    for source, values in run.val.items():
        finite = [v for v in values if math.isfinite(v)]
        if finite:
            lines.append(f"  val {source:<9} last {_fmt(finite[-1])}, best {_fmt(min(finite))}")
    lrs = [v for v in run.train["lr"] if math.isfinite(v)]
    lines.append(f"  lr           last {_fmt(run.train['lr'][-1], '.3g')}, max {_fmt(max(lrs, default=None), '.3g')}")
    norms = [v for v in run.train["grad_norm"] if math.isfinite(v)]
    lines.append(f"  grad norm    median {_fmt(_median(norms), '.3g')}, max {_fmt(max(norms, default=None), '.3g')}")
    lines.append(f"  tokens/s     median {_fmt(_median(run.train['tokens_per_s']), ',.0f')}"
                 f", MFU median {_fmt(_median(run.train['mfu']), '.1%')}")
    lines.append(f"  spike events {len(run.events)}")
    for e in run.events[:5]:
        reason = f" ({e['reason']})" if e.get("reason") else ""
        lines.append(f"    step {e['step']}: loss {_fmt(e.get('loss'))}{reason}, action {e.get('action', '-')}")
    if len(run.events) > 5:
        lines.append(f"    ... {len(run.events) - 5} more in {run.path / 'events.jsonl'}")
    return "\n".join(lines) + "\n"
