"""Pictures and a one-screen summary of training runs, drawn from their logs.

    runs = [read_run("runs/base"), read_run("runs/bigger")]
    panels = draw_report(runs, "report.png")      # the first run, the others overlaid
    print(summary_text(runs[0]))

The figure has six panels: training loss (smoothed, over the faint raw curve), validation loss
per source (replayed sources drawn with squares and marked, validation-only ones marked), learning
rate, gradient norm, tokens/s and MFU, the last only when MFU was logged (five panels otherwise,
the training loss twice as wide); loss-spike events are marked (dashed red lines on the loss and
gradient norm, and a red cross at the spike's loss). The x axis is the step or, with
`axis="tokens"`, the tokens trained on; a continued run (`init_from`) starts where its base run
stopped, with a dotted line there. Drawn with matplotlib's Agg canvas and no date or software stamp, so the same
logs give a byte-identical PNG.
"""

from __future__ import annotations

import io
import math
import statistics
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import EngFormatter

from pretrainkit.files import write_bytes_atomic
from pretrainkit.train.reports.run_log import RunLog
from pretrainkit.train.rundir.names import CHECKPOINTS

PANELS = ("training loss", "validation loss", "learning rate", "gradient norm", "tokens/s", "MFU")
SPIKE_COLOR = "#d62728"
DOCUMENTS_SHOWN = 3  # a spike's top documents the summary lists (events.jsonl has up to TOP_DOCUMENTS)

# Run colours skip red, which marks spikes.
RUN_COLORS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")
PNG_METADATA = {"Software": None}  # matplotlib would otherwise stamp its version into the file


