"""`MixtureSampler`: the global order of training sequences, and per-source validation batches.

    sampler = MixtureSampler(mix, seq_len=256, global_batch_size=32)
    tokens, source_ids = sampler.batch(k)       # int64 [32, 257], int16 [32] (index into mix.sources)
    sampler.rows(k, 8, 16)                      # rows 8..15 of batch k only (one rank's slice)
    sampler.batch_sha256(k)                     # sha256 of batch k's tokens as little-endian int32
    sampler.segments(k)                         # per row: its source and its pieces of documents
    sampler.validation_batches("web", batch_size=8, max_batches=4)

Guarantee: global batch k is a pure function of (mixture, seq_len, global batch size, k); the
mixture includes its seed and each source's stream start. Global sequence n = (k - first_batch) * B
+ row comes from the source that `InterleaveSchedule` assigns to slot n, and is that source's
sequence number c (c = earlier slots of the same source) in its `SourceStream`. Nothing depends on
world size, micro-batch size, loader workers, or which batches were read before: any batch is
computed directly (O(1) resume).
`first_batch` is non-zero only after a resume that accepted a mixture change: the new order then
starts at that batch with each source continuing from its saved position.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

import numpy as np

from pretrainkit.errors import UserError, quoted
from pretrainkit.mixtures.mixture import Mixture, Source
from pretrainkit.mixtures.schedule import InterleaveSchedule
from pretrainkit.mixtures.stream import SourceStream

if TYPE_CHECKING:  # torch is imported where tensors are made: `ptk trace` computes a batch without it
    import torch


class MixtureSampler:
    def __init__(self, mix: Mixture, seq_len: int, global_batch_size: int, first_batch: int = 0):
        if seq_len < 1 or global_batch_size < 1:
            raise UserError(f"seq_len and global_batch_size must be >= 1, got {seq_len} and {global_batch_size}")
        self.mix = mix
        self.seq_len = seq_len
        self.global_batch_size = global_batch_size
        self.first_batch = first_batch
        self.sources: list[Source] = mix.train_sources
        self.schedule = InterleaveSchedule.from_weights([s.weight for s in self.sources])
        self.streams = [
            SourceStream(s.shard_set, s.split.train, seq_len=seq_len, seed=s.start.seed, start_token=s.start.token)
            for s in self.sources
        ]
        self._source_ids = np.array([s.index for s in self.sources], dtype=np.int16)
        self._limit_batch = [self._first_batch_over_limit(i) for i in range(len(self.sources))]

    @property
    def fingerprint(self) -> str:
        return self.mix.fingerprint

    def batch(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Global batch k: tokens int64 [B, seq_len + 1] and source_ids int16 [B]."""
        return self.rows(k, 0, self.global_batch_size)

    def rows(self, k: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """Rows [start, stop) of global batch k, computing only those rows."""
        which, index = self._origins(k, start, stop)
        tokens = np.empty((len(which), self.seq_len + 1), dtype=np.int64)
        for s in np.unique(which).tolist():
            mask = which == s
            tokens[mask] = self.streams[s].sequences(index[mask])
        return tokens, self._source_ids[which]

    def batch_sha256(self, k: int) -> str:
        """The sha256 of global batch k's rows in order, each seq_len + 1 tokens as little-endian int32:
        what `metrics.jsonl` logs for the step that trains on it and `ptk trace` prints."""
        return rows_sha256(self.batch(k)[0])

    def segments(self, k: int) -> list[tuple[Source, list[tuple[int, int, int]]]]:
        """Per row of global batch k: its source and its pieces of documents, (document in the source's
        shard set, start, end) each (`SourceStream.segments`); reads no tokens."""
        which, index = self._origins(k, 0, self.global_batch_size)
        return [(self.sources[s], self.streams[s].segments(c)) for s, c in zip(which.tolist(), index.tolist())]

    def _origins(self, k: int, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """For rows [start, stop) of batch k: the position of each one's source in `sources` and its
        sequence number in that source's stream."""
        if k < self.first_batch or not 0 <= start <= stop <= self.global_batch_size:
            raise IndexError(
                f"rows [{start}, {stop}) of batch {k}: "
                f"outside batches >= {self.first_batch} of {self.global_batch_size} rows"
            )
        self.check_batch(k)
        n = (k - self.first_batch) * self.global_batch_size + np.arange(start, stop, dtype=np.int64)
        return self.schedule.source_of(n), self.schedule.index_in_source(n)

    def check_batch(self, k: int) -> None:
        """UserError naming the source if batch k would read past its `max_epochs`."""
        for i, limit in enumerate(self._limit_batch):
            if limit is not None and k >= limit:
                s, stream = self.sources[i], self.streams[i]
                raise UserError(
                    f"{self.mix.path}: source {quoted(s.name)} ({s.shard_set.path}) would exceed "
                    f"max_epochs={s.max_epochs:g} "
                    f"at global batch {k}: its {stream.epoch_tokens} training tokens are used up; lower the token "
                    f"budget, raise max_epochs or lower its weight"
                )

    def limit_batch(self) -> int | None:
        """The first batch that some source's `max_epochs` forbids, or None if there is no limit."""
        limits = [b for b in self._limit_batch if b is not None]
        return min(limits) if limits else None

    def allowed_sequences(self, i: int) -> int | None:
        """How many sequences training source i (of `sources`) may give before its `max_epochs` is
        used up; None without a limit."""
        source, stream = self.sources[i], self.streams[i]
        if source.max_epochs is None:
            return None
        allowed_tokens = int(source.max_epochs * stream.epoch_tokens) - stream.start_token
        return max(allowed_tokens // stream.row_tokens, 0)

    def _first_batch_over_limit(self, i: int) -> int | None:
        allowed = self.allowed_sequences(i)
        if allowed is None:
            return None
        n = self.schedule.first_index_reaching(i, allowed + 1)  # one past the first forbidden sequence
        return self.first_batch + (n - 1) // self.global_batch_size

    def sequences_before(self, k: int) -> np.ndarray:
        """int64 [num training sources]: sequences each source gave to batches first_batch..k-1."""
        return self.schedule.counts((k - self.first_batch) * self.global_batch_size)

    def positions(self, k: int) -> list[dict]:
        """Per training source, where its stream stands at the start of batch k (the loader state)."""
        used = self.sequences_before(k)
        return [
            {
                "name": s.name,
                "shards_fingerprint": s.shard_set.fingerprint,
                "stream_seed": stream.seed,
                "start_token": stream.start_token,
                "next_token": stream.token_position(int(c)),
            }
            for s, stream, c in zip(self.sources, self.streams, used)
        ]

    def validation_batches(
        self, source_name: str, batch_size: int, max_batches: int
    ) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Up to `max_batches` (inputs, targets) int64 batches [<= batch_size, seq_len] from the
        source's held-out documents, in document order (the same every call and every run)."""
        source = self.mix.source(source_name)
        stream = SourceStream(source.shard_set, source.split.heldout, seq_len=self.seq_len, seed=0, shuffle=False)
        count = min(stream.epoch_tokens // stream.row_tokens, batch_size * max_batches)
        if count == 0:
            raise UserError(
                f"{self.mix.path}: source {quoted(source_name)}: "
                f"its held-out split ({source.split.heldout.num_docs} documents, "
                f"{stream.epoch_tokens} tokens) is shorter than one sequence of {stream.row_tokens} tokens"
            )
        rows = stream.sequences(np.arange(count))
        return [to_inputs_targets(rows[i : i + batch_size]) for i in range(0, count, batch_size)]


def rows_sha256(rows: np.ndarray) -> str:
    """The sha256 of rows of tokens in order, each token as a little-endian int32."""
    return hashlib.sha256(rows.astype("<i4").tobytes()).hexdigest()


def to_inputs_targets(rows: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of seq_len + 1 tokens (any integer type) as (inputs, targets) int64 tensors shifted by one."""
    import torch

    return torch.from_numpy(rows[:, :-1].astype(np.int64)), torch.from_numpy(rows[:, 1:].astype(np.int64))
