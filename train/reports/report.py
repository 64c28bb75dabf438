"""Pictures and a one-screen summary of training runs, drawn from their logs.

    runs = [read_run("runs/base"), read_run("runs/bigger")]
    panels = draw_report(runs, "report.png")      # the first run, the others overlaid
    print(summary_text(runs[0]))

The figure has six panels: training loss (smoothed, over the faint raw curve), validation loss
per source (replayed sources drawn with squares and marked, validation-only ones marked), learning
rate, gradient norm, tokens/s and MFU, the last only when MFU was logged (five panels otherwise,
the training loss twice as wide), a third row with the downstream tasks' acc (solid) and acc_norm
(dashed) and each task's chance level (dotted) when a run scored `eval.tasks`, and for a mixture of
experts a row with the routers' aux loss and the expert load's imbalance (each sparse layer's busiest
expert's tokens over the mean of its experts, 1 when balanced: the worst layer and the mean over
layers, at the steps that logged `expert_load`). Loss-spike events are marked (dashed red lines on
the loss and gradient norm, and a red cross at the spike's loss). The x axis is the step or, with
`axis="tokens"`, the tokens trained on; a continued run (`init_from`) starts where its base run
stopped, with a dotted line there. Drawn with matplotlib's Agg canvas and no date or software stamp,
so the same logs give a byte-identical PNG.
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
TASKS_PANEL = "downstream tasks"  # a third row, only when some run logged eval.tasks
TASK_MARKERS = ("o", "s", "^", "D", "v", "P")
MOE_PANELS = ("router aux loss", "expert load")  # only when some run is a mixture of experts
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
    """The panels drawn: MFU only when some run logged it (a CPU run or an unknown GPU has none), the
    downstream tasks only when some run scored `eval.tasks`, the routers' only for a mixture of experts."""
    has_mfu = any(math.isfinite(v) for run in runs for v in run.train.get("mfu", []))
    panels = list(PANELS) if has_mfu else [p for p in PANELS if p != "MFU"]
    if any(run.tasks for run in runs):
        panels.append(TASKS_PANEL)
    return panels + list(MOE_PANELS) if any(_is_moe(run) for run in runs) else panels


def _is_moe(run: RunLog) -> bool:
    return bool(run.load_steps) or any(math.isfinite(v) for v in run.train.get("aux_loss", []))


