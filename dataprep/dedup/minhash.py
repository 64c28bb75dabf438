"""MinHash signatures of word n-gram sets, computed for a batch of documents at once in compiled loops.

    hasher = MinHasher(num_perm=128, ngram=5)
    batch = hasher.signatures(["first document ...", "second document ..."])
    batch.signatures      # uint32 [docs, num_perm]
    batch.shingle_sets()  # per document, its sorted unique 32-bit shingle hashes
    hasher.of_joined(buf, offsets)  # the same from normalized bytes joined, and each document's offsets

Guarantee: for two documents with n-gram sets A and B, each signature position agrees with
probability ~ |A ∩ B| / |A ∪ B| (the Jaccard similarity), as in classic k-permutation MinHash.

How: one-permutation MinHash (Li, Owen, Zhang 2012) with optimal densification (Shrivastava
2017). Each shingle is hashed once; the hash's top bits pick one of `num_perm` bins and the bin
keeps its minimum; empty bins borrow the value of a non-empty bin chosen by a fixed
pseudo-random probe sequence shared by all documents. This costs O(shingles) per document instead
of O(shingles x num_perm). One numba kernel (`_hash_batch`) takes a batch from its normalized bytes
to word hashes, n-gram hashes, sorted unique shingles, bins and densified signatures, a document
at a time, with scratch arrays the size of the longest document.

Memory: a batch needs its bytes, ~10 bytes per byte of its longest document, its outputs, and
the powers of the word hashes' base for every position of its longest document (16 bytes each,
to a power of two; the last few sizes are cached: 8 MB for the largest batch document). A
large document is hashed alone (`large_document`), from consecutive pieces of its normalized bytes
(the scan never joins them), each cut again into pieces of `piece_bytes` (64 KB) at ASCII
separators, each piece's n-grams taking the last n - 1 words of the one before; its shingles are
merged into one sorted set by binary search, then bins filled from it: the same signature and
shingle set as whole, holding the set (4 bytes per distinct shingle) twice over while merging,
beyond temporaries of the size of a piece.

Densification cost: rows with few filled bins take, for each empty bin, the minimum over their
filled bins of a precomputed rank (uint16 for num_perm <= 255); rows with many step along each
empty bin's sequence of distinct bins.

Text normalization for near-duplicates (`near_normal_bytes`): lowercase, accents removed (NFKD,
combining marks dropped), punctuation and symbols become separators, every digit becomes `0`.
Words are maximal runs of non-separator bytes. A document with fewer than `ngram` words has one
shingle made of all its words; a document with no words has no shingles and no signature.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from functools import lru_cache

import numba
import numpy as np

from pretrainkit.dataprep.kernels.hashing import mix64
from pretrainkit.dataprep.kernels.pieces import joined

HASH_SCHEME = "oph-densified-v1"  # bump when anything below changes the values of signatures

_U64 = np.uint64
_WORD_BASE = 0x100000001B3  # a word hashes to mix64(sum of byte_i * _WORD_BASE^i mod 2^64); bands use it too
_GRAM_MULTIPLIERS = np.array(
    [
        0x9E3779B97F4A7C15,
        0xC2B2AE3D27D4EB4F,
        0x165667B19E3779F9,
        0xD6E8FEB86659FD93,
        0xFF51AFD7ED558CCD,
        0xC4CEB9FE1A85EC53,
        0x2545F4914F6CDD1D,
        0x9FB21C651E98DF25,
    ],
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
    and the non-ASCII marks and punctuation, are handled on the bytes by `_words_into`."""
    if text.isascii():
        return text.encode("ascii")
    return unicodedata.normalize("NFKD", text).lower().encode("utf-8")


_mix64 = numba.njit(cache=True)(mix64)
_B = _U64(_WORD_BASE)


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


def _powers_for(longest: int) -> tuple[np.ndarray, np.ndarray]:
    """Powers enough for every position of a piece of `longest` bytes."""
    return _powers(1 << max(int(longest).bit_length(), 12))


