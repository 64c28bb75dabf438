"""Packing of one source: its documents joined with EOS, epoch after epoch, cut into sequences.

    stream = SourceStream(shard_set, split.train, seq_len=1024, seed=7, start_token=0)
    stream.sequences(np.array([0, 1, 2]))     # int64 [3, 1025]: the source's sequences 0, 1, 2
    stream.window_documents(epoch, w)         # the documents of one shuffle window, in stream order

The stream is infinite: epoch e holds every document of the subset once, each followed by EOS,
and epochs follow each other without a gap. Sequence i is tokens [start_token + i*(seq_len+1),
... + seq_len+1) of it, so a sequence may run across a document, window or epoch boundary, and
no token is dropped. Any sequence is computed directly from its index (resuming is O(1) in the
data): nothing depends on what was read before.

Order of an epoch (windowed shuffle, drawn from (seed, e) unless `shuffle=False`): the record
batches of the shard set (~16k tokens each) are permuted, cut into windows of `window_batches`
consecutive ones, and the documents of each window are permuted among themselves. The stream is
window 0's documents, then window 1's, and so on. What it costs in memory: nothing per document
(a permutation of the record batches per epoch, and the windows a process is reading, ~2 MB each
at the default 64 batches). What it buys: reading a window decompresses each of its record batches
once, and sequences are slices of the window's tokens.
Statistical cost against a full shuffle: documents that share a record batch (neighbours in the
input order) always land in the same window, within `window_batches` * ~16k tokens of each other
in the stream; two documents adjacent in the stream come from the same record batch with
probability about 1 / window_batches (1/64) rather than 1 / number of batches, and from anywhere
in the input otherwise. A source with at most `window_batches` record batches is one window: a
full shuffle. With `shuffle=False` (validation) the stream is the documents in input order.
Reading window w asks the shard set to prefetch window w + 1's record batches (shards in a bucket:
`pretrainkit.shards.streamed`; a no-op on local files); the order never depends on it.
`start_token` is how a source starts where another run left it (replay; see `pretrainkit.mixtures.mixture`).
"""

from __future__ import annotations

from collections import OrderedDict

import numpy as np

from pretrainkit.mixtures.holdout import DocumentSubset
from pretrainkit.shards import ShardSet

WINDOW_BATCHES = 64
_EPOCHS_KEPT = 2  # a batch of a source's rows usually touches one epoch, at most two unless the source is tiny
_WINDOWS_KEPT = 3  # the window being read, the next, and one a row straddling them came from


