"""The training loop's state as a checkpoint records it: `meta.json`'s `extra`, with a name and a type per field.

    state = LoopState.from_meta(ckpt.meta, ckpt.path / META_FILE)   # None for a checkpoint without a loop's record
    state.loader["seq_len"], state.next_batch, state.tokenizer_sha256
    meta["extra"] = state.to_json()

The JSON keys are those checkpoints have always had (`loader`, `mixture`, `tokenizer`, `next_batch`, `skip`,
`spikes`, `rollbacks`), so a checkpoint written before this module reads the same; `mixture` and `tokenizer`
are absent from the oldest ones, read as None.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pretrainkit.errors import UserError

LOOP_KEY = "extra"  # where in meta.json the loop's state is


@dataclass(frozen=True)
class LoopState:
    loader: dict  # the mixture loader's own state (`TrainLoader.state_dict`): its position in the data order
    mixture_fingerprint: str | None  # of the mixture the run trained on (what decides the data order)
    tokenizer_sha256: str | None  # of the tokenizer the shards were made with (checked by init_from, export, load)
    next_batch: int  # the global batch the next step draws
    skip: tuple[int, ...]  # global batches a rollback chose to skip, ascending
    spikes: dict  # the spike detector's window (`SpikeDetector.state_dict`)
    rollbacks: int  # rollbacks so far (spikes.max_rollbacks counts them)

    def to_json(self) -> dict:
        return {
            "loader": self.loader,
            "mixture": self.mixture_fingerprint,
            "tokenizer": self.tokenizer_sha256,
            "next_batch": self.next_batch,
            "skip": list(self.skip),
            "spikes": self.spikes,
            "rollbacks": self.rollbacks,
        }

    @classmethod
    def from_meta(cls, meta: dict, where: Path) -> LoopState | None:
        """The loop state in a checkpoint's `meta.json` (`where`: that file, for errors); None when it has none."""
        if LOOP_KEY not in meta:
            return None
        extra = meta[LOOP_KEY]
        try:
            return cls(
                dict(extra["loader"]),
                extra.get("mixture"),
                extra.get("tokenizer"),
                int(extra["next_batch"]),
                tuple(sorted(int(b) for b in extra["skip"])),
                dict(extra["spikes"]),
                int(extra["rollbacks"]),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as e:
            raise UserError(f"{where}: {LOOP_KEY}: missing or malformed loop state ({type(e).__name__}: {e})") from None
