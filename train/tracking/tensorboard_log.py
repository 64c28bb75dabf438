"""`logging.tensorboard: true`: TensorBoard event files under RUN_DIR/tb/.

Scalars `train/loss`, `train/lr`, `train/grad_norm`, `train/tokens`, `train/tokens_per_s` (and
`train/mfu` when known), `val_loss/<source>` per source, `<task>/acc` and `<task>/acc_norm` per
`eval.tasks` entry, and each loss spike as text under `spikes`,
all at the training step. A run that resumes (or rolls back) at step k opens a new event file with
`purge_step=k + 1`, so TensorBoard drops what the abandoned run had logged after k.
"""

from __future__ import annotations

from pathlib import Path

from pretrainkit.errors import UserError

TB_DIR = "tb"
TRAIN_KEYS = ("loss", "lr", "grad_norm", "tokens", "tokens_per_s", "mfu")


class TensorBoardTracker:
    name = "logging.tensorboard"

    def __init__(self, run_dir: Path) -> None:
        self.log_dir = run_dir / TB_DIR
        self.writer = None

    def open(self, start_step: int) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise UserError("needs the tensorboard package: pip install 'pretrainkit[tracking]'") from None
        if self.writer is not None:
            self.writer.close()
        self.writer = SummaryWriter(str(self.log_dir), purge_step=start_step + 1 if start_step else None, flush_secs=10)

    def train(self, row: dict) -> None:
        for key in TRAIN_KEYS:
            if key in row:
                self.writer.add_scalar(f"train/{key}", row[key], row["step"])

    def validation(self, step: int, losses: dict[str, float]) -> None:
        for source, loss in losses.items():
            self.writer.add_scalar(f"val_loss/{source}", loss, step)

    def tasks(self, step: int, scores: dict[str, float]) -> None:
        for key, value in scores.items():
            self.writer.add_scalar(key, value, step)

    def event(self, row: dict) -> None:
        text = f"step {row['step']}: {row.get('reason', 'spike')}; loss {row.get('loss')}, action {row.get('action')}"
        self.writer.add_text("spikes", text, row["step"])

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