class SourceStream:
    def __init__(
        self,
        shard_set: ShardSet,
        docs: DocumentSubset,
        *,
        seq_len: int,
        seed: int,
        start_token: int = 0,
        shuffle: bool = True,
        window_batches: int = WINDOW_BATCHES,
    ):
        self.shard_set = shard_set
        self.docs = docs
        self.seq_len = seq_len
        self.seed = seed
        self.start_token = start_token
        self.shuffle = shuffle
        self.window_batches = window_batches
        self.epoch_tokens = docs.tokens
        self._batches = np.flatnonzero(docs.batch_tokens)  # record batches holding any of the subset
        self._epochs: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()
        self._windows: OrderedDict[tuple[int, int], np.ndarray] = OrderedDict()

    def __getstate__(self) -> dict:
        """Pickled for DataLoader workers without the epochs and windows read so far."""
        return {**self.__dict__, "_epochs": OrderedDict(), "_windows": OrderedDict()}

    @property
    def row_tokens(self) -> int:
        return self.seq_len + 1

    def token_position(self, num_sequences: int) -> int:
        """Stream position just after the first `num_sequences` sequences."""
        return self.start_token + num_sequences * self.row_tokens

    def sequences(self, index: np.ndarray) -> np.ndarray:
        """int64 [len(index), seq_len + 1]: the source's sequences with these indices."""
        index = np.asarray(index, dtype=np.int64)
        out = np.empty((len(index), self.row_tokens), dtype=np.int64)
        for r, position in enumerate((self.start_token + index * self.row_tokens).tolist()):
            done = 0
            while done < self.row_tokens:  # more than once only where a row crosses a window boundary
                epoch, offset = divmod(position + done, self.epoch_tokens)
                ends = self._epoch(epoch)[1]
                w = int(ends.searchsorted(offset, side="right"))
                begin = int(ends[w - 1]) if w else 0
                n = min(self.row_tokens - done, int(ends[w]) - offset)
                out[r, done : done + n] = self._window(epoch, w)[offset - begin : offset - begin + n]
                done += n
        return out

    def window_documents(self, epoch: int, w: int) -> np.ndarray:
        """int64: the documents of window w of this epoch, in stream order."""
        batches = self._window_batches(epoch, w)
        return self._layout(epoch, w, batches, [self.shard_set.batch_lengths(b) for b in batches])[0]

    def num_windows(self) -> int:
        return -(-len(self._batches) // self.window_batches)

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(record batches in this epoch's order, cumulative tokens at the end of each window)."""
        cached = self._epochs.get(epoch)
        if cached is None:
            order = self._rng(epoch).permutation(self._batches) if self.shuffle else self._batches
            cut = np.arange(0, len(order), self.window_batches)
            ends = (
                np.cumsum(np.add.reduceat(self.docs.batch_tokens[order], cut)) if len(order) else np.zeros(0, np.int64)
            )
            cached = (order, ends)
            self._epochs[epoch] = cached
            if len(self._epochs) > _EPOCHS_KEPT:
                self._epochs.popitem(last=False)
        else:
            self._epochs.move_to_end(epoch)
        return cached

    def _rng(self, epoch: int, *window: int) -> np.random.Generator:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, epoch, *window])))

    def _window_batches(self, epoch: int, w: int) -> list[int]:
        return self._epoch(epoch)[0][w * self.window_batches : (w + 1) * self.window_batches].tolist()

    def _layout(
        self, epoch: int, w: int, batches: list[int], batch_lengths: list[np.ndarray]
    ) -> tuple[np.ndarray, ...]:
        """(documents, their starts in the window's record batches' tokens joined, their lengths), in
        stream order, for window w made of these record batches."""
        first_docs = self.shard_set.batches.docs
        docs, starts, lengths = [], [], []
        base = 0
        for b, n in zip(batches, batch_lengths):
            n = n.astype(np.int64)
            keep = self.docs.mask(int(first_docs[b]), len(n))
            ends = np.cumsum(n)
            docs.append(int(first_docs[b]) + np.flatnonzero(keep))
            starts.append(base + (ends - n)[keep])
            lengths.append(n[keep])
            base += int(ends[-1])
        docs, starts, lengths = (np.concatenate(x) for x in (docs, starts, lengths))
        if self.shuffle:
            perm = self._rng(epoch, w + 1).permutation(len(docs))
            docs, starts, lengths = docs[perm], starts[perm], lengths[perm]
        return docs, starts, lengths

    def _window(self, epoch: int, w: int) -> np.ndarray:
        """Window w's tokens in stream order: each of its record batches decompressed once."""
        key = (epoch, w)
        tokens = self._windows.get(key)
        if tokens is not None:
            self._windows.move_to_end(key)
            return tokens
        batches = self._window_batches(epoch, w)
        read = self.shard_set.read_batches(batches)
        # The next window's record batches, fetched meanwhile where the shards are in a bucket
        self.shard_set.prefetch(
            self._window_batches(*((epoch, w + 1) if w + 1 < self.num_windows() else (epoch + 1, 0)))
        )
        _, starts, lengths = self._layout(epoch, w, batches, [lengths for lengths, _ in read])
        joined = np.concatenate(
            [tokens for _, tokens in read] + [np.array([self.shard_set.tokenizer.eos_id], dtype=self.shard_set.dtype)]
        )
        # One gather: each document's tokens, then an EOS (the element appended last)
        with_eos = lengths + 1
        out_starts = np.cumsum(with_eos) - with_eos
        gather = np.arange(int(with_eos.sum()), dtype=np.int64) + np.repeat(starts - out_starts, with_eos)
        gather[out_starts + lengths] = len(joined) - 1
        tokens = joined[gather]
        self._windows[key] = tokens
        if len(self._windows) > _WINDOWS_KEPT:
            self._windows.popitem(last=False)
        return tokens
