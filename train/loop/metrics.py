"""The run's JSON-lines logs (`metrics.jsonl`, `events.jsonl`) and the device peaks for MFU.

    log = JsonlLog(run.metrics, keep_through_step=0)   # a RunDir's; 0: a fresh run; k: resumed after step k
    log.write({"step": 1, "loss": 10.2, "lr": 3e-5, "grad_norm": 4.1, "tokens": 65536,
               "tokens_per_s": 9000.0, "mfu": 0.41})
    log.write({"step": 50, "val_loss": {"web": 5.1, "medical": 5.6}})

`tokens` is the cumulative number of target tokens trained on up to and including that step; a
step whose update a spike check dropped has `"skipped": true`. `events.jsonl` holds one row per loss
spike (see `train/loop/training_loop.py`). With `forward`, each row is also handed to the experiment
trackers (`train/tracking/`). Each file is an append-only log, flushed per row. Opening it
rewrites it atomically (temporary name + rename) with only the complete rows at or before
`keep_through_step`, so a run killed mid-line or resumed from an earlier checkpoint never shows
rows from the future or a torn last line.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import IO

import torch

from pretrainkit.files import write_text_atomic

# Dense peak FLOP/s per device for MFU (vendor datasheets, no sparsity), keyed by a substring of the
# CUDA device name. Unknown devices (and CPUs) log no `mfu`.
PEAK_FLOPS = {
    "bf16": {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L40S": 362e12, "A10G": 70e12, "4090": 165e12},
    "fp32": {"H200": 67e12, "H100": 67e12, "A100": 19.5e12, "L40S": 91.6e12, "A10G": 31.2e12, "4090": 82.6e12},
}


def device_peak_flops(device: torch.device, precision: str) -> float | None:
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_FLOPS[precision].items() if k in name), None)


class JsonlLog:
    def __init__(
        self, path: str | Path, keep_through_step: int = 0, forward: Callable[[dict], None] | None = None
    ) -> None:
        self.path = Path(path)
        kept = [row for row in read_rows(self.path) if row["step"] <= keep_through_step]
        write_text_atomic(self.path, "".join(json.dumps(row) + "\n" for row in kept))
        self._file: IO[str] = open(self.path, "a", encoding="utf-8")
        self.forward = forward  # also hands each row to the experiment trackers

    def write(self, row: dict) -> None:
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self.forward is not None:
            self.forward(row)

    def close(self) -> None:
        self._file.close()


def read_rows(path: Path) -> list[dict]:
    """Complete rows of a metrics file (a torn last line from a killed run is left out)."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(row, dict) and isinstance(row.get("step"), int):
            rows.append(row)
    return rows
