"""A fastText supervised model file read into arrays, and its best label for a line, compiled (numba).

    model = FastTextModel.load(path)        # lid.176.ftz: quantized, hierarchical softmax
    label, score = model.predict(line)     # ('__label__de', 0.99870...): what fastText's predict(line) gives
    labels = model_labels(path)            # ['__label__en', ...]: its labels alone, in milliseconds

The language step calls this once or more per document, so its cost is the step's: fastText's own
C++ `predict` (the fasttext-predict package) builds a string per character n-gram and looks each up
in a hash map, ~0.1 us per character of the line; this reads the same model and computes the same
numbers 2.6-3.2x faster on the samples the step reads, with no extension module of its own.

The computation is fastText's (https://github.com/facebookresearch/fastText, src/), step by step in
the same float32 operations and order, so labels and scores equal those of fasttext-predict (the
tests compare them on real documents in 23 languages):
- Tokens: the line split at ASCII whitespace and NUL (`Dictionary::readWord`), then the end-of-line
  token `</s>` (the line feed fastText's `predict` appends).
- Each token in the vocabulary: its row and its character n-grams' rows, as the model file's
  dictionary made them (`Dictionary::initNgrams`); any other token: the rows of its n-grams of
  `minn`..`maxn` characters of `<token>` (`computeSubwords`: FNV-1a of the bytes, read as signed
  chars, modulo `bucket`), those the pruned model kept (`pruneidx`); a token that starts with
  `__label__` and is no word of the vocabulary is skipped, as fastText takes it for a label.
- Hidden vector: the average of those rows of the (product-quantized) input matrix
  (`QuantMatrix::averageRowsToVector`).
- Output: hierarchical softmax, the Huffman tree of the labels' counts (`buildTree`), searched depth
  first for the best leaf with fastText's pruning (`HierarchicalSoftmaxLoss::dfs`, k = 1, threshold
  0); the score is exp of the leaf's summed log-probabilities, each log of (p + 1e-5) (`std_log`).

Only what a released language-ID model uses is read: a supervised model (`-model sup`) with
hierarchical softmax, one word per n-gram (`wordNgrams` 1), a quantized input matrix and a plain
output matrix (`-qout` off), its n-grams pruned (`-cutoff`); any other file is a UserError naming it.
"""

from __future__ import annotations

import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.kernels import numba_cache as _cache  # noqa: F401  (numba's cache directory, before numba loads)
from pretrainkit.errors import UserError

# isort: split
import numba  # noqa: E402

MAGIC = 793712314
VERSIONS = (11, 12)
SUPERVISED, HIERARCHICAL_SOFTMAX = 3, 1  # args' model_name::sup, loss_name::hs
LABEL = 1  # a dictionary entry's type: 0 a word, 1 a label
EOS = b"</s>"
EOS_BYTES = np.frombuffer(EOS, np.uint8)
LABEL_BYTES = np.frombuffer(b"__label__", np.uint8)
KSUB = 256  # centroids per sub-quantizer (ProductQuantizer::ksub_)
_FNV_OFFSET, _FNV_PRIME = np.uint32(2166136261), np.uint32(16777619)
_LOG_OF_ZERO = np.float32(math.log(1e-5))  # std_log(threshold 0): the dfs prunes below it


class ModelReader:
    """Little-endian fields of a model file, in order; a short file is a UserError naming it. The file
    is mapped, not read: a quality classifier's dense matrix (gigabytes) is then a view of the page
    cache that every worker shares (`view`)."""

    def __init__(self, path: Path):
        with open(path, "rb") as f:
            empty = f.seek(0, 2) == 0  # mmap refuses an empty file
            data = b"" if empty else mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.path, self.data, self.at = path, data, 0

    def take(self, fmt: str) -> tuple:
        size = struct.calcsize(fmt)
        if self.at + size > len(self.data):
            raise UserError(f"{self.path}: not a readable fastText model (it ends at byte {len(self.data)})")
        values = struct.unpack_from("<" + fmt, self.data, self.at)
        self.at += size
        return values

    def array(self, dtype, count: int) -> np.ndarray:
        size = np.dtype(dtype).itemsize * count
        if self.at + size > len(self.data):
            raise UserError(f"{self.path}: not a readable fastText model (it ends at byte {len(self.data)})")
        values = np.frombuffer(self.data, dtype, count, self.at).copy()
        self.at += size
        return values

    def view(self, dtype, count: int) -> np.ndarray:
        """`array`, read-only and not copied: the mapped file's pages."""
        size = np.dtype(dtype).itemsize * count
        if self.at + size > len(self.data):
            raise UserError(f"{self.path}: not a readable fastText model (it ends at byte {len(self.data)})")
        values = np.frombuffer(self.data, dtype, count, self.at)
        self.at += size
        return values


