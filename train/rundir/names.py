"""The names of a training run's files, each defined here once, and of its checkpoint directories
(`step-0000050`, `.tmp-step-0000050` while written), without importing torch: `ptk train` reads them in
its launcher process too (how far an interrupted run got).

    RUN_DIR/checkpoints/step-0000050/meta.json, RUN_DIR/metrics.jsonl, RUN_DIR/events.jsonl, RUN_DIR/config.yaml,
    RUN_DIR/mixture_changes.jsonl
    checkpoint_name(50) == "step-0000050"; step_of(Path("step-12345678")) == 12345678
    checkpoint_dirs(Path("runs/base/checkpoints"))      # newest first
"""

from __future__ import annotations

from pathlib import Path

CHECKPOINTS = "checkpoints"  # the folder of a run's checkpoints
META_FILE = "meta.json"  # written last into a checkpoint: with it, the checkpoint is whole
METRICS_FILE = "metrics.jsonl"  # a row per step, and one per evaluation
EVENTS_FILE = "events.jsonl"  # a row per loss spike
MIXTURE_CHANGES_FILE = "mixture_changes.jsonl"  # a row per resume that changed the data order (`ptk trace` reads it)
CONFIG_FILE = "config.yaml"  # the run's resolved config
BASE_FILE = "init_from.json"  # a run started from a model (`init_from`): its path, step and tokens
PUSHED_FILE = ".pretrainkit-pushed"  # in a local mirror, once it has been pushed (`mirror.py`): never published

PREFIX = "step-"
TMP_PREFIX = ".tmp-"


def checkpoint_name(step: int) -> str:
    return f"{PREFIX}{step:07d}"


def step_of(path: Path) -> int | None:
    """The step of a `step-N` directory name (any number of digits), None for other names."""
    digits = path.name[len(PREFIX) :]
    return int(digits) if path.name.startswith(PREFIX) and digits.isdigit() else None


def checkpoint_dirs(directory: Path) -> list[Path]:
    """`step-N` directories, the highest step first (by number: step 10000000 is newer than 9999999)."""
    if not directory.is_dir():
        return []
    found = [p for p in directory.glob(f"{PREFIX}*") if p.is_dir() and step_of(p) is not None]
    return sorted(found, key=step_of, reverse=True)
