"""The training loop: batches in order, metrics, evaluation, checkpoints, resume and spike recovery.

    loop = TrainingLoop(cfg, trainer, loader, mix, env)
    loop.resume()            # newest valid checkpoint in RUN_DIR/checkpoints, if any
    summary = loop.run()     # to max_steps

Data order: every step draws the next global batch from the mixture loader; global batches listed
in the skip set (those a rollback chose to skip) are drawn and dropped. Without rollbacks, step k
trains on global batch k-1. Each step's `metrics.jsonl` row has `batch_sha256`, its global batch's
(`MixtureSampler.batch_sha256`), which `ptk trace RUN --step N` prints too. An evaluation step's
validation row also has `eval.tasks`' accuracies (`tasks`: `NAME/acc`, `NAME/acc_norm`; see
train/evaluation/tasks.py). A resume that changed the order (`data.allow_mixture_change`) adds a row to
`RUN_DIR/mixture_changes.jsonl`: the checkpoint's step, the new order's first batch, the checkpoint's
config and loader state, all `ptk trace` needs for the steps before it. Everything that decides what
happens next (model, optimizer, step, loader position, next batch, skip set, spike window, RNG) is in
every checkpoint, so a resumed run continues exactly like an uninterrupted one: the loop is a
`Stateful` handed to `Checkpoints` with the trainer's states, its part of `meta.json` a `LoopState`
(`train/checkpoint/loop_state.py`).

Loss spikes (`spikes` config; `train/loop/spikes.py` detects them and decides, this loop acts on the
decision): each is one row of `RUN_DIR/events.jsonl` with `step`, `batch`, `loss`, `grad_norm`, the
window statistics, `reason`, `action` and `documents`, the step's top documents by their loss contribution
(train/loop/spike_documents.py; one extra forward of the step's rows, before its update, only when a spike
fires):
- `none`: logged; the update is applied (unless loss or gradients are not finite: then dropped).
- `skip`: the update is dropped; the step counts and its batch is consumed.
- `rollback`: the run reloads the newest valid checkpoint before this step and adds the last
  `skip_batches` global batches up to the spike's to the skip set, then trains on; the same data
  order follows deterministically. With no checkpoint yet it skips instead. More than
  `max_rollbacks` rollbacks stop the run with an error.
An event's `action` is what was done (a `note` says why when that is not `spikes.action`). After
`max_consecutive_skips` dropped updates in a row the run has diverged and stops with an error; a
checkpoint falling due on a dropped update waits for the next applied one, so none holds that model.

SIGTERM (`pretrainkit/sigterm.py`): every process learns with the step's loss sum whether any of them
had one (`Gradients.stop`), so all stop after that same step, which is checkpointed like the last one
(but, as above, not on a dropped update: the streak of dropped updates is not in a checkpoint); `run`
returns with `stopped` set once the checkpoint is complete.
"""

from __future__ import annotations

import math
import sys
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from pretrainkit.errors import UserError
from pretrainkit.mixtures import Mixture, TrainLoader
from pretrainkit.progress import progress_bar, progress_write
from pretrainkit.sigterm import deferred_sigterm
from pretrainkit.train.checkpoint.checkpoints import Checkpoint, Checkpoints, check_model
from pretrainkit.train.checkpoint.loop_state import LOOP_KEY, LoopState
from pretrainkit.train.config import TrainConfig, to_dict
from pretrainkit.train.evaluation.tasks import TaskSuite
from pretrainkit.train.loop.metrics import JsonlLog, device_peak_flops
from pretrainkit.train.loop.optim import Schedule, lr_at
from pretrainkit.train.loop.spike_documents import top_documents
from pretrainkit.train.loop.spikes import Action, Decision, SpikeDetector
from pretrainkit.train.loop.trainer import Batch, StepResult, Trainer
from pretrainkit.train.parallel.agree import AgreedError, together
from pretrainkit.train.parallel.distributed import DistEnv
from pretrainkit.train.reports.trace import batch_segments
from pretrainkit.train.rundir.names import CHECKPOINTS, CONFIG_FILE, EVENTS_FILE, META_FILE, METRICS_FILE
from pretrainkit.train.rundir.run_dir import RunDir
from pretrainkit.train.tracking.trackers import Trackers