def load_imbalance(run: RunLog) -> tuple[list[float], list[float]]:
    """Per load step, the worst sparse layer's imbalance and the mean over layers (NaN where none logged)."""
    worst, mean = [], []
    for i in range(len(run.load_steps)):
        values = [v[i] for v in run.load_imbalance.values() if math.isfinite(v[i])]
        worst.append(max(values, default=math.nan))
        mean.append(sum(values) / len(values) if values else math.nan)
    return worst, mean


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
    panels = panels_for(runs)
    tasks, moe = TASKS_PANEL in panels, MOE_PANELS[0] in panels
    fig = Figure(figsize=(15, 8.5 + 4 * (tasks + moe)), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    if "MFU" in panels:
        layout = [list(PANELS[:3]), list(PANELS[3:])]
    else:  # five panels: the training loss gets the room MFU would have had
        layout = [["training loss", "training loss", "validation loss"], ["learning rate", "gradient norm", "tokens/s"]]
    if tasks:
        layout.append([TASKS_PANEL] * 3)
    if moe:
        layout.append(["router aux loss", "expert load", "expert load"])
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
            ("router aux loss", "aux_loss"),
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
        if run.load_steps and "expert load" in axes:
            lx, (worst, mean) = run.positions(axis, run.load_steps), load_imbalance(run)
            name = f"{run.name}: " if several else ""
            for ys, style, what in ((worst, "-", "worst layer"), (mean, "--", "mean over layers")):
                pxs, pys = _finite(lx, ys)
                axes["expert load"].plot(
                    pxs, pys, color=color, linestyle=style, marker="o", markersize=3, label=name + what
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
        if tasks:
            _draw_tasks(axes[TASKS_PANEL], run, axis, color, run.name if several else None, first=i == 0)
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
    if any(run.load_steps for run in runs):  # the scale starts at a balanced load, not at the lines' minimum
        axes["expert load"].axhline(1.0, color="gray", linestyle=":", linewidth=1.2, label="balanced")
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
    if "expert load" in axes:
        axes["expert load"].set_ylabel("busiest expert's tokens / mean of a layer's")
    fig.suptitle(" vs ".join(run.name for run in runs))
    return fig, panels


def _draw_tasks(ax, run: RunLog, axis: str, color: str, run_name: str | None, first: bool) -> None:
    """Each task's acc (solid) and acc_norm (dashed), one marker per task, and what guessing scores (dotted, grey)."""
    x = run.positions(axis, run.task_steps)
    names = list(dict.fromkeys(key.rsplit("/", 1)[0] for key in run.tasks))
    for j, name in enumerate(names):
        for metric, style in (("acc", "-"), ("acc_norm", "--")):
            xs, ys = _finite(x, run.tasks.get(f"{name}/{metric}", []))
            if ys:
                label = f"{name} {metric}" if run_name is None else f"{run_name}: {name} {metric}"
                ax.plot(xs, ys, color=color, linestyle=style, marker=TASK_MARKERS[j % len(TASK_MARKERS)], label=label)
        if first and name in run.task_chance:
            ax.axhline(run.task_chance[name], color="gray", linestyle=":", linewidth=1.0, label=f"{name} chance")
    ax.set_ylabel("accuracy")


def _fmt(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None or not math.isfinite(value) else format(value, spec)


def _median(values: list[float]) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    return statistics.median(finite) if finite else None


def _last_and_best(values: list[float]) -> str:
    finite = [v for v in values if math.isfinite(v)]
    return f"last {_fmt(finite[-1] if finite else None, '.3f')}, best {_fmt(max(finite, default=None), '.3f')}"


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
    for name in dict.fromkeys(key.rsplit("/", 1)[0] for key in run.tasks):
        acc, norm = (_last_and_best(run.tasks.get(f"{name}/{m}", [])) for m in ("acc", "acc_norm"))
        items = f", {run.task_items[name]:,} items" if name in run.task_items else ""
        chance = f", chance {_fmt(run.task_chance[name], '.3f')}" if name in run.task_chance else ""
        lines.append(f"  task {name:<8} acc {acc}; acc_norm {norm}{chance}{items}")
    lrs = [v for v in run.train["lr"] if math.isfinite(v)]
    lines.append(f"  lr           last {_fmt(run.train['lr'][-1], '.3g')}, max {_fmt(max(lrs, default=None), '.3g')}")
    norms = [v for v in run.train["grad_norm"] if math.isfinite(v)]
    lines.append(f"  grad norm    median {_fmt(_median(norms), '.3g')}, max {_fmt(max(norms, default=None), '.3g')}")
    lines.append(
        f"  tokens/s     median {_fmt(_median(run.train['tokens_per_s']), ',.0f')}"
        f", MFU median {_fmt(_median(run.train['mfu']), '.1%')}"
    )
    lines.extend(routing_lines(run))
    lines.append(f"  spike events {len(run.events)}")
    for e in run.events[:5]:
        reason = f" ({e['reason']})" if e.get("reason") else ""
        lines.append(f"    step {e['step']}: loss {_fmt(e.get('loss'))}{reason}, action {e.get('action', '-')}")
        lines.extend(_spike_documents(e.get("documents") or []))
    if len(run.events) > 5:
        lines.append(f"    ... {len(run.events) - 5} more in {run.path / 'events.jsonl'}")
    lines.extend(f"  note: {note}" for note in run.notes)
    return "\n".join(lines) + "\n"


def routing_lines(run: RunLog) -> list[str]:
    """A mixture of experts' summary lines: the aux loss, and the expert load's imbalance at its last logged step."""
    lines = []
    aux = [v for v in run.train.get("aux_loss", []) if math.isfinite(v)]
    if aux:
        lines.append(f"  aux loss     first {_fmt(aux[0])}, last {_fmt(aux[-1])}")
    if run.load_steps:
        last = {layer: v[-1] for layer, v in run.load_imbalance.items() if math.isfinite(v[-1])}
        if last:
            layer = max(last, key=last.get)
            mean = sum(last.values()) / len(last)
            lines.append(
                f"  expert load  busiest expert / mean at step {run.load_steps[-1]}: worst layer {layer} "
                f"{_fmt(last[layer], '.3g')}, mean over layers {_fmt(mean, '.3g')} (1 = balanced)"
            )
    return lines
