"""A fastText classifier's probability of one label for each text, compiled (numba): what `ptk score`
and the `classifier` filter step compute with a `.bin` or `.ftz` model.

    model = FastTextClassifier.load(Path("dclm.bin"))     # any supervised fastText model
    model.labels                                          # ['__label__hq', '__label__cc']
    probabilities = model.probabilities(texts, label=0)   # float64 array, one per text

A text is read as DCLM applies its classifier: every line feed replaced by a space, so the whole
document is one line (fastText's `predict` stops at the first). The probability is the one that
fastText's `predict(text, k=-1)` reports for the label (within 1e-4; the tests compare them): the
computation is fastText's, as in `pretrainkit.dataprep.classifiers.fasttext_model` (whose dictionary,
n-gram and quantized-row code this reuses), for every supervised model a user trains:
- input matrix dense (`.bin`, mapped from the file, not read: DCLM's is gigabytes) or product-quantized
  (`.ftz`), its n-grams pruned or not;
- word n-grams (`-wordNgrams 2`, DCLM's bigrams): after the tokens' rows, for every n-gram of
  consecutive word tokens (the end-of-line token "</s>" included) the bucket of
  `h = h * 116049371 + hash(next)`, each token's FNV-1a hash sign-extended from 32 bits
  (`Dictionary::addWordNgrams`);
- the output: softmax (fastText's default for supervised models), one-vs-all or negative sampling
  (a sigmoid per label), or hierarchical softmax (the product of the branch probabilities on the
  label's path, each `p + 1e-5` as fastText's `std_log` takes it).
A dense model of few labels (a quality classifier: DCLM's has two) is read faster than fastText
reads it: the model is linear up to its output, so each input row's logits (its products with the
output rows) are computed once as it loads (`_projected`, float64), and a text's logits are the mean
of its rows' logits, a few numbers a row where fastText adds up `dim` (the rows a text reads are
spread over a matrix of gigabytes: memory, not arithmetic, is the cost). The probabilities differ
from fastText's float32 sums by rounding only (~1e-7). Other models are computed as fastText does.
A text of which the model reads nothing (no token but the line's end, and "</s>" not in the model)
gets fastText's empty prediction: probability 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.classifiers.fasttext_model import (
    EOS_BYTES,
    SUPERVISED,
    Dictionary,
    ModelReader,
    add_rows,
    bucket_row,
    dictionary_of,
    fnv,
    huffman_tree,
    input_rows,
    is_label,
    kept_ngrams,
    next_token,
    quantized_matrix,
    same,
    vocabulary,
    word_id,
)
from pretrainkit.errors import UserError

# isort: split
import numba  # noqa: E402  (after fasttext_model, which sets numba's cache directory)

HIERARCHICAL_SOFTMAX, NEGATIVE_SAMPLING, SOFTMAX, ONE_VS_ALL = 1, 2, 3, 4  # fastText's loss_name
NGRAM_PRIME = np.uint64(116049371)  # Dictionary::addWordNgrams
# A dense model's rows are projected onto its output rows where these are at most dim / PROJECTED_SHARE
# (a classifier of a few labels: DCLM's has 2, of dim 256): each row is then a few numbers, not dim.
PROJECTED_SHARE = 4


@numba.njit(cache=True)
def _signed(h):
    """A token's hash as fastText's `std::vector<int32_t>` of hashes holds it, read back as uint64."""
    x = np.int64(h)
    if x >= 2147483648:
        x -= 4294967296
    return np.uint64(x)


@numba.njit(cache=True)
def _line_rows(line, ints, words, rows, hashes):
    """The input rows fastText's `getLine` gives for `line` (UTF-8 bytes, no line feed) into `rows`:
    every word token's own and n-gram rows, then "</s>"'s, then the word n-grams' (`hashes`: room for
    a hash per token); returns how many."""
    minn, maxn, bucket, nwords, word_ngrams = ints[0], ints[1], ints[2], ints[3], ints[5]
    table, word_bytes, word_at, sub_rows, sub_at, kept_bits, prune_keys, prune_values = words
    n = len(line)
    buffer = np.empty(n + 6, np.uint8)  # "<" + a token (or "</s>") + ">": the token's n-grams' word
    buffer[0] = 60
    count, tokens, i = 0, 0, 0
    while True:
        i, size = next_token(line, i, buffer)
        token = buffer[1 : size + 1]
        end = same(token, EOS_BYTES)  # fastText stops at "</s>", even one in the text
        h = fnv(token, 0, size)
        wid = word_id(token, h, table, word_bytes, word_at)
        if wid >= 0:
            if wid < nwords:  # else a label of the vocabulary: no input, no word
                for r in sub_rows[sub_at[wid] : sub_at[wid + 1]]:
                    rows[count] = r
                    count += 1
                hashes[tokens] = h
                tokens += 1
        elif not is_label(token):
            if not end and maxn > 0:  # (a model of neither n-grams has no buckets)
                buffer[size + 1] = 62
                count += kept_ngrams(
                    buffer[: size + 2], minn, maxn, bucket, nwords, kept_bits, prune_keys, prune_values, rows[count:]
                )
            hashes[tokens] = h
            tokens += 1
        if end:
            break
    buckets = np.uint64(bucket)
    for a in range(tokens):
        g = _signed(hashes[a])
        for b in range(a + 1, min(tokens, a + word_ngrams)):
            g = g * NGRAM_PRIME + _signed(hashes[b])
            row = bucket_row(np.int64(g % buckets), nwords, kept_bits, prune_keys, prune_values)
            if row >= 0:
                rows[count] = row
                count += 1
    return count


@numba.njit(cache=True)
def _dot(weights, hidden):
    f = np.float32(0.0)
    for d in range(len(hidden)):
        f += weights[d] * hidden[d]
    return f


@numba.njit(cache=True)
def _sigmoid(f):
    return np.float32(1.0 / (np.float32(1.0) + np.exp(-f)))


SIGMOID_TABLE_SIZE, MAX_SIGMOID = 512, 8
# `Loss::sigmoid`'s table, which one-vs-all and negative sampling read (hierarchical softmax computes exp)
_SIGMOID_TABLE = np.array(
    [
        1.0 / (1.0 + math.exp(-(np.float32(i * 2 * MAX_SIGMOID) / SIGMOID_TABLE_SIZE - MAX_SIGMOID)))
        for i in range(SIGMOID_TABLE_SIZE + 1)
    ],
    np.float32,
)


@numba.njit(cache=True)
def _table_sigmoid(f):
    if f < -MAX_SIGMOID:
        return np.float32(0.0)
    if f > MAX_SIGMOID:
        return np.float32(1.0)
    return _SIGMOID_TABLE[np.int64((f + np.float32(MAX_SIGMOID)) * np.float32(SIGMOID_TABLE_SIZE / MAX_SIGMOID / 2))]


@numba.njit(cache=True)
def _label_probability(logits, loss, label, path):
    """The probability of `label` given `logits`, output row k's product with the averaged hidden
    vector (`Loss::computeOutput`, in float32 as fastText's); `path`: for hierarchical softmax, the
    label's (inner node, 1 for its right branch) from the root down."""
    if loss == SOFTMAX:
        scores = logits.astype(np.float32)
        top = scores.max()
        z = np.float32(0.0)
        for i in range(len(scores)):
            scores[i] = np.exp(scores[i] - top)
            z += scores[i]
        return np.float64(scores[label] / z)
    if loss == HIERARCHICAL_SOFTMAX:
        labels = len(logits)  # the tree's inner node `labels + k` has row k
        score = np.float32(0.0)
        for k in range(len(path)):
            f = _sigmoid(np.float32(logits[path[k, 0] - labels]))
            p = f if path[k, 1] else np.float32(1.0 - np.float64(f))
            score += np.float32(math.log(np.float64(p) + 1e-5))  # std_log, as the search sums it
        return np.float64(np.float32(np.exp(score)))
    return np.float64(_table_sigmoid(np.float32(logits[label])))  # one-vs-all, negative sampling


@numba.njit(cache=True)
def _probabilities(data, ends, ints, words, projected, quantized, dense, output, loss, label, path):
    """`_label_probability` of each line, line i data[ends[i - 1]:ends[i]] (from 0 for the first), its
    logits from the first of these that has rows: `projected` (each input row's logits: their mean is
    the line's), `quantized` (`input_rows`: the hidden vector, as fastText adds the rows), `dense`."""
    dim = ints[4]
    out = np.empty(len(ends), np.float64)
    logits = np.empty(len(output), np.float64)
    hidden = np.empty(dim, np.float32)
    start = 0
    for i in range(len(ends)):
        line = data[start : ends[i]]
        start = ends[i]
        # a token's rows: its own, its n-grams' (up to its bytes + 2 per n), its word n-grams'
        room = (2 * len(line) + 8) * (max(ints[1] - ints[0] + 1, 1) + ints[5]) + 8
        rows = np.empty(room, np.int64)
        hashes = np.empty(len(line) + 2, np.uint32)
        count = _line_rows(line, ints, words, rows, hashes)
        if count == 0:
            out[i] = 0.0
            continue
        if len(projected):
            logits[:] = 0.0
            for r in rows[:count]:
                for k in range(len(logits)):
                    logits[k] += projected[r, k]
            logits /= count
        else:
            hidden[:] = 0.0
            if len(quantized[0]):
                add_rows(hidden, quantized, rows[:count])
            else:
                for r in rows[:count]:
                    row = dense[r]
                    for d in range(dim):
                        hidden[d] += row[d]
            scale = np.float32(1.0 / count)
            for d in range(dim):
                hidden[d] *= scale
            for k in range(len(logits)):
                logits[k] = _dot(output[k], hidden)
        out[i] = _label_probability(logits, loss, label, path)
    return out


@numba.njit(cache=True)
def _projected(dense, output):
    """Each input row's logits (its product with every output row), summed in float64: a line's logits
    are the mean of its rows' (the model is linear up to its output), so a line reads len(output)
    numbers per row rather than dim. One pass over the mapped matrix."""
    projected = np.empty((len(dense), len(output)), np.float64)
    weights = output.astype(np.float64)
    for r in range(len(dense)):
        row = dense[r]
        for k in range(len(weights)):
            total = 0.0
            for d in range(len(row)):
                total += row[d] * weights[k, d]
            projected[r, k] = total
    return projected


def _label_paths(counts: list[int]) -> list[np.ndarray]:
    """Each label's path in the hierarchical softmax's tree (`huffman_tree`): (inner node, 1 for a
    right branch) from the root down."""
    left, right = huffman_tree(counts)
    parent = {}
    for node in range(len(left)):
        if left[node] >= 0:
            parent[int(left[node])], parent[int(right[node])] = (node, 0), (node, 1)
    paths = []
    for leaf in range(len(counts)):
        steps, at = [], leaf
        while at in parent:
            node, branch = parent[at]
            steps.append((node, branch))
            at = node
        paths.append(np.array(steps[::-1], np.int64).reshape(-1, 2))
    return paths


@dataclass(frozen=True)
class ModelFile:
    """What a classifier's file holds, read and checked; its dense matrix a view of the mapped file."""

    ints: np.ndarray  # minn, maxn, bucket, nwords, dim, wordNgrams
    words: Dictionary
    pruned: np.ndarray | None  # (bucket, row) of the n-grams a pruned model kept; None: never pruned
    dense: np.ndarray  # [rows, dim]; no rows for a quantized model
    quantized: tuple  # `fasttext_model.input_rows` of a quantized model; a placeholder (no codes) for a dense one
    output: np.ndarray  # [labels, dim] (hierarchical softmax: a row per inner node of the tree)
    loss: int


def read_model_file(path: Path) -> ModelFile:
    """Model file `path` in FastText::loadModel's order of fields, each part's size checked against its
    dictionary's (a dense matrix is mapped, not read: seconds less for gigabytes, so a run checks its
    models this way before it writes anything); a file that is no supervised fastText model, or is cut
    short: a UserError naming it."""
    r = ModelReader(path)
    (dim, word_ngrams, loss, model, bucket, minn, maxn, nwords, nlabels, prune_size), words = dictionary_of(r)
    if model != SUPERVISED:
        raise UserError(f"{path}: a fastText word-vector model, not a classifier (trained with `supervised`)")
    if loss not in (HIERARCHICAL_SOFTMAX, NEGATIVE_SAMPLING, SOFTMAX, ONE_VS_ALL):
        raise UserError(f"{path}: not a readable fastText model (unknown loss {loss})")
    pruned = r.array(np.int32, 2 * prune_size).reshape(-1, 2) if prune_size >= 0 else None
    ints = np.array([minn, maxn, bucket, nwords, dim, max(word_ngrams, 1)], np.int64)
    (quant_input,) = r.take("?")
    if quant_input:
        rows_n, cols, codes, pq, norms = quantized_matrix(r)
        dense, quantized = np.zeros((0, dim), np.float32), input_rows(codes, pq, norms)
    else:
        rows_n, cols = r.take("qq")
        dense = r.view(np.float32, rows_n * cols).reshape(rows_n, cols)
        quantized = input_rows(np.zeros((0, 1), np.uint8), (np.zeros(256, np.float32), 1, 1, 1, 1), None)
    (qout,) = r.take("?")
    if qout:
        raise UserError(f"{path}: a fastText model this reader does not run (its output matrix is quantized)")
    out_rows, out_cols = r.take("qq")
    output = r.array(np.float32, out_rows * out_cols).reshape(out_rows, out_cols)
    expected_rows = nwords + (len(pruned) if pruned is not None else bucket)
    if (cols, out_cols, rows_n, out_rows, r.at) != (dim, dim, expected_rows, nlabels, len(r.data)):
        raise UserError(f"{path}: not a readable fastText model (its matrices do not match its dictionary)")
    return ModelFile(ints, words, pruned, dense, quantized, output, loss)


@dataclass(frozen=True)
class FastTextClassifier:
    path: Path
    labels: list[str]  # as the file names them: "__label__hq"
    ints: np.ndarray  # minn, maxn, bucket, nwords, dim, wordNgrams
    words: tuple  # `fasttext_model.vocabulary`
    dense: np.ndarray  # [rows, dim], a view of the mapped file; no rows for a quantized model
    quantized: tuple  # `fasttext_model.input_rows` of a quantized model; a placeholder for a dense one
    projected: np.ndarray  # [rows, labels]: `_projected` of a dense model of few labels; else no rows
    output: np.ndarray  # [labels, dim] (hierarchical softmax: a row per inner node of the tree)
    loss: int
    paths: list[np.ndarray]  # per label, for hierarchical softmax; empty paths otherwise

    @classmethod
    def load(cls, path: Path) -> FastTextClassifier:
        """The model of file `path` (`read_model_file`), ready to score."""
        f = read_model_file(path)
        few = not len(f.quantized[0]) and len(f.output) <= f.ints[4] // PROJECTED_SHARE
        return cls(
            path=path,
            labels=f.words.labels(),
            ints=f.ints,
            words=vocabulary(f.words, f.ints, f.pruned),
            dense=f.dense,
            quantized=f.quantized,
            projected=_projected(f.dense, f.output) if few else np.zeros((0, len(f.output)), np.float64),
            output=f.output,
            loss=f.loss,
            paths=_label_paths(f.words.label_counts())
            if f.loss == HIERARCHICAL_SOFTMAX
            else [np.zeros((0, 2), np.int64)] * len(f.words.label_counts()),
        )

    def probabilities(self, texts: list[str], label: int) -> np.ndarray:
        """The probability of `self.labels[label]` for each text, each read as one line."""
        encoded = [text.replace("\n", " ").encode("utf-8", "replace") for text in texts]
        ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
        data = np.frombuffer(b"".join(encoded), np.uint8)
        return _probabilities(
            data,
            ends,
            self.ints,
            self.words,
            self.projected,
            self.quantized,
            self.dense,
            self.output,
            self.loss,
            label,
            self.paths[label],
        )
