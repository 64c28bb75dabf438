"""Gopher's n-gram measures, compiled (`kernels.ngram_repeats`), give what their Python definition
gives: on random texts of a few words (every n-gram repeats somewhere, runs overlap, repeats of
repeats), and on real texts. The kernel reads only the positions whose shorter n-gram repeated, so
these cover the cases where that pruning could lose one: repeats that begin inside a repeat, ties
for the most common n-gram, texts shorter than n."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from pretrainkit.dataprep.filter.kernels import ngram_repeats, scan_words

MOST_N = 10


def expected(words: list[str], n: int) -> tuple[int, int]:
    """(top, repeated) for n as `ngram_repeats` documents them, from the words themselves."""
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    most = max(counts.values(), default=0)
    top = 0
    if most > 1:
        best = next(g for g in grams if counts[g] == most)  # the first to occur among equally common ones
        top = (sum(map(len, best)) + n - 1) * most
    seen, repeated, i = set(), 0, 0
    while i < len(grams):
        if grams[i] in seen:
            repeated += sum(map(len, grams[i]))
            i += n
        else:
            seen.add(grams[i])
            i += 1
    return top, repeated


def check(text: str) -> None:
    words = text.split()
    top, repeated = (a.tolist() for a in ngram_repeats(scan_words(text), MOST_N))
    for n in range(2, MOST_N + 1):
        want = expected(words, n)
        if want[0] == 0:  # the kernel stops at the first n without a repeat: every later count is 0
            assert top[n:] == repeated[n:] == [0] * (MOST_N + 1 - n), text
            break
        assert (top[n], repeated[n]) == want, (n, text)


@pytest.mark.parametrize("vocabulary", [["a", "b"], ["a", "bb", "ccc"], ["x", "y", "z", "w", "v"]])
def test_random_texts_of_few_words(vocabulary):
    rng = random.Random(len(vocabulary))
    for _ in range(1500):
        check(" ".join(rng.choices(vocabulary, k=rng.randint(0, 70))))


def test_repeated_blocks_with_variations():
    rng = random.Random(5)
    block = "one two three four five six seven eight nine ten eleven".split()
    for _ in range(500):
        words = []
        for _ in range(rng.randint(1, 6)):
            piece = block[rng.randint(0, 5) : rng.randint(6, len(block))]
            if rng.random() < 0.5:
                piece[rng.randrange(len(piece))] = rng.choice(["X", "two", "ten"])
            words += piece
        check(" ".join(words))


def plain_words(text: str) -> list[str]:
    """The text's words as plain runs of letters and digits, so that `str.split` finds the words the
    kernel finds."""
    return "".join(c if c.isalnum() else " " for c in text).split()


def test_real_texts(license_docs):
    for _, text in license_docs:
        check(" ".join(plain_words(text)))
