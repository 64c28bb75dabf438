"""MinHash guarantees: signature agreement estimates Jaccard without bias; a document's signature
does not depend on its batch; normalization ignores case, punctuation, accents and digits."""

from __future__ import annotations

import unicodedata

import numpy as np
import pytest

from fixtures.corpora import DATA
from pretrainkit.dataprep.dedup import minhash
from pretrainkit.dataprep.dedup.minhash import MinHasher, lsh_params
from pretrainkit.dataprep.dedup.similarity import jaccard


def test_agreement_estimates_jaccard_without_bias(reuters_docs):
    rng = np.random.default_rng(0)
    hasher = MinHasher(num_perm=128, ngram=5)
    errors = []
    for _, text in reuters_docs[:400]:
        words = text.split()
        if len(words) < 60:
            continue
        edited = list(words)
        for k in rng.choice(len(words), size=int(rng.integers(1, len(words) // 6)), replace=False):
            edited[k] = f"edit{k}"
        batch = hasher.signatures([" ".join(words), " ".join(edited)])
        a, b = batch.shingle_sets()
        errors.append((batch.signatures[0] == batch.signatures[1]).mean() - jaccard(a, b))
    errors = np.array(errors)
    assert len(errors) > 150
    assert abs(errors.mean()) < 0.01  # unbiased
    assert errors.std() < 0.06  # ~ sqrt(J(1-J)/128)


def test_signature_does_not_depend_on_the_batch(reuters_docs):
    hasher = MinHasher()
    texts = [t for _, t in reuters_docs[:50]]
    texts[1::3] = [
        " ".join(t.split()[: i % 6 + 1]) for i, t in enumerate(texts[1::3])
    ]  # 1-6 words: short ones among them
    alone = np.stack([hasher.signatures([t]).signatures[0] for t in texts])
    together = hasher.signatures(texts).signatures
    shuffled = hasher.signatures(texts[::-1]).signatures[::-1]
    assert np.array_equal(alone, together) and np.array_equal(alone, shuffled)


def test_normalization_ignores_case_punctuation_accents_digits():
    hasher = MinHasher(ngram=3)
    batch = hasher.signatures(
        [
            "The café opened in 1987, serving crème brûlée.",
            "the CAFE opened in 2024 -- serving creme brulee!",
            "The café “opened” in 1987; serving crème brûlée…",
            "The cafe closed in 1987, serving creme brulee.",
        ]
    )
    sets = batch.shingle_sets()
    assert np.array_equal(sets[0], sets[1]) and np.array_equal(sets[0], sets[2])
    assert not np.array_equal(sets[0], sets[3])
    assert np.array_equal(batch.signatures[0], batch.signatures[1])


def test_short_and_empty_documents():
    batch = MinHasher(ngram=5).signatures(["two words", "!!! ...", "one two three four five six"])
    assert batch.shingle_counts.tolist() == [1, 0, 2]
    assert batch.has_shingles.tolist() == [True, False, True]


def test_lsh_parameters_favour_recall_above_the_threshold():
    for threshold in (0.5, 0.7, 0.8, 0.9):
        bands, rows = lsh_params(threshold, 128)
        assert bands * rows <= 128
        p = lambda s, rows=rows, bands=bands: 1 - (1 - s**rows) ** bands  # noqa: E731
        assert p(min(threshold + 0.05, 1.0)) >= 0.97
        assert p(threshold - 0.3) <= 0.2  # candidates are verified exactly, so these cost only time


@pytest.mark.parametrize("num_perm", [8, 128, 300])
@pytest.mark.parametrize("path", ["stepped", "default", "looked up"])
def test_densification_follows_each_empty_bins_probe_sequence(num_perm, path):
    """The definition, one bin at a time: empty bin j takes the value of the first filled bin on
    its probe sequence `_probe_table_rows(num_perm, t, t + 1)[0, j]`, t = 0, 1, ...; rows with few
    filled bins look it up by rank, rows with many step along the sequences: same values."""
    sparse_below = {"stepped": 0, "default": minhash.sparse_below(num_perm), "looked up": num_perm + 1}[path]
    rng = np.random.default_rng(num_perm)
    filled = np.zeros((60, num_perm), dtype=bool)
    for row, m in enumerate(np.linspace(1, num_perm, 60).astype(int)):
        filled[row, rng.choice(num_perm, size=m, replace=False)] = True
    filled[:5] = False  # one filled bin: the sparsest rows
    filled[np.arange(5), rng.choice(num_perm, size=5)] = True
    sig = np.where(filled, rng.integers(0, 2**32 - 1, size=filled.shape), 0xFFFFFFFF).astype(np.uint32)
    table = minhash._probe_table_rows(num_perm, 0, 64 * num_perm)
    expected = sig.copy()
    for row in range(len(sig)):
        for j in np.flatnonzero(~filled[row]):
            t = next(t for t in range(len(table)) if filled[row, table[t, j]])
            expected[row, j] = sig[row, table[t, j]]
    order, rank = minhash._probe_orders(num_perm)
    for row in range(len(sig)):
        minhash._densify_row(
            sig[row],
            filled[row],
            int(filled[row].sum()),
            order,
            rank,
            sparse_below,
            np.empty(num_perm, rank.dtype),
            np.empty(num_perm, np.int64),
        )
    np.testing.assert_array_equal(sig, expected)


_MASK = (1 << 64) - 1


def mix(x: int) -> int:
    """mix64 on one Python integer."""
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & _MASK
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def _reference_signature(text: str, num_perm: int, ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """The module docstring's definition, one Python integer at a time (slow): (shingles, signature)."""
    mask = _MASK

    chars = []
    for ch in unicodedata.normalize("NFKD", text).lower():
        if 0x300 <= ord(ch) <= 0x36F:
            continue  # accents: dropped
        separator = (
            (ch.isascii() and not ch.isalnum())
            or 0xA0 <= ord(ch) <= 0xBF
            or 0x2000 <= ord(ch) <= 0x206F
            or 0x3000 <= ord(ch) <= 0x303F
        )
        chars.append(" " if separator else "0" if ch.isascii() and ch.isdigit() else ch)
    words = []
    for word in "".join(chars).split(" "):
        if word:
            words.append(
                mix(sum(c * pow(minhash._WORD_BASE, i, 1 << 64) for i, c in enumerate(word.encode("utf-8"))) & mask)
            )
    multipliers = [int(m) for m in np.resize(minhash._GRAM_MULTIPLIERS, ngram)]
    grams = (
        [words[i : i + ngram] for i in range(len(words) - ngram + 1)]
        if len(words) >= ngram
        else [words]
        if words
        else []
    )
    shingles = sorted({mix(sum(w * m for w, m in zip(g, multipliers)) & mask) >> 32 for g in grams})
    sig = np.full(num_perm, 0xFFFFFFFF, np.uint32)
    filled = np.zeros(num_perm, bool)
    for h in shingles:
        b = (h * num_perm) >> 32
        if not filled[b]:
            sig[b], filled[b] = h, True
    if filled.any():
        table = minhash._probe_table_rows(num_perm, 0, 64 * num_perm)
        for j in np.flatnonzero(~filled):
            sig[j] = sig[next(table[t, j] for t in range(len(table)) if filled[table[t, j]])]
    return np.array(shingles, np.uint32), sig


@pytest.mark.parametrize("num_perm,ngram", [(8, 1), (16, 2), (128, 5), (100, 8), (256, 3)])
def test_signatures_and_shingles_follow_their_definition(reuters_docs, num_perm, ngram):
    """Short, empty, shorter-than-n, accented and non-Latin documents in one batch: each document's
    shingle set and signature are those of the definition computed directly."""
    texts = [t[:400] for _, t in reuters_docs[:40]] + [
        "",
        "!!! ...",
        "one",
        "two words",
        "Ça dépend: ÉTÉ, naïve café. ΟΔΟΣ Σ “quoted” — dash… 東京　都。",
        "e\u0301t\u0301e\u0301 \u00a0nbsp\u00a0 1987 vs 2024",
        "x" * 3000,
        "a b a b a b a b a b a b",
    ]
    batch = MinHasher(num_perm, ngram).signatures(texts)
    for text, shingles, sig in zip(texts, batch.shingle_sets(), batch.signatures):
        expected_shingles, expected_sig = _reference_signature(text, num_perm, ngram)
        np.testing.assert_array_equal(shingles, expected_shingles)
        np.testing.assert_array_equal(sig, expected_sig)


def test_hash_sort_orders_any_values():
    """The bucket sort of shingle hashes: uniform values, many repeats, and values crowded into one
    bucket (the adversarial case for buckets) all come out as np.sort has them."""
    rng = np.random.default_rng(5)
    cases = [rng.integers(0, 2**32, n, dtype=np.uint32) for n in (0, 1, 2, 3, 50, 1000, 200_000)]
    cases += [
        rng.integers(0, 4, 500, dtype=np.uint32),
        rng.integers(0, 2**12, 3000, dtype=np.uint32) + np.uint32(2**31),
        np.full(100, 2**32 - 1, np.uint32),
    ]
    scratch, buckets = np.empty(200_000, np.uint32), np.empty((1 << 16) + 1, np.int64)
    for a in cases:
        got = a.copy()
        minhash._sort_hashes(got, scratch, buckets)
        np.testing.assert_array_equal(got, np.sort(a))


@pytest.mark.parametrize("ascii_only", [True, False])
def test_a_large_document_hashed_in_windows_equals_hashing_it_whole(ascii_only):
    """Documents over `large_bytes` are hashed piece by piece (bounded memory, issue 13 item 7); the
    signature, shingle set and count are exactly those of the whole-document computation."""
    text = (DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8")
    text = text[:300_000] + " Ça dépend: ÉTÉ, naïve café. " * 50
    if ascii_only:
        text = text.encode("ascii", "ignore").decode()
    data = minhash.near_normal_bytes(text)
    whole = MinHasher(ngram=5).signatures_of_normalized([data])
    windowed = MinHasher(ngram=5, large_bytes=1000, piece_bytes=4096)
    got = windowed.signatures_of_normalized([data])
    np.testing.assert_array_equal(got.signatures, whole.signatures)
    np.testing.assert_array_equal(got.shingles, whole.shingles)
    np.testing.assert_array_equal(got.shingle_counts, whole.shingle_counts)
    short = windowed.signatures_of_normalized([b"two words " + b"x" * 2000])  # fewer words than ngram: one shingle
    np.testing.assert_array_equal(
        short.shingles, MinHasher(ngram=5).signatures_of_normalized([b"two words " + b"x" * 2000]).shingles
    )


@pytest.mark.parametrize("ascii_only", [True, False])
def test_a_large_text_normalized_in_pieces_hashes_as_whole(ascii_only):
    """The scan hashes a text over 1M characters from pieces of its normalized bytes, never all of
    them at once: the exact hash, the signature and the shingle set are those of the whole text."""
    import hashlib

    from pretrainkit.dataprep.dedup.scan import hash_inputs, normalized_pieces
    from pretrainkit.dataprep.kernels.digests import blake2b_128

    text = (DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8")
    text = "  \n " + text[:200_000] + " Ça dépend: ÉTÉ, naïve café, ΟΔΟΣ Σ. " * 40 + " \n\t  "
    if ascii_only:
        text = text.encode("ascii", "ignore").decode()
    digest = hashlib.blake2b(digest_size=16)
    pieces = list(normalized_pieces(text, 5000, digest))
    exact_buf, exact_offsets, near_buf, _ = hash_inputs([text])
    exact, near = blake2b_128(exact_buf, exact_offsets, strip=True)[0].tobytes(), near_buf.tobytes()
    assert (
        len(pieces) > 40
        and digest.digest()
        == exact
        == hashlib.blake2b(unicodedata.normalize("NFC", text).strip().encode("utf-8"), digest_size=16).digest()
    )
    if ascii_only:  # (non-ASCII pieces are lowercased whole, ASCII ones later, byte by byte: same words)
        assert b"".join(pieces) == near
    hasher = MinHasher()
    whole, chunked = hasher.signatures_of_normalized([near]), hasher.large_document(pieces)
    np.testing.assert_array_equal(chunked.signatures, whole.signatures)
    np.testing.assert_array_equal(chunked.shingles, whole.shingles)
    np.testing.assert_array_equal(chunked.shingle_counts, whole.shingle_counts)


def test_band_hashes_follow_their_definition():
    """band b of a document: h = 0; for each of its rows r, h = mix64(h * B + value + r + 1) mod 2^64
    (the values an index's `.bands` holds, so a later `--against` finds the same buckets)."""
    mask = _MASK

    signatures = np.random.default_rng(3).integers(0, 2**32, size=(9, 128), dtype=np.uint32)
    for bands, rows in ((16, 8), (9, 14), (3, 5)):
        expected = np.zeros((len(signatures), bands), dtype=np.uint64)
        for d, b in np.ndindex(len(signatures), bands):
            h = 0
            for r in range(rows):
                h = mix((h * minhash._WORD_BASE + int(signatures[d, b * rows + r]) + r + 1) & mask)
            expected[d, b] = h
        np.testing.assert_array_equal(minhash.band_hashes(signatures, bands, rows), expected)


@pytest.mark.parametrize("num_perm", [16, 128, 200])
def test_signatures_of_shingle_sets_are_those_of_the_texts(reuters_docs, num_perm):
    """An --against run hashes an old index's shingle sets again: the same signatures as the texts'
    (short texts with few filled bins, long ones, texts without words, a large document)."""
    hasher = MinHasher(num_perm=num_perm, large_bytes=4096)
    texts = [t for _, t in reuters_docs[:300]] + ["", "one", "a b c d e f", "!!! ..."]
    batch = hasher.signatures(texts)
    assert (batch.shingle_counts == 0).sum() >= 2
    again = hasher.signatures_of_sets(batch.shingles, batch.shingle_counts)
    assert again.shape == batch.signatures.shape and (again == batch.signatures).all()
    large = hasher.large_document([minhash.near_normal_bytes(" ".join(texts[:40]))])
    assert (hasher.signatures_of_sets(large.shingles, large.shingle_counts) == large.signatures).all()
    other = MinHasher(num_perm=num_perm + 1).signatures_of_sets(batch.shingles, batch.shingle_counts)
    assert (other == MinHasher(num_perm=num_perm + 1).signatures(texts).signatures).all()
