"""Loss-spike detection against a rolling window of recent accepted steps, and what to do about a spike.

    detector = SpikeDetector(cfg.spikes)
    decision = detector.decide(loss, grad_norm)  # the training loop acts on it (train/loop/training_loop.py)
    decision.action                              # Action.CONTINUE, SKIP or ROLLBACK; decision.spike: why
    # which is:
    spike = detector.check(loss, grad_norm)   # None, or a Spike saying why (with the window statistics)
    if spike is None:
        detector.accept(loss, grad_norm)

The decision follows `spikes.action`: a step that is no spike, or a spike under `none` whose loss and
grad norm are finite, continues (its update is applied); a spike under `skip`, or a non-finite one under
`none`, skips (its update is dropped; the decision's `note` says why); a spike under `rollback` rolls
back to the newest checkpoint before it (which the loop looks up, and without one skips instead).

A step is a spike when (defaults in `SpikeConfig`):
- its loss or grad norm is not finite (always, whatever the window holds), or, once the window holds
  `min_history` accepted steps,
- its loss exceeds the window mean by more than `loss_sigmas` standard deviations AND by more than
  `loss_rise` x the mean (so a flat, low-noise window does not flag a harmless wiggle), or
- its grad norm exceeds `grad_factor` x the window's median grad norm (0 turns this test off).
Only accepted steps enter the window, so a spike never raises the bar for the next one. The window is
part of every checkpoint (`state_dict`), so a resumed run flags exactly what the original would.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections import deque
from dataclasses import dataclass

from pretrainkit.train.config import SpikeConfig


@dataclass(frozen=True)
class Spike:
    reason: str
    window_mean: float | None
    window_std: float | None
    window_grad_median: float | None


class Action(enum.Enum):
    """What the loop does with a step; the values are the `action` of its row in events.jsonl."""

    CONTINUE = "none"  # the update is applied
    SKIP = "skip"  # the update is dropped; the step counts and its batch is consumed
    ROLLBACK = "rollback"  # the update is dropped and the run reloads the newest checkpoint before this step


@dataclass(frozen=True)
class Decision:
    action: Action
    spike: Spike | None = None  # None: not a spike (then the action is CONTINUE)
    note: str | None = None  # why the action is not the one `spikes.action` names

    @property
    def apply(self) -> bool:
        """Whether the step's update is applied."""
        return self.action is Action.CONTINUE


class SpikeDetector:
    def __init__(self, cfg: SpikeConfig) -> None:
        self.cfg = cfg
        self.losses: deque[float] = deque(maxlen=cfg.window)
        self.grad_norms: deque[float] = deque(maxlen=cfg.window)

    def check(self, loss: float, grad_norm: float) -> Spike | None:
        ready = len(self.losses) >= self.cfg.min_history
        mean = statistics.fmean(self.losses) if ready else None
        std = statistics.pstdev(self.losses) if ready else None
        median = statistics.median(self.grad_norms) if ready else None
        if not math.isfinite(loss) or not math.isfinite(grad_norm):
            return Spike("non-finite loss or grad norm", mean, std, median)
        if not ready:
            return None
        if loss - mean > self.cfg.loss_sigmas * std and loss - mean > self.cfg.loss_rise * mean:
            return Spike(
                f"loss {loss:.4f} > window mean {mean:.4f} + {self.cfg.loss_sigmas:g} std ({std:.4f})",
                mean,
                std,
                median,
            )
        if self.cfg.grad_factor and grad_norm > self.cfg.grad_factor * median:
            return Spike(
                f"grad norm {grad_norm:.4g} > {self.cfg.grad_factor:g} x window median {median:.4g}", mean, std, median
            )
        return None

    def decide(self, loss: float, grad_norm: float) -> Decision:
        """`check`, then what `spikes.action` makes of it; a step that is no spike enters the window."""
        spike = self.check(loss, grad_norm)
        if spike is None:
            self.accept(loss, grad_norm)
            return Decision(Action.CONTINUE)
        action = Action(self.cfg.action)
        if action is Action.CONTINUE and not (math.isfinite(loss) and math.isfinite(grad_norm)):
            # A non-finite update would destroy the weights.
            return Decision(Action.SKIP, spike, "spikes.action is none, but the update is not finite: dropped")
        return Decision(action, spike)

    def accept(self, loss: float, grad_norm: float) -> None:
        self.losses.append(loss)
        self.grad_norms.append(grad_norm)

    def state_dict(self) -> dict:
        return {"losses": list(self.losses), "grad_norms": list(self.grad_norms)}

    def load_state_dict(self, state: dict) -> None:
        self.losses = deque(state["losses"], maxlen=self.cfg.window)
        self.grad_norms = deque(state["grad_norms"], maxlen=self.cfg.window)