@numba.njit(cache=True)
def _words_into(
    buf: np.ndarray, lo: int, hi: int, powers: np.ndarray, inverse_powers: np.ndarray, out: np.ndarray
) -> int:
    """Hash every word of the UTF-8 bytes buf[lo:hi] into `out` (room for (hi - lo + 1) // 2 + 1);
    returns the number of words. A word's hash is mix64(sum of its mapped bytes c_i * B^i), from
    prefix sums of c_p * B^p over positions p (`powers`, at least hi - lo of them): the difference
    at a word's ends, times B^-start (`inverse_powers`).

    Bytes are mapped by `_BYTE_TABLE`; after NFKD, accents are combining marks U+0300-U+036F
    (UTF-8 CC xx, CD 80-AF): dropped, neither in a word nor ending one, nor counted as positions.
    Latin-1 punctuation U+00A0-U+00BF (C2 A0-BF), general punctuation U+2000-U+206F (E2 80-81 xx)
    and CJK punctuation U+3000-U+303F (E3 80 xx) are separators. Other non-ASCII characters are
    word characters. The byte loop has no branch on word ends (they are unpredictable) and no
    chain of multiplies: every byte stores the hash of the word ending there at `out[n]`, and a
    word's end moves n past it; the hashes are mixed afterwards."""
    n = 0
    total = _U64(0)
    word_start_total = _U64(0)
    word_start = 0
    at = 0  # position among the bytes kept
    in_word = False
    i = lo
    while i < hi:
        b = buf[i]
        c = _BYTE_TABLE[b]
        if b >= 0xC2 and i + 1 < hi:
            b1 = buf[i + 1]
            if b == 0xCC or (b == 0xCD and b1 <= 0xAF):
                i += 2
                continue
            if b == 0xC2 and b1 >= 0xA0 and b1 <= 0xBF:
                c = _SPACE
                i += 1
            elif (b == 0xE2 and (b1 == 0x80 or b1 == 0x81)) or (b == 0xE3 and b1 == 0x80):
                c = _SPACE
                i += 2
        space = c == _SPACE
        out[n] = (total - word_start_total) * inverse_powers[word_start]
        n += in_word and space
        begins = not (in_word or space)
        word_start_total = total if begins else word_start_total
        word_start = at if begins else word_start
        total += _U64(c) * powers[at]
        at += 1
        in_word = not space
        i += 1
    out[n] = (total - word_start_total) * inverse_powers[word_start]
    n += in_word
    for t in range(n):
        out[t] = _mix64(out[t])
    return n


@numba.njit(cache=True)
def _grams_into(words: np.ndarray, n: int, ngram: int, multipliers: np.ndarray, out: np.ndarray) -> int:
    """32-bit hash of every word n-gram of words[:n] (of all its words, if fewer than n) into `out`;
    returns how many. An n-gram's hash is the top half of mix64(sum of word_k * multiplier_k)."""
    if n == 0:
        return 0
    if n < ngram:
        g = _U64(0)
        for k in range(n):
            g += words[k] * multipliers[k]
        out[0] = np.uint32(_mix64(g) >> _U64(32))
        return 1
    for i in range(n - ngram + 1):
        g = _U64(0)
        for k in range(ngram):
            g += words[i + k] * multipliers[k]
        out[i] = np.uint32(_mix64(g) >> _U64(32))
    return n - ngram + 1


@numba.njit(cache=True)
def _densify_row(
    sig: np.ndarray,
    filled: np.ndarray,
    m: int,
    order: np.ndarray,
    rank: np.ndarray,
    sparse_below: int,
    best: np.ndarray,
    pending: np.ndarray,
) -> None:
    """Fill every empty bin of a signature with m >= 1 filled bins (in place; `best`: scratch of
    num_perm ranks, `pending`: of num_perm int64): empty bin j takes the value of the first filled
    bin on its probe sequence. With few filled bins, each bin takes the minimum of `rank[c, j]`
    over the filled bins c (m x num_perm small integers, many per instruction); with many, the
    empty bins step along their sequences of distinct bins (`order[j]`, ~num_perm / m steps each),
    all of them one step at a time, without branches."""
    k = len(sig)
    if m == 0 or m == k:
        return
    if m < sparse_below:
        best[:] = np.iinfo(best.dtype).max
        for c in range(k):
            if filled[c]:
                ranks = rank[c]
                for j in range(k):
                    best[j] = ranks[j] if ranks[j] < best[j] else best[j]
        for j in range(k):
            sig[j] = sig[best[j] % k]  # a filled bin's own rank is the least: it keeps its value
        return
    left = 0
    for j in range(k):
        pending[left] = j
        left += not filled[j]
    i = 0
    while left:
        still = 0
        for t in range(left):
            j = pending[t]
            c = order[j, i]
            hit = filled[c]
            sig[j] = sig[c] if hit else sig[j]
            pending[still] = j
            still += not hit
        left = still
        i += 1


