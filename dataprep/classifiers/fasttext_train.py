"""fastText's supervised model, compiled (numba): documents as rows of the input matrix, SGD over them,
and the labels' probabilities.

    table = word_table(word_bytes, word_at, size)                     # the vocabulary, by hash
    rows, at, tokens = input_rows(data, ends, table, word_bytes, word_at, nwords, bucket, ngrams)
    wi = initial_input(nwords + bucket, dim, seed)                     # uniform in +-1/dim
    train(rows, at, labels, order, wi, wo, lr, epochs, tokens, workers)   # wi, wo updated in place
    p = probabilities(rows, at, wi, wo)                                # [documents, labels]

The computation is fastText's (https://github.com/facebookresearch/fastText, src/, v0.9.2), so that
the model it writes predicts in fastText as it does here:
- Rows of a document (`Dictionary::getLine`): its tokens (split at ASCII whitespace and NUL), then
  `</s>`, fastText's end of line; a token that starts with `__label__` is no word (fastText reads it as a
  label) and a literal `</s>` ends the document. Each token in the vocabulary gives its row; then
  every run of 2..`ngrams` consecutive tokens (out-of-vocabulary ones and `</s>` included) gives the
  row nwords + (h mod bucket), h the token hashes (FNV-1a, as int32 widened to uint64) combined as
  `h = h * 116049371 + next` (`addWordNgrams`).
- Model (`Model::update`, `SoftmaxLoss`): hidden = the mean of the rows, output = softmax(wo . hidden);
  the gradient lr * (target - p) goes to wo's rows and, divided by the row count, to every input row.
- Schedule (`FastText::trainThread`): the learning rate falls linearly from lr to 0 over epochs x the
  documents' tokens (labels and `</s>` counted, as fastText counts them).

What differs, neither changing the model's form nor its quality (the tests compare held-out AUC with
fastText's own training): the initial input matrix comes from splitmix64 of (seed, element) rather
than fastText's minstd_rand, and documents are read in a given order (`train.py` shuffles them by the
seed) rather than as the lines of a file; the learning rate is updated after every document rather
than every 100 tokens (`lrUpdateRate`). Each document's rows are computed once, not once per epoch.

Workers: one worker is deterministic (the same seed, the same bytes). Several are fastText's own
scheme, hogwild: each takes a contiguous share of the order, all update the shared matrices without
locks, so their updates interleave as the threads are scheduled and the result varies run to run.
"""

from __future__ import annotations

import threading

import numpy as np

from pretrainkit.dataprep.classifiers.fasttext_model import EOS_BYTES, fnv, is_label, next_token, placed, same, word_id
from pretrainkit.dataprep.kernels import numba_cache as _cache  # noqa: F401  (numba's cache directory, before numba loads)
from pretrainkit.dataprep.kernels.hashing import mix64

# isort: split
import numba  # noqa: E402

_mix64 = numba.njit(cache=True)(mix64)
NGRAM_MULTIPLIER = np.uint64(116049371)  # Dictionary::addWordNgrams
STEP_TOKENS = 1 << 21  # tokens of one compiled training call, ~0.5 s: a signal waits for its end


@numba.njit(cache=True)
def word_table(word_bytes, word_at, size):
    """The table `fasttext_model.word_id` probes: word i (word_bytes[word_at[i]:word_at[i + 1]]) placed from the slot of
    its hash on, in order; `size` a power of two larger than the words."""
    first = np.empty(len(word_at) - 1, np.int64)
    for i in range(len(first)):
        first[i] = np.int64(fnv(word_bytes, word_at[i], word_at[i + 1])) & (size - 1)
    table = np.full(size, -1, np.int32)
    slots = placed(first, size)
    for i in range(len(first)):
        table[slots[i]] = i
    return table


