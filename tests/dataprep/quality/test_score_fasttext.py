"""The fastText scorer (`dataprep.classifiers.score_fasttext`) against fastText's own C++ `predict` (the
fasttext-predict package): the probability of every label of models fastText trained here (softmax
with word bigrams, quantized and pruned with subwords, hierarchical softmax, one-vs-all with
trigrams; dense ones read through their projected rows and, with too few dimensions for that, as
fastText adds them) within 1e-4 on real documents and on lines whose tokens fastText reads in its
own way; and files that are no classifier refused in one line."""

from __future__ import annotations

import fasttext
import pytest

from fixtures.corpora import pep_documents, reuters_documents
from pretrainkit.dataprep.classifiers.score_fasttext import FastTextClassifier
from pretrainkit.errors import UserError

SPECIAL = [
    "",
    " ",
    "\n\n",
    "a",
    "__label__pep and __label__news in the text",
    "stops at </s> the end",
    "hello\x00world and\tmore\x0bwords\x0cthan\rthat",
    "ça c'est très façile à lire, n'est-ce pas",
    "これは日本語の文です 😀",
    "x" * 3000,
]


def texts() -> list[str]:
    """Documents the models were not trained on (their training set took the first ones), and SPECIAL."""
    return [t for _, t in reuters_documents(4)[900:1000]] + [t for _, t in pep_documents()[300:350]] + SPECIAL


def reference(model, text: str, label: str) -> float:
    """fastText's probability of `label` for the text as DCLM reads it (line feeds as spaces); 0 where
    fastText predicts nothing or leaves the label out (below its threshold)."""
    labels, probabilities = model.predict(text.replace("\n", " "), k=-1, threshold=0.0)
    return dict(zip(labels, probabilities)).get(label, 0.0)


@pytest.mark.parametrize(
    "name", ["softmax-bigrams.bin", "softmax-subwords.ftz", "softmax-dim4.bin", "hs-subwords.bin", "ova-trigrams.bin"]
)
def test_the_probability_of_every_label_is_fasttexts(fasttext_models, name):
    path = fasttext_models[name]
    ours, theirs = FastTextClassifier.load(path), fasttext.load_model(str(path))
    assert ours.labels == ["__label__news", "__label__pep"]
    lines = texts()
    for index, label in enumerate(ours.labels):
        got = ours.probabilities(lines, index)
        want = [reference(theirs, t, label) for t in lines]
        worst = max(abs(g - w) for g, w in zip(got, want))
        assert worst < 1e-4, (name, label, worst)
    news = ours.probabilities(lines[:100], 0)
    assert sum(news > 0.5) > 80, "the news model finds news: the comparison is of a model that learnt something"
    assert len(ours.projected) == (0 if name in ("softmax-subwords.ftz", "softmax-dim4.bin") else len(ours.dense))


def test_a_file_that_is_no_fasttext_model_is_one_line(tmp_path, fasttext_models):
    text = tmp_path / "notes.bin"
    text.write_text("not a model\n")
    cut = tmp_path / "cut.bin"
    cut.write_bytes(fasttext_models["softmax-bigrams.bin"].read_bytes()[:5000])
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    for path in (text, cut, empty):
        with pytest.raises(UserError) as e:
            FastTextClassifier.load(path)
        assert str(e.value).startswith(f"{path}: not a ") and "\n" not in str(e.value)
