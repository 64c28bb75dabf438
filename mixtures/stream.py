"""Packing of one source: its documents joined with EOS, epoch after epoch, cut into sequences.

    stream = SourceStream(shard_set, train_docs, seq_len=1024, seed=7, start_token=0)
    stream.sequences(np.array([0, 1, 2]))     # int64 [3, 1025]: the source's sequences 0, 1, 2

The stream is infinite: epoch e lists the documents in `docs` in an order drawn from
(seed, e) (or as given, with `shuffle=False`), each followed by EOS, and epochs follow each
other without a gap. Sequence i is tokens [start_token + i*(seq_len+1), ... + seq_len+1) of it,
so a sequence may run across a document or an epoch boundary, and no token is dropped.
Any sequence is computed directly from its index: reaching sequence i costs one shuffle of its
epoch's documents, never a read of what comes before (resuming is O(1) in the data).
`start_token` is how a source starts where another run left it (replay; see `mixtures.mixture`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from shards import ShardSet

_EPOCHS_KEPT = 2  # a batch of a source's rows usually touches one epoch, at most two unless the source is tiny


class SourceStream:
    def __init__(
        self,
        shard_set: ShardSet,
        docs: np.ndarray,
        *,
        seq_len: int,
        seed: int,
        start_token: int = 0,
        shuffle: bool = True,
    ):
        self.shard_set = shard_set
        self.docs = np.asarray(docs, dtype=np.int64)
        self.seq_len = seq_len
        self.seed = seed
        self.start_token = start_token
        self.shuffle = shuffle
        lengths = shard_set.doc_lengths()
        self._doc_tokens = lengths + 1  # with its EOS
        self._doc_starts = np.zeros(len(lengths) + 1, dtype=np.int64)  # in the shard set's stream
        np.cumsum(self._doc_tokens, out=self._doc_starts[1:])
        self.epoch_tokens = int(self._doc_tokens[self.docs].sum())
        self._epochs: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    @property
    def row_tokens(self) -> int:
        return self.seq_len + 1

    def token_position(self, num_sequences: int) -> int:
        """Stream position just after the first `num_sequences` sequences."""
        return self.start_token + num_sequences * self.row_tokens

    def epoch_order(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(documents in this epoch's order, cumulative token ends including EOS)."""
        cached = self._epochs.get(epoch)
        if cached is None:
            if self.shuffle:
                rng = np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch])))
                order = rng.permutation(self.docs)
            else:
                order = self.docs
            cached = (order, np.cumsum(self._doc_tokens[order]))
            self._epochs[epoch] = cached
            if len(self._epochs) > _EPOCHS_KEPT:
                self._epochs.popitem(last=False)
        else:
            self._epochs.move_to_end(epoch)
        return cached

    def sequences(self, index: np.ndarray) -> np.ndarray:
        """int64 [len(index), seq_len + 1]: the source's sequences with these indices."""
        index = np.asarray(index, dtype=np.int64)
        rows = len(index)
        out = np.empty((rows, self.row_tokens), dtype=np.int64)
        flat = out.reshape(-1)
        # Cut every row into pieces that each lie inside one epoch (a row may span several epochs
        # when the source is shorter than a sequence), then copy each epoch's pieces at once.
        epoch, offset = np.divmod(self.start_token + index * self.row_tokens, self.epoch_tokens)
        dst = np.arange(rows, dtype=np.int64) * self.row_tokens
        need = np.full(rows, self.row_tokens, dtype=np.int64)
        while rows:
            take = np.minimum(need, self.epoch_tokens - offset)
            for e in np.unique(epoch).tolist():
                sel = epoch == e
                self._copy_pieces(e, offset[sel], take[sel], dst[sel], flat)
            need, dst, epoch = need - take, dst + take, epoch + 1
            offset = np.zeros_like(offset)
            left = need > 0
            need, dst, epoch, offset = need[left], dst[left], epoch[left], offset[left]
            rows = len(need)
        return out

    def _copy_pieces(self, epoch: int, offset: np.ndarray, length: np.ndarray, dst: np.ndarray, flat: np.ndarray) -> None:
        """Copy tokens [offset, offset + length) of this epoch to flat[dst:], piece by piece."""
        order, ends = self.epoch_order(epoch)
        first = np.searchsorted(ends, offset, side="right")  # the epoch's j-th document holds the first token
        last = np.searchsorted(ends, offset + length - 1, side="right")
        counts = last - first + 1
        piece = np.repeat(np.arange(len(offset)), counts)
        j = first[piece] + np.arange(len(piece)) - np.repeat(np.cumsum(counts) - counts, counts)
        doc = order[j]
        doc_begin = ends[j] - self._doc_tokens[doc]
        lo = np.maximum(doc_begin, offset[piece])
        hi = np.minimum(ends[j], (offset + length)[piece])
        src = self._doc_starts[doc] + (lo - doc_begin)
        to = dst[piece] + (lo - offset[piece])
        read = self.shard_set.read_tokens
        for s, d, n in zip(src.tolist(), to.tolist(), (hi - lo).tolist()):
            flat[d : d + n] = read(s, s + n)

