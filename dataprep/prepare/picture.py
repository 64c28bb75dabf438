"""The funnel's picture (OUT/funnel.png): documents after each stage and filter step, the language
mix, and document lengths, before (what entered the first text stage) and after (what the last kept).

    draw_funnel(json.load(open("out/stats.json")), "out/funnel.png")

Drawn with matplotlib's Agg canvas and no software stamp, so the same run gives a byte-identical PNG.
"""

from __future__ import annotations

import io
from pathlib import Path

from pretrainkit.dataprep.prepare.profile import LENGTH_BINS
from pretrainkit.files import write_bytes_atomic
from pretrainkit.quantities import byte_size

PNG_METADATA = {"Software": None}
BEFORE, AFTER = "#1f77b4", "#ff7f0e"
LANGUAGES_SHOWN = 12  # the rest as one "other" bar


def draw_funnel(result: dict, path: str | Path) -> None:
    # Imported here: every ptk command's parser imports this module, and matplotlib takes 0.3 s to load.
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(17, 6.5), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    funnel, languages, lengths = fig.subplots(1, 3, width_ratios=(1.3, 1, 1))
    _funnel(funnel, result["funnel"])
    before, after = result["profiles"].get("input"), result["profiles"].get("output")
    _languages(languages, before, after)
    _lengths(lengths, before, after)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", metadata=PNG_METADATA)
    write_bytes_atomic(path, buffer.getvalue())


def _funnel(ax, rows: list[dict]) -> None:
    rows = [r for r in rows if r.get("bytes_of") != "files"]  # an extract's records are no documents
    names = [r["name"] for r in rows]  # a filter step's is "filter: <step>"
    docs = [r["docs"] for r in rows]
    colors = ["#9ecae1" if "step" in r else BEFORE for r in rows]
    y = list(range(len(rows)))
    ax.barh(y, docs, color=colors)
    ax.set_yticks(y, names)
    ax.invert_yaxis()
    top = max(docs) or 1
    for k, r in enumerate(rows):
        size = f", {byte_size(r['bytes'])}" if r.get("bytes") is not None else ""
        size = f", {r['tokens']:,} tokens" if r.get("tokens") is not None else size
        ax.text(docs[k] + top * 0.01, k, f"{docs[k]:,} ({100 * docs[k] / top:.1f}%){size}", va="center", fontsize=8)
    ax.set_xlim(0, top * 1.45)
    ax.set_xlabel("documents after the stage (filter steps: after the step)")
    ax.set_title("funnel")


def _languages(ax, before: dict | None, after: dict | None) -> None:
    ax.set_title("language mix (share of documents)")
    mixes = [(label, p["languages"]) for label, p in (("before", before), ("after", after)) if p and p["languages"]]
    if not mixes:
        ax.text(0.5, 0.5, "no language profile", ha="center", va="center", transform=ax.transAxes)
        return
    first = mixes[0][1]
    shown = sorted(first, key=lambda lang: (-first[lang], lang))[:LANGUAGES_SHOWN]
    labels = shown + (["other"] if any(set(mix) - set(shown) for _, mix in mixes) else [])
    height = 0.8 / len(mixes)
    for k, (label, mix) in enumerate(mixes):
        total = sum(mix.values()) or 1
        counts = [mix.get(lang, 0) for lang in shown] + [sum(n for lang, n in mix.items() if lang not in shown)]
        ax.barh(
            [i + k * height for i in range(len(labels))],
            [100 * n / total for n in counts[: len(labels)]],
            height=height,
            color=(BEFORE, AFTER)[k],
            label=f"{label} ({total:,} docs)",
        )
    ax.set_yticks([i + (len(mixes) - 1) * height / 2 for i in range(len(labels))], labels)
    ax.invert_yaxis()
    ax.set_xlabel("% of documents")
    ax.legend(loc="best")


def _lengths(ax, before: dict | None, after: dict | None) -> None:
    ax.set_title("document length")
    edges = list(range(LENGTH_BINS + 1))
    for label, p, color in (("before", before, BEFORE), ("after", after, AFTER)):
        if p and p["docs"]:
            shares = [100 * n / p["docs"] for n in p["length_chars"]]  # a share: before and after differ in size
            ax.stairs(shares, edges, color=color, label=f"{label} ({p['docs']:,} docs)", linewidth=1.5)
    used = [k for p in (before, after) if p for k, n in enumerate(p["length_chars"]) if n]
    low, high = (max(min(used) - 1, 0), min(max(used) + 2, LENGTH_BINS)) if used else (0, LENGTH_BINS)
    ax.set_xlim(low, high)
    ticks = list(range(low, high + 1, -(-(high - low) // 7)))
    ax.set_xticks(ticks, [_chars(1 << k) for k in ticks])
    ax.set_xlabel("characters (bins of [2^k, 2^(k+1)))")
    ax.set_ylabel("% of documents")
    ax.legend(loc="best")


def _chars(n: int) -> str:
    for unit, size in (("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n // size}{unit}"
    return str(n)
