"""MinHash signatures of word n-gram sets, computed for a batch of documents at once in numpy.

    hasher = MinHasher(num_perm=128, ngram=5)
    batch = hasher.signatures(["first document ...", "second document ..."])
    batch.signatures      # uint32 [docs, num_perm]
    batch.shingle_sets()  # per document, its sorted unique 32-bit shingle hashes

Guarantee: for two documents with n-gram sets A and B, each signature position agrees with
probability ~ |A ∩ B| / |A ∪ B| (the Jaccard similarity), as in classic k-permutation MinHash.

How: one-permutation MinHash (Li, Owen, Zhang 2012) with optimal densification (Shrivastava
2017). Each shingle is hashed once; the hash's top bits pick one of `num_perm` bins and the bin
keeps its minimum; empty bins borrow the value of a non-empty bin chosen by a fixed
pseudo-random probe sequence shared by all documents. This costs O(shingles) per document instead
of O(shingles x num_perm), and everything from bytes to signatures is vectorized over the batch:
per-shingle Python work is what limits textbook MinHash loops.

Memory: a batch is hashed at once (~100 bytes of temporaries per byte of text, so batches are
kept small). A large document is hashed alone (`large_document`), from consecutive pieces of its
normalized bytes (the scan never joins them), each cut again into pieces of `piece_bytes` (64 KB)
at ASCII separators, each piece's n-grams taking the last n - 1 words of the one before; its
shingles are merged into one sorted set by binary search, then bins filled from it: the same
signature and shingle set as whole, holding the set (4 bytes per distinct shingle) twice over
while merging, beyond temporaries of the size of a piece.

Densification cost: rows with few filled bins take, for each empty bin, the minimum over their
filled bins of a precomputed rank (uint16 for num_perm <= 255); rows with many step along each
empty bin's sequence of distinct bins. Both are vectorized over the batch, with no Python loop
over documents or bins.

Text normalization for near-duplicates (`near_normal_bytes`): lowercase, accents removed (NFKD,
combining marks dropped), punctuation and symbols become separators, every digit becomes `0`.
Words are maximal runs of non-separator bytes. A document with fewer than `ngram` words has one
shingle made of all its words; a document with no words has no shingles and no signature.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from functools import lru_cache
from typing import Iterable, Iterator

import numpy as np

HASH_SCHEME = "oph-densified-v1"  # bump when anything below changes the values of signatures

_U64 = np.uint64
_WORD_BASE = 0x100000001B3  # odd: invertible mod 2^64, so word hashes do not depend on position
_GRAM_MULTIPLIERS = np.array(
    [0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0xD6E8FEB86659FD93,
     0xFF51AFD7ED558CCD, 0xC4CEB9FE1A85EC53, 0x2545F4914F6CDD1D, 0x9FB21C651E98DF25],
    dtype=_U64,
)


def _byte_table() -> np.ndarray:
    """ASCII letters lowercased, digits -> '0', other ASCII -> space; non-ASCII bytes kept."""
    table = np.full(256, ord(" "), dtype=np.uint8)
    for c in range(ord("a"), ord("z") + 1):
        table[c] = c
        table[c - 32] = c
    table[ord("0") : ord("9") + 1] = ord("0")
    table[0x80:] = np.arange(0x80, 0x100, dtype=np.uint8)
    return table


_BYTE_TABLE = _byte_table()
_SPACE = np.uint8(ord(" "))


def near_normal_bytes(text: str) -> bytes:
    """UTF-8 bytes whose words are what near-dedup compares. ASCII case, punctuation and digits,
    and the non-ASCII marks and punctuation, are handled on the bytes by `_separate_words`."""
    if text.isascii():
        return text.encode("ascii")
    return unicodedata.normalize("NFKD", text).lower().encode("utf-8")


def _separate_words(buf: np.ndarray) -> np.ndarray:
    """Map raw UTF-8 bytes to word bytes and spaces (vectorized over a whole batch).

    After NFKD, accents are combining marks U+0300-U+036F (UTF-8 CC xx, CD 80-AF): dropped, by
    mapping them to a byte that `_word_hashes` skips. Latin-1 punctuation U+00A0-U+00BF (C2 A0-BF),
    general punctuation U+2000-U+206F (E2 80-81 xx) and CJK punctuation U+3000-U+303F (E3 80 xx)
    become separators. Other non-ASCII characters are word characters."""
    out = _BYTE_TABLE[buf]
    high = np.flatnonzero(buf >= 0xC2)
    if len(high) == 0:
        return out
    nxt = np.append(buf, np.zeros(1, np.uint8))
    b0, b1 = buf[high], nxt[high + 1]
    mark = (b0 == 0xCC) | ((b0 == 0xCD) & (b1 <= 0xAF))
    punct2 = (b0 == 0xC2) & (b1 >= 0xA0) & (b1 <= 0xBF)
    punct3 = ((b0 == 0xE2) & ((b1 == 0x80) | (b1 == 0x81))) | ((b0 == 0xE3) & (b1 == 0x80))
    for width, sel, value in ((2, mark, _DROP), (2, punct2, _SPACE), (3, punct3, _SPACE)):
        at = high[sel]
        for k in range(width):
            out[at + k] = value
    return out


_DROP = np.uint8(0xFF)  # never valid in UTF-8, so free to mean "not part of any word"


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finalizer: a bijective, well-mixing map on uint64 (wraps mod 2^64)."""
    x = x ^ (x >> _U64(30))
    x = x * _U64(0xBF58476D1CE4E5B9)
    x = x ^ (x >> _U64(27))
    x = x * _U64(0x94D049BB133111EB)
    return x ^ (x >> _U64(31))