SUMMARY_STEPS = 10

# (global batch index, this process's micro-batches) -> micro-batches; for fault injection in tests.
BatchTransform = Callable[[int, list[Batch]], list[Batch]]


@dataclass
class RunSummary:
    first_step: int
    last_step: int
    first_loss: float
    last_losses: list[float]  # the last few steps' (single batches are noisy; their mean is shown)
    tokens_per_s: float
    seconds: float
    val_loss: dict[str, float]
    val_batches: dict[str, int]  # the held-out subset each source's val loss is taken over (eval.batches at most)
    val_tokens: dict[str, int]
    spikes: int
    rollbacks: int
    stopped: bool = False  # by SIGTERM, after a checkpoint of its last step (unless that step's update was dropped)
    tasks: dict[str, float] = field(default_factory=dict)  # eval.tasks' last NAME/acc and NAME/acc_norm


class TrainingLoop:
    def __init__(
        self,
        cfg: TrainConfig,
        run: RunDir,
        trainer: Trainer,
        loader: TrainLoader,
        mix: Mixture,
        env: DistEnv,
        val_rows: dict[str, tuple[torch.Tensor, torch.Tensor]],
        transform: BatchTransform | None = None,
        tasks: TaskSuite | None = None,
    ) -> None:
        """`run`: the run's folder (`cfg.run_dir`), which it is trained in and writes its logs and checkpoints
        into (a URL's local mirror, each checkpoint pushed to the bucket). `tasks`: `eval.tasks`, scored with
        the validation loss."""
        self.cfg, self.trainer, self.loader, self.mix, self.env = cfg, trainer, loader, mix, env
        self.val_rows, self.transform, self.tasks = val_rows, transform, tasks
        # Training scores only the first eval.batches held-out batches, `ptk eval` all of them: every report of
        # val loss says how much it covers, so the two figures are not taken for the same measurement.
        self.val_batches = {name: -(-len(x) // cfg.batch.global_size) for name, (x, _) in val_rows.items()}
        self.val_tokens = {name: int(y.numel()) for name, (_, y) in val_rows.items()}
        self.accum = cfg.batch.global_size // (cfg.batch.micro_size * trainer.mesh.dp_size)
        self.run_dir = run
        self.detector = SpikeDetector(cfg.spikes)
        self.config = to_dict(cfg)  # run_dir as given: a URL, not its mirror
        mirror = run.checkpoint_mirror(owner=env.local_rank == 0)
        self.ckpts = Checkpoints(run.checkpoints, cfg.checkpoint.keep, trainer.states, [trainer.record, self], mirror)
        self.next_batch = 0
        self.skip: set[int] = set()
        self.rollbacks = 0
        self.spikes = 0
        self.dropped: list[tuple[int, float, float]] = []  # (step, loss, grad norm) of the dropped updates in a row
        self.batches = iter(loader)
        self.metrics: JsonlLog | None = None
        self.events: JsonlLog | None = None
        self.order_change: dict | None = None  # a restore's change of the data order, logged with the logs' opening
        self.trackers = Trackers.for_run(cfg.logging, self.config, run.local) if env.is_main else None

    # -- checkpoints -------------------------------------------------------------------------------
    def state(self) -> LoopState:
        return LoopState(
            self.loader.state_dict(),
            self.mix.fingerprint,
            self.mix.tokenizer.sha256,
            self.next_batch,
            tuple(sorted(self.skip)),
            self.detector.state_dict(),
            self.rollbacks,
        )

    def state_dict(self) -> dict:
        """The loop's part of a checkpoint's `meta.json` (the loop is a `Stateful` the checkpointer is handed)."""
        return {"config": self.config, LOOP_KEY: self.state().to_json()}

    def load_state_dict(self, meta: dict) -> None:
        saved = LoopState.from_meta(meta, self.ckpts.dir / META_FILE)  # checked by _restore before anything was loaded
        self.loader.load_state_dict(saved.loader)
        self.batches = iter(self.loader)
        self.next_batch = saved.next_batch
        self.skip |= set(saved.skip)
        self.detector.load_state_dict(saved.spikes)
        self.rollbacks = max(self.rollbacks, saved.rollbacks)

    def _restore(self, ckpt: Checkpoint) -> None:
        try:  # every process reads the same meta.json, so a problem with it is raised by all of them together
            saved = LoopState.from_meta(ckpt.meta, ckpt.path / META_FILE)
        except UserError as e:
            raise AgreedError(str(e)) from None
        if saved is None:
            raise AgreedError(
                f"{ckpt.path / META_FILE}: no {LOOP_KEY} (the training loop's state): not a training checkpoint"
            )
        changes = [
            f"{what} {a} -> {b}"
            for what, a, b in (
                ("mixture fingerprint", str(saved.mixture_fingerprint)[:12], self.mix.fingerprint[:12]),
                ("data.seq_len", saved.loader["seq_len"], self.cfg.data.seq_len),
                ("batch.global_size", saved.loader["global_batch_size"], self.cfg.batch.global_size),
            )
            if a != b
        ]
        if changes and not self.mix.allow_mixture_change:  # every process reads the same meta.json
            raise AgreedError(
                f"{ckpt.path}: saved for another data order ({', '.join(changes)}); set data.allow_mixture_change=true "
                f"to continue with the change, or use a new run_dir or --no-resume"
            )
        together(lambda: check_model(ckpt, self.trainer.model_cfg), ckpt.path)
        self.ckpts.restore(ckpt)  # the trainer's states and record, this loop's (load_state_dict), the RNG
        now = self.loader.sampler
        if (now.fingerprint, now.seq_len, now.global_batch_size) != (
            saved.loader["fingerprint"],
            saved.loader["seq_len"],
            saved.loader["global_batch_size"],
        ):
            # The loader rebased the order (allow_mixture_change): what `ptk trace` needs to give the steps
            # before it their batches, with the config they trained with (config.yaml will hold the new one).
            self.order_change = {
                "step": ckpt.step,
                "batch": saved.loader["batch"],
                "config": ckpt.meta["config"],
                "loader": saved.loader,
            }

    def _open_logs(self, keep_events: bool = False) -> None:
        if not self.env.is_main:
            return
        if self.metrics is not None:
            self.metrics.close()
        trackers = self.trackers
        if trackers is not None:
            trackers.open(self.trainer.step)
        self.metrics = JsonlLog(self.run_dir.metrics, self.trainer.step, trackers and trackers.metrics_row)
        if not keep_events:
            self.events = JsonlLog(self.run_dir.events, self.trainer.step, trackers and trackers.event_row)
        self._log_order_change()

    def _log_order_change(self) -> None:
        """Keep `mixture_changes.jsonl`'s rows through the step trained from (a later row's order was not
        kept), and add the restore's change; a run whose order never changed has no such file."""
        path = self.run_dir.mixture_changes
        if self.order_change is None and not path.exists():
            return
        log = JsonlLog(path, self.trainer.step)
        if self.order_change is not None:
            log.write(self.order_change)
            self.order_change = None
        log.close()

    def start_over(self) -> None:
        """`--no-resume`: drop earlier checkpoints so that none of them is taken for this run's later."""
        if self.ckpts.owner:
            self.ckpts.remove_all()
        if self.env.world_size > 1:
            dist.barrier()

    def resume(self) -> Checkpoint | None:
        if self.ckpts.owner:
            self.ckpts.remove_temporaries()
        found = self.ckpts.choose(refuse_all_corrupt=True)
        if found is not None:
            self._restore(found)
            if self.env.is_main:
                print(f"ptk train: resuming from {found.path} (step {found.step})", file=sys.stderr)
                change = schedule_change(found, self.config, self.trainer.schedule)
                if change:
                    print(change, file=sys.stderr)
        return found

    # -- one step ----------------------------------------------------------------------------------
    def _draw(self) -> tuple[int, list[Batch]]:
        while True:
            b = self.next_batch
            micro = [next(self.batches) for _ in range(self.accum)]
            self.next_batch += 1
            if b not in self.skip:
                return b, (self.transform(b, micro) if self.transform else micro)

    def _spike_documents(self, batch: int, micro: list[Batch]) -> list[dict] | None:
        """The spiking step's top documents by loss contribution (train/loop/spike_documents.py), on rank 0
        (None elsewhere); every process takes part in the forward of its rows."""
        losses, counted = self.trainer.token_losses(micro)
        if not self.env.is_main:
            return None
        return top_documents(batch_segments(self.loader.sampler, batch), losses.numpy(), counted.numpy())

    def _on_spike(self, decision: Decision, batch: int, result: StepResult, documents: list[dict] | None) -> bool:
        """Log the spike (with its top `documents`) and act on it; True when the loop state was rolled back.
        The run stops (its step logged as `stop`) after spikes.max_rollbacks rollbacks or
        spikes.max_consecutive_skips dropped updates in a row: a run whose every update is dropped has
        diverged, and would otherwise "finish" untrained."""
        self.spikes += 1
        step, spike = self.trainer.step, decision.spike
        loss, grad_norm = result.loss, result.grad_norm
        row = {
            "step": step,
            "batch": batch,
            "loss": loss,
            "grad_norm": grad_norm,
            "window_mean": spike.window_mean,
            "window_std": spike.window_std,
            "window_grad_median": spike.window_grad_median,
            "reason": spike.reason,
            "action": decision.action.value,
        }
        if documents is not None:
            row["documents"] = documents
        if decision.note:
            row["note"] = decision.note
        if decision.action is Action.ROLLBACK:
            target = self.ckpts.choose(before=step)
            if target is None:
                row.update(action=Action.SKIP.value, note="no checkpoint to roll back to yet")
            elif self.rollbacks >= self.cfg.spikes.max_rollbacks:
                self._stop(
                    row,
                    f"after {self.rollbacks} rollbacks (spikes.max_rollbacks): stopping",
                    f"{self.run_dir.local}: loss spike at step {step} ({spike.reason}) after {self.rollbacks} "
                    f"rollbacks (spikes.max_rollbacks); stopping, see {EVENTS_FILE}",
                )
            else:
                self.rollbacks += 1
                skipped = list(range(max(0, batch - self.cfg.spikes.skip_batches + 1), batch + 1))
                row.update(rollback_to=target.step, skipped_batches=skipped)
                self._write_event(row)
                self._restore(target)
                self.skip |= set(skipped)
                self.dropped.clear()
                self._open_logs(keep_events=True)
                return True
        if row["action"] == Action.SKIP.value:
            self.dropped.append((step, loss, grad_norm))
            if len(self.dropped) >= self.cfg.spikes.max_consecutive_skips:
                self._stop(
                    row,
                    f"{len(self.dropped)} updates in a row dropped (spikes.max_consecutive_skips): stopping",
                    self._diverged(),
                )
        self._write_event(row)
        return False

    def _diverged(self) -> str:
        """The one line that stops a run whose last spikes.max_consecutive_skips updates were all dropped."""
        (first, first_loss, first_grad), (last, last_loss, last_grad) = self.dropped[0], self.dropped[-1]
        o = self.cfg.optim
        return (
            f"{self.run_dir.local}: steps {first}-{last}: {len(self.dropped)} updates in a row dropped "
            f"(spikes.max_consecutive_skips {self.cfg.spikes.max_consecutive_skips}): loss {first_loss:.4g}, "
            f"grad norm {first_grad:.4g} at step {first}, loss {last_loss:.4g}, grad norm {last_grad:.4g} at step "
            f"{last}; the run has diverged and stops with no checkpoint after step {first - 1}. Lower optim.lr "
            f"{o.lr:g} or raise optim.warmup_steps {o.warmup_steps}; see {EVENTS_FILE}"
        )

    def _stop(self, row: dict, note: str, message: str) -> None:
        self._write_event({**row, "action": "stop", "note": note})
        raise UserError(message)

    def _write_event(self, row: dict) -> None:
        if self.events is not None:
            self.events.write(row)
        if self.env.is_main:
            progress_write(f"ptk train: spike at step {row['step']}: {row['reason']}; {event_outcome(row)}")

    # -- the loop ----------------------------------------------------------------------------------
    def run(self) -> RunSummary:
        try:
            with deferred_sigterm():  # a SIGTERM stops the loop after the step in flight (`Gradients.stop`)
                return self._train()
        except BaseException:  # an error or Ctrl-C: the checkpoint being finalized is completed (or reported) first
            problem = self.ckpts.wait_alone()
            if problem and self.env.is_main:
                print(f"ptk train: the checkpoint being finalized was not saved: {problem}", file=sys.stderr)
            raise
        finally:  # a failed run's logs and trackers are flushed and closed too
            for log in (self.metrics, self.events, self.trackers):
                if log is not None:
                    log.close()

    def _train(self) -> RunSummary:
        cfg, trainer = self.cfg, self.trainer
        self._open_logs()
        peak = device_peak_flops(self.env.device, cfg.precision)
        flops_per_token = trainer.model_cfg.flops_per_token(cfg.data.seq_len)
        first_step, first_loss, recent, val, scores = trainer.step + 1, math.nan, deque(maxlen=SUMMARY_STEPS), {}, {}
        trained_tokens, checkpoint_due, stopped = 0, False, False
        bar = progress_bar(total=cfg.max_steps, initial=trainer.step, unit="step", disable=not self.env.is_main)
        start = time.perf_counter()
        while trainer.step < cfg.max_steps:
            t0 = time.perf_counter()
            batch, micro = self._draw()
            grads = trainer.gradients(micro)
            decision = self.detector.decide(grads.loss, grads.grad_norm)
            # Before the update: the spike's documents are ranked under the weights its forward ran under.
            documents = self._spike_documents(batch, micro) if decision.spike is not None else None
            result = trainer.update(grads, apply=decision.apply)
            seconds = time.perf_counter() - t0
            trained_tokens += result.tokens
            if result.applied:
                self.dropped.clear()
            if decision.spike is not None and self._on_spike(decision, batch, result, documents):
                bar.reset(total=cfg.max_steps)
                bar.update(trainer.step)
                checkpoint_due = False
                continue
            loss = result.loss
            first_loss = loss if math.isnan(first_loss) else first_loss
            recent.append(loss)
            row = {"step": trainer.step, "loss": loss}
            if result.routing is not None:  # a mixture of experts: the routers' load-balancing loss, apart
                row["aux_loss"] = result.routing.aux_loss
            row |= {
                "lr": result.lr,
                "grad_norm": result.grad_norm,
                "tokens": trainer.tokens,
                "tokens_per_s": result.tokens / seconds,
            }
            if peak is not None:
                row["mfu"] = flops_per_token * row["tokens_per_s"] / (peak * self.env.world_size)
            if not result.applied:
                row["skipped"] = True
            if self.env.is_main:
                # From the order alone (`ptk trace` computes the same): rank 0 reads the global batch's rows,
                # which it can without the other ranks' (0.06 ms for 8 x 33 rows, 2.4 ms for 64 x 2049 on a CPU), and
                # nothing is gathered. The loader's sampler: a resume that changed the mixture rebased it.
                row["batch_sha256"] = self.loader.sampler.batch_sha256(batch)
            last = trainer.step == cfg.max_steps
            eval_step = last or bool(cfg.eval.every and trainer.step % cfg.eval.every == 0)
            evaluate = bool(self.val_rows) and eval_step
            if result.routing is not None and eval_step:  # tokens per expert in this step's global batch
                row["expert_load"] = result.routing.expert_load
            if evaluate:
                t0 = time.perf_counter()
                val = {name: trainer.evaluate_rows(x, y) for name, (x, y) in self.val_rows.items()}
                val_seconds = time.perf_counter() - t0  # what `ptk init`'s probe run charges per evaluation
                val_row = {
                    "step": trainer.step,
                    "val_loss": val,
                    "val_batches": self.val_batches,
                    "val_tokens": self.val_tokens,
                    "val_seconds": val_seconds,
                }
                if self.tasks is not None:
                    t0 = time.perf_counter()
                    scores = trainer.evaluate_tasks(self.tasks)
                    val_row.update(tasks=scores, task_items=self.tasks.item_counts, task_chance=self.tasks.chance)
                    val_row["task_seconds"] = time.perf_counter() - t0
            if self.metrics is not None:
                self.metrics.write(row)
                if evaluate:
                    self.metrics.write(val_row)
            bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{row['tokens_per_s']:,.0f}")
            bar.update(1)
            stopped = grads.stop
            checkpoint_due |= bool(cfg.checkpoint.every and trainer.step % cfg.checkpoint.every == 0) or last
            # A dropped update may begin a divergence (max_consecutive_skips): a checkpoint due then waits for
            # the next applied one, so that none holds the model of a run that stops for having diverged.
            if (checkpoint_due or stopped) and (result.applied or last):
                self.ckpts.save(interim=not checkpoint_due)
                checkpoint_due = False
            if stopped:
                break
        self.ckpts.wait()  # the last checkpoint is complete (named step-*) before the run reports its end
        bar.close()
        seconds = time.perf_counter() - start
        return RunSummary(
            first_step,
            trainer.step,
            first_loss,
            list(recent),
            trained_tokens / seconds,
            seconds,
            val,
            self.val_batches,
            self.val_tokens,
            self.spikes,
            self.rollbacks,
            stopped,
            scores,
        )


def event_outcome(row: dict) -> str:
    """What a spike's event did, as its progress line says it: `action skip (update dropped)`."""
    action = row["action"]
    if "note" in row:
        what = row["note"]
    elif action == Action.ROLLBACK.value:
        what = f"back to step {row['rollback_to']}, skipping batches {row['skipped_batches']}"
    else:
        what = {Action.CONTINUE.value: "update applied", Action.SKIP.value: "update dropped", "stop": "stopping"}[
            action
        ]
    return f"action {action} ({what})"


SCHEDULE_KEYS = (
    "max_steps",
    "optim.lr",
    "optim.min_lr",
    "optim.warmup_steps",
    "optim.schedule",
    "optim.decay_fraction",
)


def schedule_change(ckpt: Checkpoint, config: dict, schedule: Schedule) -> str | None:
    """One line when the learning-rate schedule differs from the one `ckpt` was trained with (a finished
    run extended with a new max_steps, a new optim.lr): allowed, but the learning rate may jump."""

    def get(conf: dict, key: str):
        for k in key.split("."):
            conf = conf.get(k, {}) if isinstance(conf, dict) else {}
        return conf

    saved = ckpt.meta.get("config", {})
    changed = [f"{k} {get(saved, k)} -> {get(config, k)}" for k in SCHEDULE_KEYS if get(saved, k) != get(config, k)]
    if not changed:
        return None
    o = saved["optim"]
    before = Schedule(o["lr"], o["min_lr"], o["warmup_steps"], saved["max_steps"], o["schedule"], o["decay_fraction"])
    return (
        f"ptk train: the schedule changed since {ckpt.path.name} ({', '.join(changed)}): learning rate "
        f"{lr_at(ckpt.step, before):.4g} at step {ckpt.step} -> "
        f"{lr_at(ckpt.step + 1, schedule):.4g} at step {ckpt.step + 1}"
    )


def format_summary(cfg: TrainConfig, run: RunDir, s: RunSummary) -> str:
    lines = [
        f"ptk train: steps {s.first_step}-{s.last_step} of {cfg.max_steps} in {s.seconds:.1f}s "
        f"({s.tokens_per_s:,.0f} tokens/s); loss {s.first_loss:.4f} at step {s.first_step} -> "
        f"{math.fsum(s.last_losses) / len(s.last_losses):.4f} (mean of the last {len(s.last_losses)} steps)",
    ]
    if s.val_loss:
        lines.append(
            "  val loss (first held-out batches only; ptk eval --mixture scores all): "
            + ", ".join(
                f"{k} {v:.4f} ({_count(s.val_batches[k], 'batch', 'batches')}, {s.val_tokens[k]:,} tokens)"
                for k, v in s.val_loss.items()
            )
        )
    if s.tasks:
        names = dict.fromkeys(key.rsplit("/", 1)[0] for key in s.tasks)
        lines.append(
            "  downstream tasks (lm-eval conventions): "
            + ", ".join(f"{n} acc {s.tasks[f'{n}/acc']:.4f}, acc_norm {s.tasks[f'{n}/acc_norm']:.4f}" for n in names)
        )
    if s.spikes:
        lines.append(
            f"  loss spikes: {s.spikes} (action {cfg.spikes.action}, rollbacks {s.rollbacks}); see {EVENTS_FILE}"
        )
    lines.append(f"  run dir: {run.local} ({METRICS_FILE}, {CONFIG_FILE}, {CHECKPOINTS}/)")
    return "\n".join(lines)


def _count(n: int, one: str, many: str) -> str:
    return f"{n:,} {one if n == 1 else many}"