def _quantizer(r: ModelReader) -> tuple[np.ndarray, int, int, int, int]:
    """A ProductQuantizer: (centroids, dim, nsubq, dsub, lastdsub)."""
    dim, nsubq, dsub, lastdsub = r.take("4i")
    return r.array(np.float32, dim * KSUB), dim, nsubq, dsub, lastdsub


def quantized_matrix(r: ModelReader) -> tuple:
    """A QuantMatrix: (rows, cols, codes [rows, nsubq], quantizer, norms [rows] or None)."""
    (qnorm,) = r.take("?")
    rows, cols, codesize = r.take("qqi")
    codes = r.array(np.uint8, codesize)
    pq = _quantizer(r)
    norms = None
    if qnorm:
        norm_codes = r.array(np.uint8, rows)
        norm_centroids = _quantizer(r)[0]  # one dimension: a centroid is one number
        norms = norm_centroids[norm_codes]
    return rows, cols, codes.reshape(rows, pq[2]), pq, norms


def input_rows(codes: np.ndarray, pq: tuple, norms: np.ndarray | None) -> tuple:
    """The input matrix as `add_rows` reads it: (codes [rows, nsubq], centroids [nsubq, KSUB, dsub],
    the last sub-quantizer's padded past lastdsub, norms [rows], 1 where the file has none). Its rows
    stay encoded, 8 bytes each for lid.176 rather than 64 decoded: the rows a line reads are spread
    over the matrix, and this way they stay in the processor's caches."""
    centroids, _, nsubq, dsub, lastdsub = pq
    table = np.zeros((nsubq, KSUB, dsub), np.float32)
    for m in range(nsubq):
        d = lastdsub if m == nsubq - 1 else dsub
        table[m, :, :d] = centroids[m * KSUB * dsub : m * KSUB * dsub + KSUB * d].reshape(KSUB, d)
    return codes, table, norms if norms is not None else np.ones(len(codes), np.float32)


@numba.njit(cache=True)
def _fnv_step(h, byte):
    """FNV-1a's step as fastText takes it: the byte as a signed char, sign-extended."""
    b = np.int64(byte)
    if b >= 128:
        b -= 256
    return np.uint32((h ^ np.uint32(b & 0xFFFFFFFF)) * _FNV_PRIME)  # numba widens a product: wrapped here


@numba.njit(cache=True)
def fnv(data, start, end):
    h = _FNV_OFFSET
    for i in range(start, end):
        h = _fnv_step(h, data[i])
    return h


@numba.njit(cache=True)
def _modulo(h, bucket, inverse):
    """h % bucket, by a multiplication rather than a 64-bit division (several times slower, and an
    n-gram's bucket is the most frequent operation here); `inverse` is 1 / bucket."""
    q = np.int64(np.float64(h) * inverse)
    r = np.int64(h) - q * bucket
    if r < 0:
        r += bucket
    elif r >= bucket:
        r -= bucket
    return r


# inline="always": the small helpers of the hot loops are inlined by numba itself (as LLVM left them,
# language ID read 1000-character samples 10-15% slower than with the code written out in the loops).
@numba.njit(cache=True, inline="always")
def bucket_row(key, nwords, kept_bits, prune_keys, prune_values):
    """The input row of n-gram bucket `key` (`Dictionary::pushHash`), -1 where the pruned model did not
    keep it. Most n-grams were not kept: a bit per bucket (256 KB for lid.176, in the processor's cache)
    says which were, so the table is read for those only. No bits (`kept_bits` empty): a model never
    pruned, which keeps every bucket, at row nwords + key."""
    if len(kept_bits) == 0:
        return nwords + key
    if (kept_bits[key >> 6] >> np.uint64(key & 63)) & np.uint64(1):
        mask = len(prune_keys) - 1
        slot = (key * 2654435761) & mask
        while prune_keys[slot] != key:  # in the table: its bit is set
            slot = (slot + 1) & mask
        return nwords + prune_values[slot]
    return -1