@numba.njit(cache=True)
def _signature_into(
    shingles: np.ndarray,
    order: np.ndarray,
    rank: np.ndarray,
    sparse_below: int,
    sig: np.ndarray,
    filled: np.ndarray,
    best: np.ndarray,
    pending: np.ndarray,
) -> None:
    """The densified signature of one document's shingles into `sig` (all 0xFFFFFFFF) and `filled`
    (all False): each bin, picked by the hash's top bits, keeps its minimum."""
    k = _U64(len(sig))
    m = 0
    for x in shingles:
        b = (_U64(x) * k) >> _U64(32)
        m += not filled[b]
        filled[b] = True
        sig[b] = min(sig[b], x)
    _densify_row(sig, filled, m, order, rank, sparse_below, best, pending)


@numba.njit(cache=True)
def _signatures_of_sets_into(
    shingles: np.ndarray, counts: np.ndarray, order: np.ndarray, rank: np.ndarray, sparse_below: int, sig: np.ndarray
) -> None:
    filled = np.zeros(sig.shape[1], np.bool_)
    best, pending = np.empty(sig.shape[1], rank.dtype), np.empty(sig.shape[1], np.int64)
    start = 0
    for d in range(len(counts)):
        if counts[d]:
            filled[:] = False
            _signature_into(
                shingles[start : start + counts[d]], order, rank, sparse_below, sig[d], filled, best, pending
            )
        start += counts[d]


@numba.njit(cache=True)
def _sort_hashes(a: np.ndarray, scratch: np.ndarray, buckets: np.ndarray) -> None:
    """Sort uniformly distributed 32-bit hashes in place: scattered into about len(a) buckets by their
    top bits (at most len(buckets) - 1), then an insertion sort, which has only the few inversions
    within buckets left to undo."""
    n = len(a)
    if n < 2:
        return
    bits = 1
    while (1 << bits) < n and (2 << bits) < len(buckets):
        bits += 1
    shift = np.uint32(32 - bits)
    buckets[: (1 << bits) + 1] = 0
    for x in a:
        buckets[(x >> shift) + 1] += 1
    for b in range(1 << bits):
        buckets[b + 1] += buckets[b]
    for x in a:
        b = x >> shift
        scratch[buckets[b]] = x
        buckets[b] += 1
    for i in range(n):
        x = scratch[i]
        j = i - 1
        while j >= 0 and a[j] > x:
            a[j + 1] = a[j]
            j -= 1
        a[j + 1] = x


