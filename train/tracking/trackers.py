"""The `logging` config section at work: TensorBoard and W&B trackers fed from rank 0, never in training's way.

    trackers = Trackers.for_run(cfg.logging, to_dict(cfg), run.local)   # None when no tracker is configured
    trackers.open(start_step=trainer.step)              # again after a rollback: later rows are dropped
    trackers.metrics_row({"step": 1, "loss": 9.1, ...}) # every row metrics.jsonl gets
    trackers.event_row({"step": 7, "reason": ..., "action": "skip"})
    trackers.close()

The trackers run on one background thread fed by a bounded queue, so a slow disk or network never
stalls a step. Any exception a tracker raises (a missing package, an unwritable directory, a lost
connection) is reported once on stderr and switches that tracker off for the rest of the run; a
tracker that falls `QUEUE_ROWS` rows behind is switched off the same way. `metrics.jsonl` stays the
complete record either way.
"""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pretrainkit.progress import progress_write

if TYPE_CHECKING:  # the config's types only: tracking imports nothing of train at run time
    from pretrainkit.train.config import LoggingConfig

QUEUE_ROWS = 10_000  # rows a tracker may lag behind before it is switched off
CLOSE_SECONDS = 120.0  # how long the end of a run waits for the trackers to finish writing


class Tracker(Protocol):
    name: str  # as the config names it: "logging.tensorboard"

    def open(self, start_step: int) -> None:
        """Start (or, after a resume or rollback, restart) logging after `start_step`."""

    def train(self, row: dict) -> None: ...

    def validation(self, step: int, losses: dict[str, float]) -> None: ...

    def tasks(self, step: int, scores: dict[str, float]) -> None:
        """`eval.tasks`' accuracies, keyed `NAME/acc` and `NAME/acc_norm`."""

    def event(self, row: dict) -> None: ...

    def close(self) -> None: ...


class Trackers:
    def __init__(self, trackers: list[Tracker]) -> None:
        self._live = list(trackers)
        self._queue: queue.Queue = queue.Queue(maxsize=QUEUE_ROWS)
        self._behind = False
        self._thread = threading.Thread(target=self._work, name="ptk-trackers", daemon=True)
        self._thread.start()

    @classmethod
    def for_run(cls, logging: LoggingConfig, config: dict, run_dir: Path) -> Trackers | None:
        """The trackers `logging` asks for (rank 0 only), or None; they write in the folder trained in."""
        trackers: list[Tracker] = []
        if logging.tensorboard:
            from pretrainkit.train.tracking.tensorboard_log import TensorBoardTracker

            trackers.append(TensorBoardTracker(run_dir))
        if logging.wandb is not None:
            from pretrainkit.train.tracking.wandb_log import WandbTracker

            trackers.append(WandbTracker(run_dir, logging.wandb, config))
        return cls(trackers) if trackers else None

    # -- the training loop's side: never blocks, never raises ----------------------------------------
    def _send(self, method: str, *args: Any) -> None:
        if self._behind:
            return
        try:
            self._queue.put_nowait((method, args))
        except queue.Full:
            self._behind = True
            progress_write(
                f"ptk train: experiment trackers fell {QUEUE_ROWS} rows behind; switched off for this run "
                "(metrics.jsonl has every row)"
            )

    def open(self, start_step: int) -> None:
        self._send("open", start_step)

    def metrics_row(self, row: dict) -> None:
        if "val_loss" in row:
            self._send("validation", row["step"], row["val_loss"])
            if "tasks" in row:
                self._send("tasks", row["step"], row["tasks"])
        else:
            self._send("train", row)

    def event_row(self, row: dict) -> None:
        self._send("event", row)

    def close(self) -> None:
        """Let the trackers finish (at most CLOSE_SECONDS), then close them."""
        self._behind = False
        self._queue.put(("close", ()))
        self._thread.join(CLOSE_SECONDS)
        if self._thread.is_alive():
            names = ", ".join(t.name for t in self._live)
            progress_write(f"ptk train: {names} did not finish writing within {CLOSE_SECONDS:.0f}s; left behind")

    # -- the tracker thread ----------------------------------------------------------------------------
    def _work(self) -> None:
        while True:
            method, args = self._queue.get()
            for tracker in list(self._live):
                try:
                    getattr(tracker, method)(*args)
                except Exception as e:  # noqa: BLE001 - whatever a tracker raises, training goes on
                    self._live.remove(tracker)
                    message = str(e).strip().splitlines()[0] if str(e).strip() else ""
                    progress_write(
                        f"ptk train: {tracker.name} failed ({type(e).__name__}: {message}); switched off "
                        "for this run (metrics.jsonl has every row)"
                    )
            if method == "close":
                return