@numba.njit(cache=True)
def kept_ngrams(word, minn, maxn, bucket, nwords, kept_bits, prune_keys, prune_values, out):
    """`computeSubwords` of `word` (the bytes of "<token>"): the rows of the n-grams the model kept
    (`bucket_row`), written to `out` (room for len(word) * (maxn - minn + 1)); returns how many. An
    n-gram's hash continues the hash of the one before it, one character shorter, as FNV-1a over its
    bytes does."""
    n_bytes = len(word)
    inverse = 1.0 / bucket
    count = 0
    for i in range(n_bytes):
        if (word[i] & 0xC0) == 0x80:
            continue
        h = _FNV_OFFSET
        j = i
        n = 1
        while j < n_bytes and n <= maxn:
            h = _fnv_step(h, word[j])
            j += 1
            while j < n_bytes and (word[j] & 0xC0) == 0x80:
                h = _fnv_step(h, word[j])
                j += 1
            if n >= minn and not (n == 1 and (i == 0 or j == n_bytes)):
                row = bucket_row(_modulo(h, bucket, inverse), nwords, kept_bits, prune_keys, prune_values)
                if row >= 0:
                    out[count] = row
                    count += 1
            n += 1
    return count


@numba.njit(cache=True)
def same(a, b):
    if len(a) != len(b):
        return False
    for k in range(len(a)):
        if a[k] != b[k]:
            return False
    return True


@numba.njit(cache=True)
def add_rows(hidden, rows, which):
    """hidden += each row of `which`, in order, as `ProductQuantizer::addcode` adds it (each element
    norm * centroid in float32, then the sum); `rows` as `input_rows` gives it. Returns how many."""
    codes, centroids, norms = rows
    dim = len(hidden)
    dsub = centroids.shape[2]
    for r in which:
        norm = norms[r]
        for m in range(codes.shape[1]):
            c = centroids[m, codes[r, m]]
            for k in range(min(dsub, dim - m * dsub)):
                hidden[m * dsub + k] += norm * c[k]
    return len(which)


@numba.njit(cache=True)
def is_space(b):
    return b == 32 or b == 10 or b == 13 or b == 9 or b == 11 or b == 12 or b == 0


@numba.njit(cache=True, inline="always")
def next_token(line, i, buffer):
    """The token of `line` from byte `i` on (`Dictionary::readWord`: bytes up to a space), copied to
    buffer[1:], or "</s>" at the line's end: (where the next token starts looking, its size)."""
    n = len(line)
    while i < n and is_space(line[i]):
        i += 1
    if i == n:  # the line's end: "</s>", the last token
        buffer[1:5] = EOS_BYTES
        return i, 4
    start = i
    while i < n and not is_space(line[i]):
        i += 1
    buffer[1 : i - start + 1] = line[start:i]
    return i, i - start


@numba.njit(cache=True, inline="always")
def word_id(token, h, table, word_bytes, word_at):
    """The dictionary entry of `token` (its hash `h`), found in the open addressing `table`; -1 for none."""
    mask = len(table) - 1
    slot = np.int64(h) & mask
    while table[slot] != -1:
        w = table[slot]
        if same(token, word_bytes[word_at[w] : word_at[w + 1]]):
            return w
        slot = (slot + 1) & mask
    return -1


@numba.njit(cache=True)
def is_label(token):
    """Whether a token no vocabulary holds is a label to fastText (it starts with `__label__`): no input."""
    return len(token) >= len(LABEL_BYTES) and same(token[: len(LABEL_BYTES)], LABEL_BYTES)


