"""The classifier step: a quality classifier's score for every document (as `ptk score` computes it,
`pretrainkit.dataprep.classifiers.score_models`), documents scored below `min_score` removed.

    filters:
      - classifier: {model: dclm.bin, label: hq, min_score: 0.018}     # DCLM's fastText classifier
      - classifier: {model: fineweb-edu-classifier/, min_score: 3}      # FineWeb-Edu's regression head

The kept record gains `score_NAME` (NAME: `name`, else the model's file name), and `int_score_NAME`
for a regression head; a removed document's row has the filter `classifier.min_score`, its score as
the value and the threshold. `min_score` null (or left out) only scores. A relative model path is
the filters file's folder's; the model and label are checked when the file is read (one line naming
the file and key).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from pretrainkit.arguments import number_in
from pretrainkit.dataprep.classifiers.score_models import ClassifierSpec, check_classifier, load_scorer
from pretrainkit.dataprep.filter.rules import RANGE, Doc, Removal
from pretrainkit.errors import UserError
from pretrainkit.remote.staging import local_copy
from pretrainkit.remote.urls import is_url

SCORES = number_in(0, 1e9)  # a probability, or a regression output (FineWeb-Edu's 0 to 5)


@dataclass(frozen=True)
class ClassifierSettings:
    model: str
    label: str | None = None
    name: str | None = None
    min_score: float | None = field(default=None, metadata={RANGE: SCORES})  # not a fraction: FineWeb-Edu's is 3

    @property
    def spec(self) -> ClassifierSpec:
        return ClassifierSpec(self.model, self.label, self.name)


def checked_settings(settings: ClassifierSettings, folder: Path, where: str) -> ClassifierSettings:
    """`settings` with the model's path absolute (a relative one is `folder`'s: the filters file's; a URL
    is fetched and its local copy named), its model and label checked; a UserError naming `where` (the
    file and the step) otherwise."""
    model = local_copy(settings.model) if is_url(settings.model) else (folder / settings.model).absolute()
    settings = replace(settings, model=str(model))
    try:
        check_classifier(settings.spec)
    except UserError as e:
        raise UserError(f"{where}.model: {e}") from None
    return settings


class ClassifierStep:
    name = "classifier"

    def __init__(self, settings: ClassifierSettings):
        self.s = settings
        self.checked = check_classifier(settings.spec)
        self.scorer = load_scorer(self.checked)  # once per process (`score_models.load_scorer`)

    def check(self, doc: Doc) -> Removal | None:
        return self.check_many([doc])[0]

    def check_many(self, docs: list[Doc]) -> list[Removal | None]:
        """`check` of each document, the model reading their texts together."""
        verdicts = []
        least = self.s.min_score
        for doc, fields in zip(docs, self.scorer.fields([doc.text for doc in docs])):
            doc.fields.update(fields)
            score = fields[self.checked.score_field]  # in full: a score is close to its threshold more often than not
            verdicts.append(
                Removal(f"{self.name}.min_score", score, least) if least is not None and score < least else None
            )
        return verdicts
