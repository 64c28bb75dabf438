"""A classifier as `ptk score` and the `classifier` filter step name it, checked, and its scorer.

    spec = ClassifierSpec("dclm.bin", label="hq", name="dclm")
    checked = check_classifier(spec)          # UserError (one line) unless the model and label are usable
    scorer = load_scorer(checked)             # in a worker: scorer.scores(texts) -> rounded floats
    fields = checked.fields                   # ("score_dclm",), or also "int_score_NAME" for a regression head

MODEL is a fastText `.bin`/`.ftz` file (`pretrainkit.dataprep.classifiers.score_fasttext`: the score is
the probability of the label, which must be given) or a Hugging Face sequence-classification folder
(`pretrainkit.dataprep.classifiers.score_hf`: the regression output of a one-output head, with
`int_score_NAME` as FineWeb-Edu rounds it, int(round(max(0, min(score, 5)))); or the probability of
the label of a head with several). A label is named as the model names it, fastText's with or
without `__label__` (`hq`, `__label__hq`); a Hugging Face label also by its index. Checking loads no
model: a fastText file is read through (its matrices mapped, their sizes checked), a Hugging Face
folder's config.json read and its safetensors files' headers checked against their sizes.
Scores are rounded to SCORE_DECIMALS, so that a record shows the model's figures, not float noise.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.classifiers.fasttext_model import MAGIC
from pretrainkit.dataprep.classifiers.score_fasttext import FastTextClassifier, read_model_file
from pretrainkit.dataprep.classifiers.score_hf import (
    HFClassifier,
    check_hf_weights,
    hf_labels,
)  # transformers: when a model loads
from pretrainkit.errors import UserError, quoted

SCORE_DECIMALS = 6
FASTTEXT, HUGGING_FACE = "fasttext", "hf"
FASTTEXT_LABEL = "__label__"
EDU_MAX = 5  # FineWeb-Edu's int_score: the regression output clipped to [0, 5], rounded


@dataclass(frozen=True)
class ClassifierSpec:
    """A classifier as a command line or a filters file gives it: picklable, carried to the workers."""

    model: str
    label: str | None = None
    name: str | None = None  # the field is score_NAME; None: from the model's file name
    device: str = "cpu"  # where a Hugging Face model runs

    @property
    def field_name(self) -> str:
        return self.name or re.sub(r"\W", "_", Path(self.model).name.split(".")[0]) or "model"


@dataclass(frozen=True)
class CheckedClassifier:
    spec: ClassifierSpec
    kind: str  # FASTTEXT or HUGGING_FACE
    label_index: int | None  # None: a regression head's one output

    @property
    def score_field(self) -> str:
        return f"score_{self.spec.field_name}"

    @property
    def fields(self) -> tuple[str, ...]:
        """The fields it adds to a record, its score's first."""
        if self.label_index is None:
            return (self.score_field, f"int_score_{self.spec.field_name}")
        return (self.score_field,)


def model_files(model: str) -> list[str]:
    """The files of a classifier: its fastText file, or its Hugging Face folder's files (what a worker
    reads; a changed one is another plan)."""
    path = Path(model)
    return sorted(str(p) for p in path.iterdir() if p.is_file()) if path.is_dir() else [model]


def _is_fasttext(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(4) == MAGIC.to_bytes(4, "little")


def check_classifier(spec: ClassifierSpec) -> CheckedClassifier:
    """`spec` with its model's kind and the label's index; UserError, one line naming the model, for a
    missing model, a file that is neither kind of model, a label the model lacks or one left out."""
    path = Path(spec.model)
    if path.is_dir():
        labels, kind, shown = hf_labels(path), HUGGING_FACE, None
        check_hf_weights(path)
    elif path.is_file():
        if not _is_fasttext(path):
            raise UserError(f"{path}: not a classifier (neither a fastText .bin/.ftz nor a Hugging Face model folder)")
        labels, kind = read_model_file(path).words.labels(), FASTTEXT
        shown = [label.removeprefix(FASTTEXT_LABEL) for label in labels]
    else:
        raise UserError(f"{path}: no such classifier (a fastText .bin/.ftz file or a Hugging Face model folder)")
    names = ", ".join(shown or labels)
    if kind == HUGGING_FACE and not labels:
        if spec.label is not None:
            raise UserError(
                f"{path}: a regression head (one output) has no labels; leave out the label {quoted(spec.label)}"
            )
        return CheckedClassifier(spec, kind, None)
    if spec.label is None:
        raise UserError(f"{path}: name the label to score (the model's labels: {names})")
    candidates = [spec.label, FASTTEXT_LABEL + spec.label] if kind == FASTTEXT else [spec.label]
    index = next((labels.index(c) for c in candidates if c in labels), None)
    if index is None and kind == HUGGING_FACE and spec.label.isdigit() and int(spec.label) < len(labels):
        index = int(spec.label)
    if index is None:
        raise UserError(f"{path}: no label {quoted(spec.label)} (the model's labels: {names})")
    return CheckedClassifier(spec, kind, index)


class Scorer:
    """A loaded classifier: its fields' values for a batch of texts."""

    def __init__(self, checked: CheckedClassifier):
        self.checked = checked
        path = Path(checked.spec.model)
        if checked.kind == FASTTEXT:
            self.model = FastTextClassifier.load(path)
            self._scores = lambda texts: self.model.probabilities(texts, checked.label_index)
        else:
            self.model = HFClassifier.load(path, checked.spec.device)
            self._scores = lambda texts: self.model.scores(texts, checked.label_index)

    def scores(self, texts: list[str]) -> list[float]:
        """Each text's score, rounded to SCORE_DECIMALS."""
        return np.round(self._scores(texts), SCORE_DECIMALS).tolist()

    def fields(self, texts: list[str]) -> list[dict[str, float | int]]:
        """Each text's fields (`CheckedClassifier.fields`)."""
        names = self.checked.fields
        if len(names) == 1:
            return [{names[0]: s} for s in self.scores(texts)]
        return [{names[0]: s, names[1]: int_score(s)} for s in self.scores(texts)]


def int_score(score: float) -> int:
    """A regression output as FineWeb-Edu's `int_score`: clipped to [0, EDU_MAX], rounded (half to even)."""
    return int(round(max(0, min(score, EDU_MAX))))


_LOADED: dict[tuple, Scorer] = {}  # per process: a worker loads a run's models once
MOST_LOADED = 8  # models kept loaded in a process; more (a long-lived process of many runs): all dropped


def load_scorer(checked: CheckedClassifier) -> Scorer:
    """The classifier loaded, once per process while its files stay as they are (size, time)."""
    stamps = tuple((f, os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in model_files(checked.spec.model))
    key = (checked, stamps)
    if key not in _LOADED:
        if len(_LOADED) >= MOST_LOADED:
            _LOADED.clear()
        _LOADED[key] = Scorer(checked)
    return _LOADED[key]