@numba.njit(cache=True)
def _best_label(line, ints, words, rows, output, tree):
    """The best label's index and score for `line` (UTF-8 bytes, without the line feed), or (-1, 0)
    where no row is read. `ints`: [minn, maxn, bucket, nwords, dim]; `words`: (table, word bytes,
    word offsets, subword rows, subword offsets, kept n-grams' bits, prune keys, prune values); `rows`: the input matrix
    (`input_rows`); `output`: a row per inner node of `tree`, (left, right) per node, -1 for a leaf."""
    hidden = np.zeros(ints[4], np.float32)
    count = _add_line(line, ints, words, rows, hidden)
    if count == 0:
        return -1, np.float32(0.0)
    scale = np.float32(1.0 / count)
    for d in range(len(hidden)):
        hidden[d] *= scale
    return _best_leaf(hidden, output, tree[0], tree[1])


@numba.njit(cache=True)
def _best_labels(data, ends, ints, words, rows, output, tree):
    """`_best_label` of each line, line i data[ends[i - 1]:ends[i]] (from 0 for the first)."""
    best = np.empty(len(ends), np.int64)
    scores = np.empty(len(ends), np.float64)
    start = 0
    for i in range(len(ends)):
        b, s = _best_label(data[start : ends[i]], ints, words, rows, output, tree)
        best[i], scores[i] = b, s
        start = ends[i]
    return best, scores


@numba.njit(cache=True)
def _add_line(line, ints, words, rows, hidden):
    """Adds to `hidden` the rows of every token of `line`, then of "</s>"; returns how many."""
    minn, maxn, bucket, nwords = ints[0], ints[1], ints[2], ints[3]
    table, word_bytes, word_at, sub_rows, sub_at, kept_bits, prune_keys, prune_values = words
    n = len(line)
    buffer = np.empty(n + 6, np.uint8)  # "<" + a token (or "</s>") + ">": the token's n-grams' word
    buffer[0] = 60
    found = np.empty((n + 6) * max(maxn - minn + 1, 1), np.int32)
    count = 0
    i = 0
    while True:
        i, size = next_token(line, i, buffer)
        token = buffer[1 : size + 1]
        end = same(token, EOS_BYTES)  # fastText stops at "</s>", even one in the text
        wid = word_id(token, fnv(token, 0, size), table, word_bytes, word_at)
        if wid >= 0:
            if wid < nwords:  # else a label of the vocabulary: no input
                count += add_rows(hidden, rows, sub_rows[sub_at[wid] : sub_at[wid + 1]])
        elif not end and not is_label(token):
            buffer[size + 1] = 62
            kept = kept_ngrams(
                buffer[: size + 2], minn, maxn, bucket, nwords, kept_bits, prune_keys, prune_values, found
            )
            count += add_rows(hidden, rows, found[:kept])
        if end:
            return count


@numba.njit(cache=True)
def _best_leaf(hidden, output, left, right):
    """`HierarchicalSoftmaxLoss::dfs` with k = 1 and threshold 0, its recursion as a stack (left
    child first): the best leaf and exp of its score."""
    nodes = len(left)
    labels = (nodes + 1) // 2
    stack_node = np.empty(nodes, np.int32)
    stack_score = np.empty(nodes, np.float32)
    stack_node[0], stack_score[0] = nodes - 1, np.float32(0.0)
    top = 1
    best, best_score = -1, np.float32(0.0)
    while top > 0:
        top -= 1
        node, score = stack_node[top], stack_score[top]
        if score < _LOG_OF_ZERO or (best >= 0 and score < best_score):
            continue
        if left[node] == -1 and right[node] == -1:
            best, best_score = node, score  # a later leaf as good replaces the earlier, as fastText's heap does
            continue
        weights = output[node - labels]
        f = np.float32(0.0)
        for d in range(len(hidden)):
            f += weights[d] * hidden[d]
        f = np.float32(1.0 / (np.float32(1.0) + np.exp(-f)))
        # std_log takes a float: its argument rounded to float32, then log(x + 1e-5) in double
        right_score = score + np.float32(math.log(np.float64(f) + 1e-5))
        left_score = score + np.float32(math.log(np.float64(np.float32(1.0 - np.float64(f))) + 1e-5))
        stack_node[top], stack_score[top] = right[node], right_score
        stack_node[top + 1], stack_score[top + 1] = left[node], left_score
        top += 2
    return best, np.float32(np.exp(best_score))