@numba.njit(cache=True)
def input_rows(data, ends, table, word_bytes, word_at, nwords, bucket, ngrams):
    """Each document's input rows (module docstring), document i's data[ends[i - 1]:ends[i]] (from 0 for
    the first): (rows, at, tokens), document i's rows rows[at[i]:at[i + 1]], and the tokens it counts
    for the learning rate's schedule (its own and `</s>`; the caller adds its label)."""
    n_docs = len(ends)
    bound = (len(data) // 2 + 2 * n_docs) * max(ngrams, 1)  # tokens <= bytes / 2 + 1 per document
    rows = np.empty(bound, np.int32)
    at = np.zeros(n_docs + 1, np.int64)
    tokens = np.zeros(n_docs, np.int64)
    hashes = np.empty(len(data) // 2 + 2, np.int64)
    count = 0
    start = 0
    for d in range(n_docs):
        line = data[start : ends[d]]
        start = ends[d]
        n = len(line)
        n_hashes = 0
        i = 0
        buffer = np.empty(n + 5, np.uint8)  # a token at buffer[1:], as the reader reads it
        while True:  # the tokens as the reader reads them (Dictionary::readWord)
            i, size = next_token(line, i, buffer)
            token = buffer[1 : size + 1]
            tokens[d] += 1
            end = same(token, EOS_BYTES)
            if not end and is_label(token):
                continue  # fastText's label, not a word
            h = fnv(token, 0, len(token))
            wid = word_id(token, h, table, word_bytes, word_at)
            if wid >= 0:
                rows[count] = wid
                count += 1
            hashes[n_hashes] = np.int64(np.int32(h))  # fastText keeps the hash as an int32
            n_hashes += 1
            if end:
                break
        for a in range(n_hashes):
            h = np.uint64(hashes[a])
            for b in range(a + 1, min(n_hashes, a + ngrams)):
                h = h * NGRAM_MULTIPLIER + np.uint64(hashes[b])
                rows[count] = nwords + np.int64(h % np.uint64(bucket))
                count += 1
        at[d + 1] = count
    return rows[:count].copy(), at, tokens


@numba.njit(cache=True)
def initial_input(rows, dim, seed):
    """The input matrix fastText starts from: uniform in [-1/dim, 1/dim), element k from splitmix64 of
    (seed, k), so any seed gives the same matrix on any machine."""
    wi = np.empty((rows, dim), np.float32)
    flat = wi.reshape(-1)
    base = _mix64(np.uint64(seed) + np.uint64(0x9E3779B97F4A7C15))
    scale = 2.0 / dim / (1 << 24)
    for k in range(len(flat)):
        x = _mix64(base + np.uint64(k))
        flat[k] = np.float32(np.float64(x >> np.uint64(40)) * scale - 1.0 / dim)
    return wi


@numba.njit(cache=True, nogil=True)
def _hidden(rows, wi, hidden):
    """hidden = the mean of wi's `rows` (Model::computeHidden, in float32)."""
    hidden[:] = 0
    for r in rows:
        for k in range(len(hidden)):
            hidden[k] += wi[r, k]
    scale = np.float32(1.0 / len(rows))
    for k in range(len(hidden)):
        hidden[k] *= scale


@numba.njit(cache=True, nogil=True)
def _softmax(wo, hidden, output):
    """output = softmax(wo . hidden) (SoftmaxLoss::computeOutput, in float32)."""
    for i in range(len(output)):
        f = np.float32(0.0)
        for k in range(len(hidden)):
            f += wo[i, k] * hidden[k]
        output[i] = f
    top = output.max()
    z = np.float32(0.0)
    for i in range(len(output)):
        output[i] = np.exp(output[i] - top)
        z += output[i]
    for i in range(len(output)):
        output[i] /= z


@numba.njit(cache=True, nogil=True)
def _train_steps(rows, at, labels, order, wi, wo, lr, tokens, total, step, done, most):
    """SGD from step `step` on (document order[step % len(order)]: the order again each epoch), wi and wo
    updated in place, until `most` more tokens are done or all `total` are; the learning rate falls from
    lr to 0 as the tokens done (`tokens` per document) go to `total`. Returns (step, done) to go on from."""
    dim, n_labels = wi.shape[1], wo.shape[0]
    hidden = np.empty(dim, np.float32)
    grad = np.empty(dim, np.float32)
    output = np.empty(n_labels, np.float32)
    until = min(total, done + most)
    while done < until:
        d = order[step % len(order)]
        step += 1
        rate = np.float32(lr * (1.0 - done / total))
        done += tokens[d]
        inputs = rows[at[d] : at[d + 1]]
        if len(inputs) == 0:
            continue
        _hidden(inputs, wi, hidden)
        _softmax(wo, hidden, output)
        grad[:] = 0
        for i in range(n_labels):
            alpha = rate * ((np.float32(1.0) if i == labels[d] else np.float32(0.0)) - output[i])
            for k in range(dim):
                grad[k] += alpha * wo[i, k]
            for k in range(dim):
                wo[i, k] += alpha * hidden[k]
        scale = np.float32(1.0 / len(inputs))
        for k in range(dim):
            grad[k] *= scale
        for r in inputs:
            for k in range(dim):
                wi[r, k] += grad[k]
    return step, done


def _train_share(rows, at, labels, order, wi, wo, lr, epochs, tokens, stop: threading.Event | None) -> None:
    """SGD over documents `order`, `epochs` times in that order, in compiled calls of STEP_TOKENS tokens
    each: between two, a signal is handled (in the main thread) or `stop` is seen (in another)."""
    total = int(tokens[order].sum()) * epochs
    step = done = 0
    while done < total and not (stop is not None and stop.is_set()):
        step, done = _train_steps(rows, at, labels, order, wi, wo, lr, tokens, total, step, done, STEP_TOKENS)


def train(rows, at, labels, order, wi, wo, lr: float, epochs: int, tokens, workers: int) -> None:
    """SGD over the documents in `order`, wi and wo updated in place: by one worker (deterministic), or
    by `workers` threads each over a contiguous share of `order`, hogwild (module docstring). A signal
    (Ctrl-C, SIGTERM) stops it within a compiled call's time."""
    if workers == 1:
        _train_share(rows, at, labels, order, wi, wo, lr, epochs, tokens, None)
        return
    stop = threading.Event()
    threads = [
        threading.Thread(target=_train_share, args=(rows, at, labels, share, wi, wo, lr, epochs, tokens, stop))
        for share in np.array_split(order, workers)
    ]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()  # in the main thread: a signal's handler runs here, and may raise
    finally:
        stop.set()
        for t in threads:
            t.join()


@numba.njit(cache=True)
def probabilities(rows, at, wi, wo):
    """Each label's probability for each document ([documents, labels], float32): softmax(wo . the
    mean of its rows), as fastText's `predict` computes it; 0 for a document without rows."""
    n_docs = len(at) - 1
    out = np.zeros((n_docs, wo.shape[0]), np.float32)
    hidden = np.empty(wi.shape[1], np.float32)
    for d in range(n_docs):
        inputs = rows[at[d] : at[d + 1]]
        if len(inputs) > 0:
            _hidden(inputs, wi, hidden)
            _softmax(wo, hidden, out[d])
    return out
