"""Print a run's loss curve and per-source validation losses, or check two runs' losses agree.

python demo/show_metrics.py RUN_DIR [--compare OTHER_RUN_DIR]
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("run", type=Path)
    ap.add_argument("--compare", type=Path)
    args = ap.parse_args()
    if args.compare:
        a, b = ([r["loss"] for r in rows(d) if "loss" in r] for d in (args.run, args.compare))
        print(f"uninterrupted vs killed and resumed: {len(a)} and {len(b)} steps, identical losses: {a == b}")
        return
    for r in rows(args.run):
        if "loss" in r and (r["step"] == 1 or r["step"] % 25 == 0):
            print(f"step {r['step']:4d}  loss {r['loss']:.3f}  lr {r['lr']:.2e}  {r['tokens_per_s']:,.0f} tokens/s")
        elif "val_loss" in r:
            print(
                f"step {r['step']:4d}  validation loss  " + "  ".join(f"{k} {v:.3f}" for k, v in r["val_loss"].items())
            )


if __name__ == "__main__":
    main()