def table_size(entries: int) -> int:
    """A power of two at least twice `entries`: open addressing at most half full."""
    return 1 << max(4, (2 * entries).bit_length())


@numba.njit(cache=True)
def placed(first_slots, size):
    """Where each entry lands in an open addressing table of `size` slots, the entries placed in order,
    each at the first free slot from its own on (linear probing, as the lookups probe)."""
    taken = np.zeros(size, np.bool_)
    slots = np.empty(len(first_slots), np.int64)
    mask = size - 1
    for i in range(len(first_slots)):
        slot = first_slots[i]
        while taken[slot]:
            slot = (slot + 1) & mask
        taken[slot] = True
        slots[i] = slot
    return slots


@numba.njit(cache=True)
def _dictionary(word_bytes, word_at, pruned, minn, maxn, bucket, nwords, kept_bits, tables):
    """The dictionary's arrays that `_add_line` probes (`vocabulary`), made in one compiled call (in
    Python they took ~50 ms of each worker's start): `pruned`'s buckets and rows as an open addressing
    table, the entries' indices in a table of their hashes (`tables`: the two tables' sizes), and each
    entry's rows as `initNgrams` makes them: its own, then its kept n-grams' (none for "</s>" or where
    maxn is 0)."""
    prune_keys, prune_values = np.full(tables[0], -1, np.int64), np.zeros(tables[0], np.int32)
    keys = pruned[:, 0].astype(np.int64)
    slots = placed((keys * 2654435761) & (tables[0] - 1), tables[0])
    for i in range(len(keys)):
        prune_keys[slots[i]], prune_values[slots[i]] = keys[i], pruned[i, 1]
    words = len(word_at) - 1
    first_slots = np.empty(words, np.int64)  # each word's hash, as `_add_line` probes from it
    for i in range(words):
        first_slots[i] = np.int64(fnv(word_bytes, word_at[i], word_at[i + 1])) & (tables[1] - 1)
    word_table = np.full(tables[1], -1, np.int32)
    slots = placed(first_slots, tables[1])
    for i in range(words):
        word_table[slots[i]] = i
    longest = 0
    for i in range(words):
        longest = max(longest, word_at[i + 1] - word_at[i])
    rows = np.empty(words + (word_at[words] + 2 * words) * max(maxn - minn + 1, 1), np.int32)
    at = np.zeros(words + 1, np.int64)
    bounded = np.empty(longest + 2, np.uint8)  # "<" + the word + ">"
    bounded[0] = 60
    count = 0
    for i in range(words):
        rows[count] = i
        count += 1
        word = word_bytes[word_at[i] : word_at[i + 1]]
        if maxn > 0 and not same(word, EOS_BYTES):
            size = len(word)
            bounded[1 : size + 1] = word
            bounded[size + 1] = 62
            count += kept_ngrams(
                bounded[: size + 2], minn, maxn, bucket, nwords, kept_bits, prune_keys, prune_values, rows[count:]
            )
        at[i + 1] = count
    return word_table, rows[:count].copy(), at, prune_keys, prune_values


