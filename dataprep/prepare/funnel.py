"""The funnel: documents and bytes in and after each stage of a prepare run, and after each filter
step (the table FineWeb publishes), as rows for stats.json and as the table the command prints.

    rows = funnel_rows(stages, records, input_profile)
    print("\n".join(funnel_table(rows)))

A row: `name`, `docs` (after it), `bytes` (text bytes after it; of the input files for an extract's
input row, `bytes_of` says which), `removed_docs` (by it). A filter step's row counts what that step
removed (`removed_bytes`: those documents' text as they entered the filter); the bytes the steps took
from the documents they kept (C4's lines, PII) are in the stage's row, measured on its output. The
tokenize row counts the documents tokenized and their `tokens`.
"""

from __future__ import annotations

from pretrainkit.dataprep.prepare.stages import FIRST, LAST, Stage
from pretrainkit.quantities import byte_size


def funnel_rows(stages: list[Stage], records: list[dict], input_profile: dict | None) -> list[dict]:
    if stages[0].name == FIRST:
        extract = records[0]["stats"]
        rows = [{"name": "input", "docs": extract["records"], "bytes": extract["input_bytes"], "bytes_of": "files"}]
    else:
        # the records the first stage rejects (not UTF-8, no text field) are of the input too
        docs = input_profile["docs"] + input_profile["rejected"]
        rows = [{"name": "input", "docs": docs, "bytes": input_profile["text_bytes"], "bytes_of": "text"}]
    entered = rows[0]["docs"]
    for stage, record in zip(stages, records):
        if stage.name == "filter":
            rows += _filter_step_rows(record["stats"])
        if stage.name == LAST:
            counts, totals = record["stats"]["provenance"]["records"], record["stats"]["totals"]
            row = {"name": stage.name, "docs": counts["tokenized"], "bytes": None, "tokens": totals["tokens"]}
        else:
            p = record["profile"]
            row = {"name": stage.name, "docs": p["docs"], "bytes": p["text_bytes"], "bytes_of": "text"}
        # an extract's input is records, not documents: of those it skipped the ones that are no pages
        row["removed_docs"] = None if stage.name == FIRST else entered - row["docs"]
        rows.append(row)
        entered = row["docs"]
    return rows


def _filter_step_rows(stats: dict) -> list[dict]:
    rows = []
    docs = stats["input_docs"] - stats["rejected"]
    by_step = stats["removed_by_step"]
    for step in (name for spec in stats["filters"] for name in spec):
        removed = by_step.get(step, {"docs": 0, "bytes": 0})
        docs -= removed["docs"]
        rows.append(
            {
                "name": f"filter: {step}",
                "step": step,
                "docs": docs,
                "removed_docs": removed["docs"],
                "removed_bytes": removed["bytes"],
            }
        )
    return rows


def funnel_table(rows: list[dict]) -> list[str]:
    """The rows as aligned lines: name, documents after, their share of the input's, bytes, removed."""
    # shares are of the documents the text stages began with: an extract's pages, else the input's
    first = next(r["docs"] for r in rows if r.get("bytes_of") == "text") or 1
    lines = [("", "docs", "of input", "bytes", "removed")]
    for r in rows:
        name = f"  {r['step']}" if "step" in r else r["name"]
        if r.get("tokens") is not None:
            size = f"{r['tokens']:,} tokens"
        elif r.get("bytes") is not None:
            size = byte_size(r["bytes"]) + (" (files)" if r.get("bytes_of") == "files" else "")
        else:
            size = ""
        removed = "" if r.get("removed_docs") is None else f"{r['removed_docs']:,}"
        if r.get("removed_bytes"):
            removed += f" ({byte_size(r['removed_bytes'])})"
        share = "" if r.get("bytes_of") == "files" else f"{100 * r['docs'] / first:.1f}%"
        lines.append((name, f"{r['docs']:,}", share, size, removed))
    widths = [max(len(line[k]) for line in lines) for k in range(5)]
    return [
        "  "
        + "  ".join(cell.ljust(widths[k]) if k == 0 else cell.rjust(widths[k]) for k, cell in enumerate(line)).rstrip()
        for line in lines
    ]
