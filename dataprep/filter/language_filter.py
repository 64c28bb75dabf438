"""The language step: every document's language and score, from the model of
`pretrainkit.dataprep.filter.language`; documents in other languages, or identified with too low a
score, removed.

    step = LanguageStep(LanguageSettings(languages=["en", "de"], min_score=0.65))
    step.check(doc)     # doc.fields gains lang ("en", ISO 639-1, or "und") and lang_score

`languages` None keeps every language (the documents are only labelled). FineWeb kept English
documents scored 0.65 or more by fastText's lid.176 (datatrove `LanguageFilter`'s
`language_threshold`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pretrainkit.dataprep.filter.rules import Doc, Removal, below


@dataclass(frozen=True)
class LanguageSettings:
    languages: list[str] | None = None  # ISO 639-1 codes to keep; None: all
    min_score: float | None = None


class LanguageStep:
    name = "language"

    def __init__(self, settings: LanguageSettings):
        from pretrainkit.dataprep.filter import language  # the model loads once per process, when a run needs it

        self.identify_many = language.identify_many
        self.s = settings
        self.keep = frozenset(settings.languages) if settings.languages is not None else None

    def check(self, doc: Doc) -> Removal | None:
        return self.check_many([doc])[0]

    def check_many(self, docs: list[Doc]) -> list[Removal | None]:
        """`check` of each document, the model reading their samples together (`identify_many`)."""
        answers = self.identify_many([doc.text for doc in docs])
        return [self._verdict(doc, lang, score) for doc, (lang, score) in zip(docs, answers)]

    def _verdict(self, doc: Doc, lang: str, score: float) -> Removal | None:
        doc.fields["lang"], doc.fields["lang_score"] = lang, score
        if self.keep is not None and lang not in self.keep:
            return Removal(f"{self.name}.languages", lang, sorted(self.keep))
        return below(self.name, "min_score", score, self.s.min_score)
