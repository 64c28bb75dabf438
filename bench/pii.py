"""Precision and recall of PII redaction (`dataprep.filter.pii`) on the labelled set of real text.

    python -m bench.pii [--wrong]

The set: fixtures/pii_labelled.py (Debian's manuals, network man pages and changelogs; every string
that looks like an address, labelled by hand). Printed for the whole set and for its held-out sources
(read and labelled after the rules were set): detection (is each candidate found as an address, private
ones too) and redaction (is it replaced, the truth being the labelled addresses that are public), as
precision and recall with their counts; then, per label, how many candidates were found as addresses.
`--wrong` lists each miss and each false find with its excerpt. Writes bench/results/pii.json.
"""

from __future__ import annotations

import argparse

from bench.results import write_result
from fixtures.pii_labelled import ADDRESS_LABELS, HELD_OUT, OTHER_LABELS, Counts, excerpts, measure
from pretrainkit.dataprep.filter.pii import find, personal


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--wrong", action="store_true", help="list each miss and false find")
    args = ap.parse_args()
    items = excerpts()
    parts = {"all": items, "held out": [e for e in items if e.source in HELD_OUT]}
    result = {}
    for name, part in parts.items():
        m = measure(part, find, personal)
        print(f"{name}: {len(part)} excerpts, {sum(len(e.labels) for e in part)} candidates")
        for what, counts in (("detection", m.detection), ("redaction", m.redaction)):
            print(f"  {what:9}  precision {counts.precision:.4f}  recall {counts.recall:.4f}  ({_shown(counts)})")
        result[name] = {
            "excerpts": len(part),
            "detection": _row(m.detection),
            "redaction": _row(m.redaction),
            "found_by_label": {k: [m.found_by_label[k], m.by_label[k]] for k in ADDRESS_LABELS + OTHER_LABELS},
        }
        if name == "all":
            print("  found as addresses, per label (found / candidates):")
            for label in ADDRESS_LABELS + OTHER_LABELS:
                print(f"    {label:8} {m.found_by_label[label]:4} / {m.by_label[label]}")
            if args.wrong:
                for ex, text, label in m.wrong:
                    print(f"  {label} {text!r} in [{ex.source}] {ex.text!r}")
    write_result("pii", result)


def _shown(c: Counts) -> str:
    return f"{c.tp} right, {c.fp} false, {c.fn} missed"


def _row(c: Counts) -> dict:
    return {"precision": round(c.precision, 4), "recall": round(c.recall, 4), "tp": c.tp, "fp": c.fp, "fn": c.fn}


if __name__ == "__main__":
    main()
