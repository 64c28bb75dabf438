"""The fastText reader (`dataprep.classifiers.fasttext_model`) against fastText's own C++ `predict`
(the fasttext-predict package, a test dependency): the same label and the same float score for every
sample the language step reads of real documents in 23 languages, and for the lines whose tokens
fastText treats specially."""

from __future__ import annotations

import random

import fasttext
import pytest

from fixtures import language_documents as ld
from pretrainkit.dataprep.classifiers.fasttext_model import FastTextModel
from pretrainkit.dataprep.filter import language
from pretrainkit.errors import UserError

# Lines whose tokens fastText reads in its own way: no token but the line's end, NUL and the other
# ASCII separators, a token that looks like a label, "</s>" or a line feed inside the text (fastText
# stops there), a token longer than any word, scripts outside Latin, emoji, Unicode spaces (no
# separators to fastText).
SPECIAL_LINES = [
    "",
    " ",
    "a",
    "hello\x00world and\tmore\x0bwords\x0cthan\rthat",
    "__label__de das ist ein deutscher satz",
    "__label__ alone and __label__xx",
    "das ist </s> the end of it",
    "the first line\nund die zweite zeile auf deutsch",
    "</s>",
    "x" * 5000,
    "ça c'est très façile à lire, n'est-ce pas",
    "это предложение на русском языке",
    "これは日本語の文です",
    "😀 emoji 🚀 text ✨",
    "\u00a0non-breaking\u2003spaces\u3000inside",
]


@pytest.fixture(scope="module")
def models() -> tuple[FastTextModel, object]:
    path = language.model_path()
    return FastTextModel.load(path), fasttext.load_model(str(path)).f


def reference(model, line: str) -> tuple[str, float] | None:
    found = model.predict(line + "\n", 1, 0.0, "strict")
    return (found[0][1], found[0][0]) if found else None


@pytest.mark.slow  # fastText's predict on every sample; the fast tier compares random and odd lines with it
def test_same_labels_and_scores_as_fasttext_on_every_sample(models):
    ours, theirs = models
    missing = ld.missing_sources()
    if missing:
        pytest.fail(f"the translated man pages and catalogues this test reads are absent: {', '.join(missing)}")
    documents = ld.man_page_documents() + ld.catalogue_documents()
    lines = [
        language._normalized(d.text[:chars] if chars <= language.HEAD_CHARS else language._sample(d.text, chars))
        for d in documents
        for chars, _ in language.STEPS
    ]
    assert len(lines) > 10_000
    differ = [(line[:80], ours.predict(line), reference(theirs, line)) for line in lines]
    differ = [d for d in differ if d[1] != d[2]]
    assert not differ, f"{len(differ)} of {len(lines)} samples differ, e.g. {differ[:3]}"


@pytest.mark.parametrize("line", SPECIAL_LINES)
def test_same_answer_on_lines_fasttext_reads_in_its_own_way(models, line):
    ours, theirs = models
    assert ours.predict(line) == reference(theirs, line)


def test_same_answer_on_random_lines(models):
    ours, theirs = models
    rng = random.Random(7)
    pieces = [*"abcdefghijklmnopqrstuvwxyz   \n\t\x0b\x0c\r\x00..,;'<>/_-", "</s>", "__label__", "😀", "\u00a0", "ß"]
    pieces += [chr(c) for c in range(0x80, 0x3000, 37)]
    lines = ["".join(rng.choice(pieces) for _ in range(rng.randint(0, 120))) for _ in range(3000)]
    differ = [line for line in lines if ours.predict(line) != reference(theirs, line)]
    assert not differ, f"{len(differ)} of {len(lines)} random lines differ, e.g. {differ[:3]!r}"


def test_a_file_that_is_no_model_is_one_line_error(tmp_path):
    path = tmp_path / "lid.ftz"
    path.write_bytes(b"not a model at all")
    with pytest.raises(UserError, match=f"^{path}: not a fastText model file"):
        FastTextModel.load(path)


def test_a_truncated_model_is_one_line_error(tmp_path):
    path = tmp_path / "lid.ftz"
    path.write_bytes(language.model_path().read_bytes()[:500_000])
    with pytest.raises(UserError, match=f"^{path}: not a readable fastText model") as raised:
        FastTextModel.load(path)
    assert "\n" not in str(raised.value)