def _finite(xs: list[float], ys: list[float]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys) if math.isfinite(x) and math.isfinite(y)]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def smoothing_span(points: int) -> int:
    """Steps the smoothed training loss averages over: about a twentieth of the run, at most 100."""
    return max(1, min(100, points // 20))


def smoothed(values: list[float], span: int) -> list[float]:
    """Exponential moving average over about `span` values, debiased so the first ones are not pulled to 0."""
    alpha = 2.0 / (span + 1)
    out, mean, weight = [], 0.0, 0.0
    for v in values:
        mean = (1 - alpha) * mean + alpha * v
        weight = (1 - alpha) * weight + alpha
        out.append(mean / weight)
    return out


def panels_for(runs: list[RunLog]) -> list[str]:
    """The panels drawn: MFU only when some run logged it (a CPU run or an unknown GPU has none)."""
    has_mfu = any(math.isfinite(v) for run in runs for v in run.train.get("mfu", []))
    return list(PANELS) if has_mfu else [p for p in PANELS if p != "MFU"]


def draw_report(runs: list[RunLog], path: str | Path, axis: str = "step") -> list[str]:
    """Draw the panels for `runs` (the first is the main one) into a PNG at `path`; return the panel titles.

    `axis` is "step" or "tokens". A continued run is drawn from its base run's position on.
    """
    fig, panels = build_figure(runs, axis)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata=PNG_METADATA)
    write_bytes_atomic(path, buffer.getvalue())
    return panels


def build_figure(runs: list[RunLog], axis: str = "step") -> tuple[Figure, list[str]]:
    """The report's figure (each panel's axes titled with its name) and the panel titles."""
    fig = Figure(figsize=(15, 8.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    panels = panels_for(runs)
    if "MFU" in panels:
        layout = [PANELS[:3], PANELS[3:]]
    else:  # five panels: the training loss gets the room MFU would have had
        layout = [["training loss", "training loss", "validation loss"], ["learning rate", "gradient norm", "tokens/s"]]
    axes = fig.subplot_mosaic(layout)
    several = len(runs) > 1
    for i, run in enumerate(runs):
        color = RUN_COLORS[i % len(RUN_COLORS)]
        label = run.name if several else None
        x = run.positions(axis, run.steps)
        xs, raw = _finite(x, run.train["loss"])
        if raw:
            span = smoothing_span(len(raw))
            axes["training loss"].plot(xs, raw, color=color, linewidth=0.8, alpha=0.3)
            name = f"{run.name}, " if several else ""
            axes["training loss"].plot(
                xs,
                smoothed(raw, span),
                color=color,
                linewidth=1.8,
                label=f"{name}smoothed over ~{span} steps (raw faint)",
            )
        for panel, key in (
            ("learning rate", "lr"),
            ("gradient norm", "grad_norm"),
            ("tokens/s", "tokens_per_s"),
            ("MFU", "mfu"),
        ):
            pxs, ys = _finite(x, run.train[key])
            if ys and panel in axes:
                axes[panel].plot(pxs, ys, color=color, linewidth=1.2, label=label)
        if run.base is not None and run.steps:
            start = run.positions(axis, [0])[0]
            for panel in ("training loss", "validation loss"):
                axes[panel].axvline(start, color=color, linestyle=":", linewidth=1.2)
            base = Path(run.base)
            base_name = base.parent.parent.name if base.parent.name == CHECKPOINTS else base.name
            axes["training loss"].annotate(
                f"{run.name} continues {base_name} (step {run.base_step})",
                (start, 1.0),
                xycoords=("data", "axes fraction"),
                xytext=(3, -12),
                textcoords="offset points",
                fontsize=8,
                color=color,
            )
        styles = ("-", "--", ":", "-.")
        vx = run.positions(axis, run.val_steps)
        for j, (source, values) in enumerate(run.val.items()):
            note = run.source_notes.get(source)
            name = f"{source} ({note})" if note else source
            sxs, ys = _finite(vx, values)
            if ys:
                axes["validation loss"].plot(
                    sxs,
                    ys,
                    color=color,
                    linestyle=styles[j % len(styles)],
                    marker="s" if note == "replayed" else "o",
                    markersize=4 if note else 3,
                    label=f"{run.name}: {name}" if several else name,
                )
        # A spike's loss may be infinite or NaN: those get only the dashed line.
        spikes = [e for e in run.events if isinstance(e.get("loss"), (int, float)) and math.isfinite(e["loss"])]
        if spikes:
            axes["training loss"].scatter(
                run.positions(axis, [e["step"] for e in spikes]),
                [e["loss"] for e in spikes],
                marker="x",
                s=60,
                color=SPIKE_COLOR,
                zorder=3,
                label="spike" if i == 0 else None,
            )
        for at in run.positions(axis, [e["step"] for e in run.events]):
            for panel in ("training loss", "gradient norm"):
                if math.isfinite(at):
                    axes[panel].axvline(at, color=SPIKE_COLOR, linestyle="--", linewidth=0.8)
    for title, ax in axes.items():
        ax.set_title(title)
        ax.set_xlabel(axis)
        if axis == "tokens":
            ax.xaxis.set_major_formatter(EngFormatter(sep=""))  # 150k, 2.5M
        ax.grid(True, alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
        if not ax.has_data():
            ax.text(0.5, 0.5, f"no {title} logged", ha="center", va="center", transform=ax.transAxes, color="gray")
            ax.set_xticks([])
            ax.set_yticks([])
    axes["learning rate"].ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.suptitle(" vs ".join(run.name for run in runs))
    return fig, panels


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else None


def _spike_documents(documents: list[dict]) -> list[str]:
    """A spike's top documents by loss contribution (its event's `documents`, train/loop/spike_documents.py),
    the first DOCUMENTS_SHOWN of them, one line each: where to find it, and its loss."""
    lines = []
    for d in documents[:DOCUMENTS_SHOWN]:
        where = f"{d['source']} {d['shard']} #{d['index']}"
        share = "" if d.get("share") is None else f", {_fmt(d['share'], '.1%')} of the step's"
        mean = _fmt(d["loss"] / d["tokens"], ".4g") if d["tokens"] else "-"
        lines.append(
            f"      {d['id']} ({where}): loss {_fmt(d['loss'])} over {d['tokens']:,} tokens (mean {mean}{share})"
        )
    if len(documents) > DOCUMENTS_SHOWN:
        more = len(documents) - DOCUMENTS_SHOWN
        lines.append(f"      ... {more} more {'document' if more == 1 else 'documents'} in the event")
    return lines


def summary_text(run: RunLog) -> str:
    """A one-screen summary of one run: progress, losses, speed and spike events."""
    losses = [v for v in run.train["loss"] if math.isfinite(v)]
    lines = [f"run {run.path}"]
    if not run.steps:
        return "\n".join(lines + ["  no training steps logged"]) + "\n"
    lines.append(
        f"  steps        {run.steps[0]}..{run.steps[-1]} ({len(run.steps)} logged), {run.total_tokens():,.0f} tokens"
    )
    if run.base is not None:
        tokens = "tokens unknown" if run.base_tokens is None else f"{run.base_tokens:,.0f} tokens"
        lines.append(f"  continues    {run.base} (step {run.base_step}, {tokens}); drawn from there")
    if losses:
        lines.append(
            f"  train loss   first {_fmt(losses[0])}, last {_fmt(losses[-1])}, min {_fmt(min(losses))}, "
            f"mean of last 10 {_fmt(run.final_train_loss())}"
        )
    for source, values in run.val.items():
        finite = [v for v in values if math.isfinite(v)]
        note = f" ({run.source_notes[source]})" if source in run.source_notes else ""
        if finite:
            lines.append(f"  val {source:<9} last {_fmt(finite[-1])}, best {_fmt(min(finite))}{note}")
    lrs = [v for v in run.train["lr"] if math.isfinite(v)]
    lines.append(f"  lr           last {_fmt(run.train['lr'][-1], '.3g')}, max {_fmt(max(lrs, default=None), '.3g')}")
    norms = [v for v in run.train["grad_norm"] if math.isfinite(v)]
    lines.append(f"  grad norm    median {_fmt(_median(norms), '.3g')}, max {_fmt(max(norms, default=None), '.3g')}")
    lines.append(
        f"  tokens/s     median {_fmt(_median(run.train['tokens_per_s']), ',.0f')}"
        f", MFU median {_fmt(_median(run.train['mfu']), '.1%')}"
    )
    lines.append(f"  spike events {len(run.events)}")
    for e in run.events[:5]:
        reason = f" ({e['reason']})" if e.get("reason") else ""
        lines.append(f"    step {e['step']}: loss {_fmt(e.get('loss'))}{reason}, action {e.get('action', '-')}")
        lines.extend(_spike_documents(e.get("documents") or []))
    if len(run.events) > 5:
        lines.append(f"    ... {len(run.events) - 5} more in {run.path / 'events.jsonl'}")
    lines.extend(f"  note: {note}" for note in run.notes)
    return "\n".join(lines) + "\n"
