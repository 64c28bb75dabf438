"""Packing of one source: its documents joined with EOS, epoch after epoch, cut into sequences.

    stream = SourceStream(shard_set, split.train, seq_len=1024, seed=7, start_token=0)
    stream.sequences(np.array([0, 1, 2]))     # int64 [3, 1025]: the source's sequences 0, 1, 2
    stream.window_documents(epoch, w)         # the documents of one shuffle window, in stream order
    stream.segments(5)                        # sequence 5's pieces of documents: [(doc, start, end), ...]

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
from collections.abc import Callable
from typing import TypeVar

import numpy as np

from pretrainkit.mixtures.holdout import DocumentSubset
from pretrainkit.shards import ShardSet

WINDOW_BATCHES = 64
K = TypeVar("K")  # `_kept`: a cache's keys and values
V = TypeVar("V")
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
        self._layouts: OrderedDict[tuple[int, int], tuple[np.ndarray, np.ndarray, np.ndarray]] = OrderedDict()

    def __getstate__(self) -> dict:
        """Pickled for DataLoader workers without the epochs and windows read so far."""
        return {**self.__dict__, "_epochs": OrderedDict(), "_windows": OrderedDict(), "_layouts": OrderedDict()}

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

    def segments(self, index: int) -> list[tuple[int, int, int]]:
        """Sequence `index`'s pieces of documents, in order: (document in the shard set, start, end), the
        offsets into the document's tokens followed by its EOS (end = length + 1 takes the EOS). Reads
        only record batches' length columns, never their tokens."""
        out: list[tuple[int, int, int]] = []
        position, done = self.start_token + index * self.row_tokens, 0
        while done < self.row_tokens:
            epoch, offset = divmod(position + done, self.epoch_tokens)
            ends = self._epoch(epoch)[1]
            w = int(ends.searchsorted(offset, side="right"))
            offset -= int(ends[w - 1]) if w else 0
            docs, lengths, doc_ends = self._documents(epoch, w)
            d = int(doc_ends.searchsorted(offset, side="right"))
            while done < self.row_tokens and d < len(docs):  # to the row's end or the window's
                start = offset - (int(doc_ends[d - 1]) if d else 0)
                n = min(self.row_tokens - done, int(lengths[d]) + 1 - start)
                out.append((int(docs[d]), start, start + n))
                done, offset, d = done + n, offset + n, d + 1
        return out

    def window_documents(self, epoch: int, w: int) -> np.ndarray:
        """int64: the documents of window w of this epoch, in stream order."""
        return self._documents(epoch, w)[0]

    def _documents(self, epoch: int, w: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(documents, their lengths, where each one's EOS ends in the window's tokens), in stream order,
        from the length columns alone; the last few windows' kept, as a batch's rows share windows."""

        def make() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            batches = self._window_batches(epoch, w)
            docs, _, lengths = self._layout(epoch, w, batches, [self.shard_set.batch_lengths(b) for b in batches])
            return docs, lengths, np.cumsum(lengths + 1)  # each document then its EOS, as `_window` joins them

        return _kept(self._layouts, (epoch, w), _WINDOWS_KEPT, make)

    def num_windows(self) -> int:
        return -(-len(self._batches) // self.window_batches)

    def _epoch(self, epoch: int) -> tuple[np.ndarray, np.ndarray]:
        """(record batches in this epoch's order, cumulative tokens at the end of each window)."""

        def make() -> tuple[np.ndarray, np.ndarray]:
            order = self._rng(epoch).permutation(self._batches) if self.shuffle else self._batches
            cut = np.arange(0, len(order), self.window_batches)
            ends = (
                np.cumsum(np.add.reduceat(self.docs.batch_tokens[order], cut)) if len(order) else np.zeros(0, np.int64)
            )
            return order, ends

        return _kept(self._epochs, epoch, _EPOCHS_KEPT, make)

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

        def make() -> np.ndarray:
            batches = self._window_batches(epoch, w)
            read = self.shard_set.read_batches(batches)
            # The next window's record batches, fetched meanwhile where the shards are in a bucket
            self.shard_set.prefetch(
                self._window_batches(*((epoch, w + 1) if w + 1 < self.num_windows() else (epoch + 1, 0)))
            )
            _, starts, lengths = self._layout(epoch, w, batches, [lengths for lengths, _ in read])
            eos = np.array([self.shard_set.tokenizer.eos_id], dtype=self.shard_set.dtype)
            joined = np.concatenate([tokens for _, tokens in read] + [eos])
            # One gather: each document's tokens, then an EOS (the element appended last)
            with_eos = lengths + 1
            out_starts = np.cumsum(with_eos) - with_eos
            gather = np.arange(int(with_eos.sum()), dtype=np.int64) + np.repeat(starts - out_starts, with_eos)
            gather[out_starts + lengths] = len(joined) - 1
            return joined[gather]

        return _kept(self._windows, (epoch, w), _WINDOWS_KEPT, make)


def _kept(cache: OrderedDict[K, V], key: K, limit: int, make: Callable[[], V]) -> V:
    """`cache[key]`, made by `make()` when missing; the `limit` most recently used entries are kept."""
    found = cache.get(key)
    if found is None:
        found = cache[key] = make()
        if len(cache) > limit:
            cache.popitem(last=False)
    else:
        cache.move_to_end(key)
    return found