def huffman_tree(counts: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """The hierarchical softmax's Huffman tree of the labels' counts, as fastText's `buildTree` makes
    it: (left child, right child) of each of its 2 * labels - 1 nodes, -1 for a leaf; the root last."""
    osz = len(counts)
    count = counts + [10**15] * (osz - 1)
    left, right = np.full(2 * osz - 1, -1, np.int32), np.full(2 * osz - 1, -1, np.int32)
    leaf, node = osz - 1, osz
    for i in range(osz, 2 * osz - 1):
        mini = []
        for _ in range(2):
            if leaf >= 0 and count[leaf] < count[node]:
                mini.append(leaf)
                leaf -= 1
            else:
                mini.append(node)
                node += 1
        left[i], right[i] = mini
        count[i] = count[mini[0]] + count[mini[1]]
    return left, right


def vocabulary(dictionary: Dictionary, ints: np.ndarray, pruned: np.ndarray | None) -> tuple:
    """The dictionary as `_add_line` reads it (its docstring lists the arrays): the entries' words in
    a hash table, each word's rows (its own and its kept n-grams', as `initNgrams` makes them), and the
    kept n-grams' buckets (`pruneidx`) as bits and as a table of their rows; `pruned` None for a model
    never pruned (`bucket_row`: no bits)."""
    minn, maxn, bucket, nwords = ints[:4].tolist()
    if pruned is None:
        kept_bits, pruned = np.zeros(0, np.uint64), np.zeros((0, 2), np.int32)
    else:
        kept_bits = np.zeros((bucket + 63) // 64, np.uint64)
        bits = np.left_shift(np.uint64(1), (pruned[:, 0] & 63).astype(np.uint64))
        np.bitwise_or.at(kept_bits, pruned[:, 0] >> 6, bits)
    word_bytes, word_at = dictionary.word_bytes, dictionary.word_at
    tables = np.array([table_size(len(pruned)), table_size(len(word_at) - 1)], np.int64)
    word_table, sub_rows, sub_at, prune_keys, prune_values = _dictionary(
        word_bytes, word_at, pruned, minn, maxn, bucket, nwords, kept_bits, tables
    )
    return (word_table, word_bytes, word_at, sub_rows, sub_at, kept_bits, prune_keys, prune_values)


@dataclass(frozen=True)
class Dictionary:
    """A model file's dictionary: entry i's word is word_bytes[word_at[i]:word_at[i + 1]]."""

    word_bytes: np.ndarray  # uint8
    word_at: np.ndarray  # int64, one more than the entries
    counts: np.ndarray  # int64
    kinds: np.ndarray  # int8: 0 a word, LABEL a label

    def labels(self) -> list[str]:
        """The labels ("__label__de", ...), in the dictionary's order."""
        at = self.word_at
        return [
            self.word_bytes[at[i] : at[i + 1]].tobytes().decode("utf-8", "replace")
            for i in np.flatnonzero(self.kinds == LABEL)
        ]

    def label_counts(self) -> list[int]:
        return self.counts[self.kinds == LABEL].tolist()


@numba.njit(cache=True)
def _entries(data, at, size):
    """`size` dictionary entries from byte `at` (each its word, a NUL, its count as int64 and its type as
    int8: `Dictionary::load`), in one compiled pass (a Python loop took ~3 us an entry: seconds for the
    millions of words of a classifier trained on a crawl): (word bytes, word offsets, counts, types, the
    byte after the last entry; -1 there where the file ends first)."""
    word_at = np.zeros(size + 1, np.int64)
    counts = np.zeros(size, np.int64)
    kinds = np.zeros(size, np.int8)
    starts = np.zeros(size, np.int64)
    for i in range(size):
        end = at
        while end < len(data) and data[end] != 0:
            end += 1
        if end + 10 > len(data):
            return np.zeros(0, np.uint8), word_at, counts, kinds, -1
        starts[i] = at
        word_at[i + 1] = word_at[i] + end - at
        count = np.int64(0)
        for k in range(8):
            count |= np.int64(data[end + 1 + k]) << (8 * k)
        counts[i] = count
        kinds[i] = np.int8(data[end + 9]) if data[end + 9] < 128 else np.int8(np.int64(data[end + 9]) - 256)
        at = end + 10
    word_bytes = np.empty(word_at[size], np.uint8)
    for i in range(size):
        word_bytes[word_at[i] : word_at[i + 1]] = data[starts[i] : starts[i] + word_at[i + 1] - word_at[i]]
    return word_bytes, word_at, counts, kinds, at


def dictionary_of(r: ModelReader) -> tuple[tuple[int, ...], Dictionary]:
    """The header fields the model is run with, and the dictionary: the start of the file, in
    FastText::loadModel's order."""
    magic, version = r.take("ii")
    if magic != MAGIC or version not in VERSIONS:
        raise UserError(f"{r.path}: not a fastText model file (magic {magic}, version {version})")
    dim, _ws, _epoch, _min_count, _neg, word_ngrams, loss, model, bucket, minn, maxn, _rate = r.take("12i")
    r.take("d")
    if version == 11:
        maxn = 0  # fastText: old supervised models use no character n-grams
    size, nwords, nlabels = r.take("3i")
    _ntokens, prune_size = r.take("2q")
    word_bytes, word_at, counts, kinds, end = _entries(np.frombuffer(r.data, np.uint8), r.at, max(size, 0))
    if end < 0:
        raise UserError(f"{r.path}: not a readable fastText model (it ends at byte {len(r.data)})")
    r.at = end
    dictionary = Dictionary(word_bytes, word_at, counts, kinds)
    return (dim, word_ngrams, loss, model, bucket, minn, maxn, nwords, nlabels, prune_size), dictionary


def model_labels(path: Path) -> list[str]:
    """The labels of model file `path` ("__label__de", ...), read from its dictionary alone: a few
    milliseconds, where `FastTextModel.load` takes seconds."""
    return dictionary_of(ModelReader(path))[1].labels()


@dataclass(frozen=True)
class FastTextModel:
    labels: list[str]  # as the file names them: "__label__de"
    ints: np.ndarray  # minn, maxn, bucket, nwords, dim
    words: tuple  # `vocabulary`
    rows: tuple  # `input_rows`
    output: np.ndarray  # [labels, dim]: row i for the tree's inner node labels + i (the last row unused)
    tree: tuple  # `huffman_tree`

    @classmethod
    def load(cls, path: Path) -> FastTextModel:
        """The model of file `path` (FastText::loadModel's order of fields); a file that is no model, is
        cut short, or is a kind of model this reader does not run: a UserError naming it."""
        r = ModelReader(path)
        (dim, word_ngrams, loss, model, bucket, minn, maxn, nwords, nlabels, prune_size), words = dictionary_of(r)
        pruned = r.array(np.int32, 2 * max(prune_size, 0)).reshape(-1, 2)
        (quant_input,) = r.take("?")
        if (model, loss, word_ngrams, quant_input) != (SUPERVISED, HIERARCHICAL_SOFTMAX, 1, True) or prune_size < 0:
            raise UserError(
                f"{path}: a fastText model this reader does not run (it reads quantized and pruned supervised "
                f"models with hierarchical softmax and no word n-grams, as lid.176.ftz)"
            )
        rows_n, cols, codes, pq, norms = quantized_matrix(r)
        (qout,) = r.take("?")
        if qout:
            raise UserError(f"{path}: a fastText model this reader does not run (its output matrix is quantized)")
        out_rows, out_cols = r.take("qq")
        output = r.array(np.float32, out_rows * out_cols).reshape(out_rows, out_cols)
        shapes = (cols, out_cols, rows_n, out_rows, r.at)
        if shapes != (dim, dim, nwords + len(pruned), nlabels, len(r.data)):
            raise UserError(f"{path}: not a readable fastText model (its matrices do not match its dictionary)")
        ints = np.array([minn, maxn, bucket, nwords, dim], np.int64)
        return cls(
            labels=words.labels(),
            ints=ints,
            words=vocabulary(words, ints, pruned),
            rows=input_rows(codes, pq, norms),
            output=output,
            tree=huffman_tree(words.label_counts()),
        )

    def predict(self, line: str) -> tuple[str, float] | None:
        """fastText's best label and its probability for `line` (up to its first line feed, where
        fastText stops reading); None where nothing of it is in the model (fastText's `predict` then
        gives no label). A lone surrogate, which has no UTF-8 form (fastText's binding refuses it), is
        read as "?"."""
        return self.predict_many([line])[0]

    def predict_many(self, lines: list[str]) -> list[tuple[str, float] | None]:
        """`predict` of each line, in one compiled call."""
        encoded = [line.partition("\n")[0].encode("utf-8", "replace") for line in lines]
        ends = np.cumsum([len(e) for e in encoded], dtype=np.int64)
        data = np.frombuffer(b"".join(encoded), np.uint8)
        best, scores = _best_labels(data, ends, self.ints, self.words, self.rows, self.output, self.tree)
        return [(self.labels[b], s) if b >= 0 else None for b, s in zip(best.tolist(), scores.tolist())]