@lru_cache(maxsize=4)
def _powers(n: int) -> tuple[np.ndarray, np.ndarray]:
    """B^i and B^-i mod 2^64 for i < n, n a power of two (so the cache stays small)."""

    def powers_of(base: int) -> np.ndarray:
        out = np.ones(n, dtype=_U64)
        m = 1
        while m < n:  # doubling: out[m:2m] = out[:m] * base^m
            out[m : 2 * m] = out[:m] * _U64(pow(base, m, 1 << 64))
            m *= 2
        return out

    return powers_of(_WORD_BASE), powers_of(pow(_WORD_BASE, -1, 1 << 64))


def _word_hashes(normalized: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(hash of every word, index of its document), in document and word order."""
    lengths = np.fromiter((len(b) + 1 for b in normalized), dtype=np.int64, count=len(normalized))
    doc_starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    buf = _separate_words(np.frombuffer(b" ".join(normalized) + b" ", dtype=np.uint8))
    if (dropped := buf == _DROP).any():  # rare: only text with accents
        keep = ~dropped
        doc_starts = np.cumsum(keep)[doc_starts] - keep[doc_starts]
        buf = buf[keep]
    is_word = buf != _SPACE
    edges = np.diff(is_word.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)  # exclusive
    n = 1 << max(int(len(buf)).bit_length(), 18)
    pw, ipw = _powers(n)
    prefix = np.zeros(len(buf) + 1, dtype=_U64)
    np.cumsum(buf.astype(_U64) * pw[: len(buf)], out=prefix[1:])
    words = mix64((prefix[ends] - prefix[starts]) * ipw[starts])
    doc_of_word = np.searchsorted(doc_starts, starts, side="right") - 1
    return words, doc_of_word


def _shingle_hashes(words: np.ndarray, doc_of_word: np.ndarray, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """32-bit hash of every word n-gram (or of all words, for a document shorter than n)."""
    n_words = len(words)
    if n_words == 0:
        return np.empty(0, np.uint32), np.empty(0, np.int64)
    multipliers = np.resize(_GRAM_MULTIPLIERS, ngram)
    gram = words * multipliers[0]
    for k in range(1, ngram):  # across document ends too: those n-grams are dropped, or recomputed below
        gram[:-k] += words[k:] * multipliers[k]
    last = np.minimum(np.arange(n_words) + ngram - 1, n_words - 1)
    full = (doc_of_word[last] == doc_of_word) & (np.arange(n_words) + ngram - 1 < n_words)
    first_of_doc = np.ones(n_words, dtype=bool)
    first_of_doc[1:] = doc_of_word[1:] != doc_of_word[:-1]
    firsts = np.flatnonzero(first_of_doc)
    doc_is_short = ~full[firsts]  # a doc is short iff its first word starts no full n-gram
    short_start = np.zeros(n_words, dtype=bool)
    if doc_is_short.any():  # one shingle of all its words: the sum over its own words only
        starts = firsts[doc_is_short]
        lengths = (np.append(firsts[1:], n_words) - firsts)[doc_is_short]
        short = words[starts] * multipliers[0]
        for k in range(1, ngram):
            within = lengths > k
            short[within] += words[starts[within] + k] * multipliers[k]
        gram[starts] = short
        short_start[starts] = True
    keep = full | short_start
    return (mix64(gram[keep]) >> _U64(32)).astype(np.uint32), doc_of_word[keep]


def _probe_table_rows(num_perm: int, lo: int, hi: int) -> np.ndarray:
    """[t - lo, j]: the bin probed on attempt t (lo <= t < hi) for empty bin j, the same sequence for
    every document."""
    t = np.arange(lo, hi, dtype=_U64)[:, None]
    j = np.arange(num_perm, dtype=_U64)[None, :]
    return (mix64(j * _U64(0x9E3779B97F4A7C15) + t * _U64(0xD1B54A32D192ED03) + _U64(1)) % _U64(num_perm)).astype(np.int64)


@lru_cache(maxsize=8)
def _probe_orders(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """The probe sequences reduced to the distinct bins they reach, in order of first reach
    (searched 64 x num_perm attempts deep, a chunk at a time; a bin missed, with probability
    e^-64, comes after the reached ones, by number).

    Returns (order [j, i]: the i-th distinct bin empty bin j probes, as intp;
             rank [c, j]: (i + 1) * num_perm + c where order[j, i] == c, and j on the diagonal, uint16
             while it fits, else uint32). Packing c into the rank keeps it through a min over c, and
             the diagonal, below every other rank, lets a filled bin pick itself.)"""
    attempts = 64 * num_perm
    first = np.full((num_perm, num_perm), attempts, dtype=np.int64)  # [c, j]: first attempt j probes c
    cols = np.arange(num_perm)
    step = max(1, (1 << 20) // num_perm)
    for lo in range(0, attempts, step):
        table = _probe_table_rows(num_perm, lo, min(lo + step, attempts))
        t = np.broadcast_to(np.arange(lo, lo + len(table))[:, None], table.shape)
        np.minimum.at(first, (table.ravel(), np.broadcast_to(cols, table.shape).ravel()), t.ravel())
        if (first < attempts).all():
            break
    order = np.argsort(first * num_perm + cols[:, None], axis=0).T.copy()  # [j, i]
    rank = np.empty((num_perm, num_perm), dtype=np.int64)
    rank[order, cols[:, None]] = (np.arange(num_perm)[None, :] + 1) * num_perm + order
    rank[cols, cols] = cols
    dtype = np.uint16 if (num_perm + 1) * num_perm <= 1 << 16 else np.uint32
    return order.astype(np.intp), rank.astype(dtype)


def _densify(sig: np.ndarray, filled: np.ndarray, sparse_below: int = 64) -> None:
    """Fill every empty bin of rows that have at least one filled bin (in place).

    Empty bin j takes the value of the first filled bin on its probe sequence. Rows with many
    filled bins find it by stepping all their empty bins along their sequences of distinct bins
    at once (few steps); rows with few filled bins would need many steps, so they take, over their
    filled bins c, the minimum of rank[c, j] (cost: filled bins x num_perm small integers)."""
    num_perm = sig.shape[1]
    order, rank = _probe_orders(num_perm)
    m = np.count_nonzero(filled, axis=1)
    sparse = np.flatnonzero((m > 0) & (m < sparse_below))
    if len(sparse):
        sparse = sparse[np.argsort(-m[sparse], kind="stable")]  # rows with more than i filled bins: a prefix
        rows, bins = np.nonzero(filled[sparse])
        counts = m[sparse]
        nth = np.arange(len(bins)) - np.repeat(np.cumsum(counts) - counts, counts)
        by_nth = np.zeros((counts[0], len(sparse)), dtype=np.intp)
        by_nth[nth, rows] = bins
        first = rank[by_nth[0]]
        for i in range(1, counts[0]):  # the running minimum over each row's i-th filled bin
            n = int(np.searchsorted(-counts, -i, side="left"))
            np.minimum(first[:n], rank[by_nth[i, :n]], out=first[:n])
        source = sparse[:, None] * num_perm + first % np.array(num_perm, first.dtype)
        sig[sparse] = sig.reshape(-1)[source]

    flat_sig, flat_filled = sig.reshape(-1), filled.reshape(-1)
    rows, cols = np.nonzero(~filled & (m >= sparse_below)[:, None])
    row_base = rows * num_perm
    i = 0
    while len(cols):
        source = row_base + order[cols, i]
        hit = flat_filled[source]
        flat_sig[row_base[hit] + cols[hit]] = flat_sig[source[hit]]
        miss = ~hit
        row_base, cols = row_base[miss], cols[miss]
        i += 1


@dataclass
class SignatureBatch:
    signatures: np.ndarray  # uint32 [docs, num_perm]; rows of docs without shingles are all 0xFFFFFFFF
    has_shingles: np.ndarray  # bool [docs]
    shingles: np.ndarray  # uint32, each document's sorted unique shingle hashes, concatenated
    shingle_counts: np.ndarray  # uint32 [docs]

    def shingle_sets(self) -> list[np.ndarray]:
        return np.split(self.shingles, np.cumsum(self.shingle_counts.astype(np.int64))[:-1])


class MinHasher:
    def __init__(self, num_perm: int = 128, ngram: int = 5, large_bytes: int = 256 << 10, piece_bytes: int = 64 << 10):
        if num_perm < 1 or ngram < 1:
            raise ValueError("num_perm and ngram must be >= 1")
        self.num_perm = num_perm
        self.ngram = ngram
        self.large_bytes, self.piece_bytes = large_bytes, piece_bytes

    def signatures(self, texts: list[str]) -> SignatureBatch:
        return self.signatures_of_normalized([near_normal_bytes(t) for t in texts])

    def signatures_of_normalized(self, normalized: list[bytes]) -> SignatureBatch:
        if len(normalized) == 1 and len(normalized[0]) > self.large_bytes:
            return self.large_document(normalized)
        n_docs, k = len(normalized), self.num_perm
        words, doc_of_word = _word_hashes(normalized) if n_docs else (np.empty(0, _U64), np.empty(0, np.int64))
        h, doc = _shingle_hashes(words, doc_of_word, self.ngram)
        keys = np.sort((doc.astype(_U64) << _U64(32)) | h.astype(_U64))
        if len(keys):
            keys = keys[np.append(True, keys[1:] != keys[:-1])]
        doc = (keys >> _U64(32)).astype(np.int64)
        h = (keys & _U64(0xFFFFFFFF)).astype(np.uint32)
        counts = np.bincount(doc, minlength=n_docs).astype(np.uint32)
        # Bins by the hash's top bits: within a document's sorted run, a bin's first entry is its min.
        cell = doc * k + ((h.astype(_U64) * _U64(k)) >> _U64(32)).astype(np.int64)
        first = np.ones(len(cell), dtype=bool)
        first[1:] = cell[1:] != cell[:-1]
        sig = np.full((n_docs, k), 0xFFFFFFFF, dtype=np.uint32)
        filled = np.zeros((n_docs, k), dtype=bool)
        sig.reshape(-1)[cell[first]] = h[first]
        filled.reshape(-1)[cell[first]] = True
        _densify(sig, filled)
        return SignatureBatch(sig, counts > 0, h, counts)

    def large_document(self, pieces: Iterable[bytes]) -> SignatureBatch:
        """One large document given as consecutive pieces of its normalized bytes, each cut between
        words (at a separator byte); equal to hashing their concatenation whole. Memory: the sorted
        shingle set twice over while a batch of new shingles is merged in, and one piece."""
        merged = np.empty(0, np.uint32)
        new: list[np.ndarray] = []
        carry = np.empty(0, _U64)  # the last n - 1 words: the n-grams that cross into the next piece
        for part in pieces:
            for piece in _pieces_at_separators(part, self.piece_bytes):
                window = np.concatenate([carry, _word_hashes([piece])[0]])
                if len(window) >= self.ngram:  # else too few words yet: they all stay in `carry`
                    h, _ = _shingle_hashes(window, np.zeros(len(window), np.int64), self.ngram)
                    new.append(np.unique(h))
                    if len(new) == 16:
                        merged = _merge_sorted(merged, new)
                carry = window[max(0, len(window) - self.ngram + 1) :]
        if not len(merged) and not new and len(carry):  # fewer words than n in all: one shingle of them all
            h, _ = _shingle_hashes(carry, np.zeros(len(carry), np.int64), self.ngram)
            new.append(h)
        h = _merge_sorted(merged, new)
        del merged
        k = self.num_perm
        sig = np.full((1, k), 0xFFFFFFFF, dtype=np.uint32)
        filled = np.zeros((1, k), dtype=bool)
        for lo in range(0, len(h), _BIN_CHUNK):  # ascending: a bin's first value is its minimum
            chunk = h[lo : lo + _BIN_CHUNK]
            bins, first = np.unique(((chunk.astype(_U64) * _U64(k)) >> _U64(32)).astype(np.int64), return_index=True)
            new_bins = ~filled[0, bins]
            sig[0, bins[new_bins]] = chunk[first[new_bins]]
            filled[0, bins[new_bins]] = True
        _densify(sig, filled)
        counts = np.array([len(h)], dtype=np.uint32)
        return SignatureBatch(sig, counts > 0, h, counts)


_BIN_CHUNK = 1 << 16


def _merge_sorted(merged: np.ndarray, new: list[np.ndarray]) -> np.ndarray:
    """The sorted unique union of `merged` (sorted, unique) and the arrays in `new` (emptied):
    the new values are placed by binary search, so the cost is one copy of `merged`, not a sort."""
    values = np.unique(np.concatenate(new)) if new else np.empty(0, np.uint32)
    new.clear()
    if not len(values):
        return merged
    at = np.searchsorted(merged, values)
    if len(merged):
        fresh = merged[np.minimum(at, len(merged) - 1)] != values
        values, at = values[fresh], at[fresh]
    return np.insert(merged, at, values)


def _pieces_at_separators(data: bytes, piece_bytes: int) -> Iterator[bytes]:
    """`data` in pieces of about `piece_bytes`, each cut at an ASCII separator byte (never inside
    a word or a UTF-8 character; a piece grows past its size until it meets one)."""
    view = np.frombuffer(data, dtype=np.uint8)
    start = 0
    while len(data) - start > piece_bytes:
        at = start + piece_bytes
        while at < len(data):
            ahead = view[at : at + piece_bytes]
            cuts = np.flatnonzero((_BYTE_TABLE[ahead] == _SPACE) & (ahead < 0x80))
            if len(cuts):
                at += int(cuts[0])
                break
            at += len(ahead)
        yield data[start:at]
        start = at
    yield data[start:]


def band_hashes(signatures: np.ndarray, bands: int, rows: int, chunk_docs: int = 4096) -> np.ndarray:
    """uint64 [docs, bands]: one hash per band of `rows` consecutive signature values. Computed a
    chunk of documents at a time, row r of every band at once (a strided view): no uint64 copy of
    the signatures, and temporaries that stay in the CPU caches."""
    out = np.empty((len(signatures), bands), dtype=_U64)
    for lo in range(0, len(signatures), chunk_docs):
        chunk = signatures[lo : lo + chunk_docs]
        h = np.zeros((len(chunk), bands), dtype=_U64)
        for r in range(rows):
            h = mix64(h * _U64(_WORD_BASE) + chunk[:, r : bands * rows : rows] + _U64(r + 1))
        out[lo : lo + chunk_docs] = h
    return out


def lsh_params(threshold: float, num_perm: int, false_positive_weight: float = 0.05) -> tuple[int, int]:
    """Bands x rows minimizing the weighted areas of missed pairs above `threshold` and candidate
    pairs below it (datasketch's criterion). Candidates are verified exactly afterwards, so a
    missed pair costs more than a candidate: the default weights favour recall 19:1
    (threshold 0.8, 128 bins: 16 x 8, a pair at 0.85 becomes a candidate with p = 0.994)."""
    fn_weight = 1.0 - false_positive_weight
    s_lo = np.linspace(0.0, threshold, 201)
    s_hi = np.linspace(threshold, 1.0, 201)

    def area(y: np.ndarray, s: np.ndarray) -> float:
        return float((y[:-1] + y[1:]).sum() / 2 * (s[1] - s[0]))
    best, best_cost = (1, num_perm), float("inf")
    for b in range(1, num_perm + 1):
        for r in range(1, num_perm // b + 1):
            fp = area(1 - (1 - s_lo**r) ** b, s_lo)
            fn = area((1 - s_hi**r) ** b, s_hi)
            cost = false_positive_weight * fp + fn_weight * fn
            if cost < best_cost:
                best, best_cost = (b, r), cost
    return best
