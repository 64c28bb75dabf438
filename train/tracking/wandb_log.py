"""`logging.wandb: {project: NAME, mode: offline | online}`: the same rows in Weights & Biases.

The W&B run gets the resolved config and one history row per metrics row, keyed like TensorBoard's
(`train/loss`, `val_loss/<source>`, `<task>/acc`, `spikes/...`) with `step` as the x axis. Its id is kept in
RUN_DIR/wandb-run-id, so a resumed training run continues the same W&B run; `--no-resume` (a run
from step 0) starts a new one. Offline runs are written under RUN_DIR/wandb/ for `wandb sync`.
"""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import TYPE_CHECKING

from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from pretrainkit.progress import progress_write
from pretrainkit.train.tracking.tensorboard_log import TRAIN_KEYS

if TYPE_CHECKING:  # the config's type only: tracking imports nothing of train at run time
    from pretrainkit.train.config import WandbConfig

RUN_ID_FILE = "wandb-run-id"


class WandbTracker:
    name = "logging.wandb"

    def __init__(self, run_dir: Path, cfg: WandbConfig, config: dict) -> None:
        self.run_dir, self.cfg, self.config = run_dir, cfg, config
        self.run = None

    def _run_id(self, start_step: int) -> str:
        saved = self.run_dir / RUN_ID_FILE
        if start_step and saved.is_file():
            return saved.read_text(encoding="utf-8").strip()
        run_id = secrets.token_hex(6)  # W&B ids: letters and digits
        write_text_atomic(saved, run_id + "\n")
        return run_id

    def open(self, start_step: int) -> None:
        if self.run is not None:  # a rollback: the step axis simply goes back
            return
        try:
            import wandb
        except ImportError:
            raise UserError("needs the wandb package: pip install 'pretrainkit[tracking]'") from None
        # Online without credentials would prompt on the terminal from this thread: refuse instead.
        if self.cfg.mode == "online" and not wandb.login(prompt=False, verify=False):
            raise UserError(
                "mode online needs W&B credentials: run `wandb login` or set WANDB_API_KEY "
                "(or use mode: offline and `wandb sync` later)"
            )
        settings = wandb.Settings(
            silent=True,
            console="off",
            x_disable_stats=True,
            disable_git=True,
            save_code=False,
            x_save_requirements=False,
        )
        self.run = wandb.init(
            project=self.cfg.project,
            entity=self.cfg.entity,
            name=self.cfg.name or str(self.config["run_dir"]).rstrip("/").rsplit("/", 1)[-1],  # a URL's too
            id=self._run_id(start_step),
            resume="allow",
            dir=str(self.run_dir),
            mode=self.cfg.mode,
            config=self.config,
            settings=settings,
        )
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        offline_dir = Path(self.run.dir).parent  # RUN_DIR/wandb/offline-run-*/files
        where = (
            f"at {self.run.url}"
            if self.cfg.mode == "online"
            else f"offline in {offline_dir} (upload: wandb sync {offline_dir})"
        )
        progress_write(f"ptk train: W&B run {self.run.id} {where}")

    def train(self, row: dict) -> None:
        self.run.log({"step": row["step"], **{f"train/{k}": row[k] for k in TRAIN_KEYS if k in row}})

    def validation(self, step: int, losses: dict[str, float]) -> None:
        self.run.log({"step": step, **{f"val_loss/{source}": v for source, v in losses.items()}})

    def tasks(self, step: int, scores: dict[str, float]) -> None:
        self.run.log({"step": step, **scores})

    def event(self, row: dict) -> None:
        self.run.log(
            {
                "step": row["step"],
                "spikes/loss": row.get("loss"),
                "spikes/reason": str(row.get("reason")),
                "spikes/action": str(row.get("action")),
            }
        )

    def close(self) -> None:
        if self.run is not None:
            self.run.finish()
