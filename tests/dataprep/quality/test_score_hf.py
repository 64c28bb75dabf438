"""The Hugging Face scorer (`dataprep.classifiers.score_hf`) against transformers itself: each text's
regression output, or probability of a label, as the model gives it for the text alone (no padding),
within 1e-4, with the texts batched by length and a long text truncated at the model's maximum;
the labels read from config.json without transformers; bad folders and labels refused in one line."""

from __future__ import annotations

import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from fixtures.corpora import ROOT, reuters_documents
from pretrainkit.dataprep.classifiers.score_hf import BATCH_SIZE, HFClassifier, hf_labels
from pretrainkit.dataprep.classifiers.score_models import ClassifierSpec, check_classifier, int_score
from pretrainkit.errors import UserError


def texts() -> list[str]:
    """Articles of every length (several batches of them), an empty text and one past 128 tokens."""
    docs = [t for _, t in reuters_documents(1)[:70]]
    return [*docs, "", "word " * 400]


@pytest.mark.parametrize("head, label", [("regression", None), ("labels", 2)])
def test_each_score_is_transformers_for_the_text_alone(bert_models, head, label):
    lines = texts()
    assert len(lines) > 2 * BATCH_SIZE
    got = HFClassifier.load(bert_models[head]).scores(lines, label)
    tokenizer = AutoTokenizer.from_pretrained(bert_models[head])
    model = AutoModelForSequenceClassification.from_pretrained(bert_models[head]).eval()
    with torch.inference_mode():
        for text, score in zip(lines, got):
            logits = model(**tokenizer(text, truncation=True, max_length=128, return_tensors="pt")).logits[0]
            want = float(logits[0] if label is None else torch.softmax(logits, -1)[label])
            assert abs(score - want) < 1e-4, (text[:40], score, want)
    assert len(set(np.round(got, 4))) > 50, "a model whose outputs differ from text to text"


def test_labels_come_from_the_config_and_a_label_is_checked(bert_models, tmp_path):
    assert hf_labels(bert_models["regression"]) == []
    assert hf_labels(bert_models["labels"]) == ["low", "high", "mid"]
    assert check_classifier(ClassifierSpec(str(bert_models["labels"]), "mid")).label_index == 2
    assert check_classifier(ClassifierSpec(str(bert_models["labels"]), "1")).label_index == 1
    cases = [
        (ClassifierSpec(str(bert_models["labels"]), "top"), "no label 'top' (the model's labels: low, high, mid)"),
        (ClassifierSpec(str(bert_models["labels"])), "name the label to score (the model's labels: low, high, mid)"),
        (ClassifierSpec(str(bert_models["regression"]), "high"), "a regression head (one output) has no labels"),
        (ClassifierSpec(str(tmp_path)), "not a Hugging Face model folder (no readable config.json"),
        (ClassifierSpec(str(tmp_path / "missing")), "no such classifier"),
    ]
    for spec, message in cases:
        with pytest.raises(UserError) as e:
            check_classifier(spec)
        assert str(e.value).startswith(f"{spec.model}: {message}") and "\n" not in str(e.value)


def test_damaged_or_missing_weights_are_one_line_before_any_model_loads(bert_models, tmp_path):
    truncated, blank = tmp_path / "truncated", tmp_path / "blank"
    shutil.copytree(bert_models["regression"], truncated)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    shutil.copytree(bert_models["regression"], blank)
    (blank / "model.safetensors").unlink()
    cases = [
        (truncated, f"{weights}: not a whole safetensors file (Error while deserializing header: incomplete metadata"),
        (blank, f"{blank}: no model weights (model.safetensors, model.safetensors.index.json or pytorch_model.bin)"),
    ]
    for folder, message in cases:
        with pytest.raises(UserError) as e:
            check_classifier(ClassifierSpec(str(folder)))
        assert str(e.value).startswith(message) and "\n" not in str(e.value), e.value


def test_int_score_is_fineweb_edus_rounding():
    # FineWeb-Edu: int(round(max(0, min(score, 5)))), Python's round (half to even)
    assert [int_score(s) for s in (-0.7, 0.49, 0.5, 1.5, 2.5, 3.5, 4.51, 7.2)] == [0, 0, 0, 2, 2, 4, 5, 5]


def test_transformers_is_imported_only_for_a_hugging_face_model():
    code = (
        "import sys\n"
        "from pretrainkit.dataprep.quality import score_cli, score\n"
        "from pretrainkit.dataprep.filter import steps\n"
        "assert 'transformers' not in sys.modules and 'torch' not in sys.modules, sorted(sys.modules)\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