@numba.njit(cache=True)
def _hash_batch(
    buf, offsets, powers, inverse_powers, ngram, multipliers, order, rank, sparse_below, num_perm, with_signatures
):
    """Per document buf[offsets[d]:offsets[d + 1]]: its sorted unique shingles (concatenated), their
    count and (with_signatures) its signature."""
    n_docs = len(offsets) - 1
    longest = 0
    for d in range(n_docs):
        longest = max(longest, offsets[d + 1] - offsets[d])
    words = np.empty(longest // 2 + 2, np.uint64)
    grams = np.empty(longest // 2 + 2, np.uint32)
    scratch = np.empty(longest // 2 + 2, np.uint32)
    buckets = np.empty((1 << 16) + 1, np.int64)
    shingles = np.empty((offsets[n_docs] - offsets[0]) // 2 + n_docs, np.uint32)  # >= every document's words
    counts = np.zeros(n_docs, np.uint32)
    sig = np.full((n_docs if with_signatures else 0, num_perm), 0xFFFFFFFF, np.uint32)
    filled = np.zeros(num_perm, np.bool_)
    best = np.empty(num_perm, rank.dtype)
    pending = np.empty(num_perm, np.int64)
    at = 0
    for d in range(n_docs):
        m = _grams_into(
            words,
            _words_into(buf, offsets[d], offsets[d + 1], powers, inverse_powers, words),
            ngram,
            multipliers,
            grams,
        )
        g = grams[:m]
        _sort_hashes(g, scratch, buckets)
        c = 0
        for i in range(m):
            if i == 0 or g[i] != g[i - 1]:
                shingles[at + c] = g[i]
                c += 1
        counts[d] = c
        if with_signatures and c:
            filled[:] = False
            _signature_into(shingles[at : at + c], order, rank, sparse_below, sig[d], filled, best, pending)
        at += c
    return shingles[:at], counts, sig


def _probe_table_rows(num_perm: int, lo: int, hi: int) -> np.ndarray:
    """[t - lo, j]: the bin probed on attempt t (lo <= t < hi) for empty bin j, the same sequence for
    every document."""
    t = np.arange(lo, hi, dtype=_U64)[:, None]
    j = np.arange(num_perm, dtype=_U64)[None, :]
    return (mix64(j * _U64(0x9E3779B97F4A7C15) + t * _U64(0xD1B54A32D192ED03) + _U64(1)) % _U64(num_perm)).astype(
        np.int64
    )


@lru_cache(maxsize=8)
def _probe_orders(num_perm: int) -> tuple[np.ndarray, np.ndarray]:
    """The probe sequences reduced to the distinct bins they reach, in order of first reach
    (searched 64 x num_perm attempts deep, a chunk at a time; a bin missed, with probability
    e^-64, comes after the reached ones, by number).

    Returns (order [j, i]: the i-th distinct bin empty bin j probes, uint16 (uint32 over 65536 bins):
             small, to stay in the CPU caches;
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
    return order.astype(np.uint16 if num_perm <= 1 << 16 else np.uint32), rank.astype(dtype)


def sparse_below(num_perm: int) -> int:
    """Rows with fewer filled bins m densify by rank lookup (m x num_perm minima of small integers,
    many per instruction) rather than by stepping (~num_perm / m steps for each empty bin, a few
    cycles each): the costs grow as m^2 and as num_perm / m, and meet near sqrt(5 num_perm)
    (measured at 128 bins on short documents: 25)."""
    return int(np.sqrt(5 * num_perm))


@dataclass
class SignatureBatch:
    signatures: (
        np.ndarray
    )  # uint32 [docs, num_perm] (rows of docs without shingles all 0xFFFFFFFF); [0, num_perm] if not asked for
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
        self._multipliers = np.resize(_GRAM_MULTIPLIERS, ngram)
        self._order, self._rank = _probe_orders(num_perm)
        self._sparse_below = sparse_below(num_perm)

    def signatures(self, texts: list[str]) -> SignatureBatch:
        return self.signatures_of_normalized([near_normal_bytes(t) for t in texts])

    def signatures_of_normalized(self, normalized: list[bytes]) -> SignatureBatch:
        return self.of_joined(*joined(normalized))

    def of_joined(self, buf: np.ndarray, offsets: np.ndarray, with_signatures: bool = True) -> SignatureBatch:
        """The documents buf[offsets[d]:offsets[d + 1]] (normalized bytes, uint8; offsets int64);
        without signatures, their shingle sets only (a [0, num_perm] `signatures`)."""
        longest = int(np.diff(offsets).max(initial=0))
        if len(offsets) == 2 and longest > self.large_bytes:
            return self.large_document([buf[offsets[0] : offsets[1]].tobytes()], with_signatures)
        shingles, counts, sig = _hash_batch(
            buf,
            offsets,
            *_powers_for(longest),
            self.ngram,
            self._multipliers,
            self._order,
            self._rank,
            self._sparse_below,
            self.num_perm,
            with_signatures,
        )
        return SignatureBatch(sig, counts > 0, shingles, counts)

    def signatures_of_sets(self, shingles: np.ndarray, counts: np.ndarray) -> np.ndarray:
        """uint32 [docs, num_perm]: the signatures of documents given by their shingle sets (sorted
        unique uint32, concatenated; `counts` per document), equal to those of their texts: a
        signature is a function of the set. Rows of documents without shingles are all 0xFFFFFFFF."""
        sig = np.full((len(counts), self.num_perm), 0xFFFFFFFF, dtype=np.uint32)
        _signatures_of_sets_into(shingles, counts.astype(np.int64), self._order, self._rank, self._sparse_below, sig)
        return sig

    def large_document(self, pieces: Iterable[bytes], with_signatures: bool = True) -> SignatureBatch:
        """One large document given as consecutive pieces of its normalized bytes, each cut between
        words (at a separator byte); equal to hashing their concatenation whole. Memory: the sorted
        shingle set twice over while a batch of new shingles is merged in, and one piece."""
        merged = np.empty(0, np.uint32)
        new: list[np.ndarray] = []
        carry = np.empty(0, _U64)  # the last n - 1 words: the n-grams that cross into the next piece
        for part in pieces:
            for piece in _pieces_at_separators(part, self.piece_bytes):
                window = np.empty(len(carry) + len(piece) // 2 + 2, _U64)
                window[: len(carry)] = carry
                window = window[
                    : len(carry)
                    + _words_into(
                        np.frombuffer(piece, np.uint8), 0, len(piece), *_powers_for(len(piece)), window[len(carry) :]
                    )
                ]
                if len(window) >= self.ngram:  # else too few words yet: they all stay in `carry`
                    new.append(self._grams(window))
                    if len(new) == 16:
                        merged = _merge_sorted(merged, new)
                carry = window[max(0, len(window) - self.ngram + 1) :]
        if not len(merged) and not new and len(carry):  # fewer words than n in all: one shingle of them all
            new.append(self._grams(carry))
        h = _merge_sorted(merged, new)
        del merged
        counts = np.array([len(h)], dtype=np.uint32)
        sig = self.signatures_of_sets(h, counts) if with_signatures else np.empty((0, self.num_perm), np.uint32)
        return SignatureBatch(sig, counts > 0, h, counts)

    def _grams(self, words: np.ndarray) -> np.ndarray:
        out = np.empty(max(1, len(words)), np.uint32)
        return out[: _grams_into(words, len(words), self.ngram, self._multipliers, out)]


@numba.njit(cache=True)
def _unique_hashes(a: np.ndarray) -> np.ndarray:
    """The sorted distinct values of uniformly distributed 32-bit hashes `a` (sorted in place)."""
    _sort_hashes(a, np.empty(len(a), np.uint32), np.empty((1 << 16) + 1, np.int64))
    c = 0
    for i in range(len(a)):
        if i == 0 or a[i] != a[i - 1]:
            a[c] = a[i]
            c += 1
    return a[:c]


def _merge_sorted(merged: np.ndarray, new: list[np.ndarray]) -> np.ndarray:
    """The sorted unique union of `merged` (sorted, unique) and the arrays in `new` (emptied):
    the new values are placed by binary search, so the cost is one copy of `merged`, not a sort."""
    values = _unique_hashes(np.concatenate(new)) if new else np.empty(0, np.uint32)
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


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 [docs, bands]: one hash per band of `rows` consecutive signature values,
    h = mix64(h * B + value + r + 1) over the band's rows r from h = 0."""
    out = np.empty((len(signatures), bands), dtype=_U64)
    _band_hashes_into(signatures, rows, out)
    return out


@numba.njit(cache=True)
def _band_hashes_into(signatures: np.ndarray, rows: int, out: np.ndarray) -> None:
    h = np.empty(out.shape[1], _U64)
    for d in range(out.shape[0]):
        h[:] = 0
        for r in range(rows):
            for b in range(out.shape[1]):  # the bands' chains are independent: interleaved
                h[b] = _mix64(h[b] * _B + _U64(signatures[d, b * rows + r]) + _U64(r + 1))
        out[d] = h


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
