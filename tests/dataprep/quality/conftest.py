"""Classifiers for the scoring tests, trained or built here once per session: fastText models by
fastText's own trainer (in a subprocess), tiny random BERT heads with their tokenizers."""

from __future__ import annotations

from pathlib import Path

import pytest

from fixtures.corpora import DATA, need_data
from fixtures.quality_models import labelled_file, tiny_bert, train_fasttext

# name -> (training settings, quantize settings): every output and input kind the scorer reads
FASTTEXT_MODELS = {
    "softmax-bigrams.bin": ({"loss": "softmax", "wordNgrams": 2}, None),
    "softmax-subwords.ftz": (
        {"loss": "softmax", "wordNgrams": 2, "minn": 3, "maxn": 5},
        {"cutoff": 500, "dsub": 2, "retrain": False},
    ),
    "softmax-dim4.bin": ({"loss": "softmax", "wordNgrams": 2, "dim": 4}, None),  # too few dims to project its rows
    "hs-subwords.bin": ({"loss": "hs", "minn": 2, "maxn": 4}, None),
    "ova-trigrams.bin": ({"loss": "ova", "wordNgrams": 3}, None),
}


@pytest.fixture(scope="session")
def fasttext_models(tmp_path_factory) -> dict[str, Path]:
    need_data(DATA)
    root = tmp_path_factory.mktemp("fasttext-models")
    train = labelled_file(root / "train.txt")
    return {
        name: train_fasttext(train, root / name, quantize, **settings)
        for name, (settings, quantize) in FASTTEXT_MODELS.items()
    }


@pytest.fixture(scope="session")
def bert_models(tmp_path_factory) -> dict[str, Path]:
    """A regression head (one output) and a head of three labels (low, high, mid)."""
    need_data(DATA)
    root = tmp_path_factory.mktemp("bert-models")
    return {"regression": tiny_bert(root / "regression", 1), "labels": tiny_bert(root / "labels", 3, seed=1)}
