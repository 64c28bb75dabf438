"""The language of a document whose paragraphs were removed, identified again on the text left, so
that no `lang` label outlives the text it was found on (a translated page that loses its English
paragraphs is no longer English).

    relabel = Relabel(["en"])                   # or Relabel(None): relabel only, remove nothing
    removal = relabel.check(document, doc)      # doc: the text left; None: kept
    relabel.relabelled                          # kept documents whose `lang` changed so far

Only a document whose text changed is read again (the write stage calls this for those alone), with
`ptk filter`'s language step (`pretrainkit.dataprep.filter.language_filter`: the same model, samples
and labels), whose model a worker loads once, on its first such document. A record that had a
`lang` field gets the new `lang` (and `lang_score`, where it had that field too); one without keeps
its fields, yet is still judged when `languages` is given. With `languages`, a document identified
in none of them is removed as `paragraphs.languages` (value: its language; threshold: the codes).
"""

from __future__ import annotations

from pretrainkit.dataprep.filter.language_filter import LanguageSettings, LanguageStep
from pretrainkit.dataprep.filter.records import record_object
from pretrainkit.dataprep.filter.rules import Doc, Removal
from pretrainkit.dataprep.readers import Document

LANGUAGES_REASON = "paragraphs.languages"
LABEL_FIELDS = ("lang", "lang_score")  # what `ptk filter`'s language step writes


class Relabel:
    def __init__(self, languages: list[str] | None):
        self.languages = languages
        self._step: LanguageStep | None = None  # built on the first document read: it loads the model
        self.relabelled = 0  # kept documents whose `lang` changed

    def check(self, document: Document, doc: Doc) -> Removal | None:
        """Relabel `doc` (the text left of `document`) in `doc.fields` and judge it (module docstring)."""
        record = record_object(document)
        labels = [f for f in LABEL_FIELDS if f in record] if "lang" in record else []
        if not labels and self.languages is None:
            return None
        if self._step is None:
            self._step = LanguageStep(LanguageSettings(languages=self.languages))
        removal = self._step.check(doc)  # sets lang and lang_score
        if removal is not None:
            return Removal(LANGUAGES_REASON, removal.value, removal.threshold)
        self.relabelled += bool(labels) and doc.fields["lang"] != record["lang"]
        for name in LABEL_FIELDS:  # only the labels the record had are rewritten
            if name not in labels:
                del doc.fields[name]
        return None
