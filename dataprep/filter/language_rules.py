"""The language-dependent parts of the Gopher, C4 and FineWeb rules, per language: stop words, the
range of a word's mean length, how many characters make a word, the marks that end a sentence.

    rules = rules_for("de")        # LanguageRules, from FineWeb-2's German config
    rules_for("en"), rules_for(None)   # None: English, or no language step: the settings as given
    rules_for("eml")               # tuned False: the language-dependent rules are off (and counted)

The filters file's settings are English's (FineWeb ran them on English). A document the language
step labelled with another language gets that language's values for the rules that depend on it:
- stop words and the mean word length's range: FineWeb-2's per-language configs
  (`data/fineweb2.json`, `data/README.md`: source, commit, licence; several configs of one language,
  e.g. Serbian in two scripts, are merged: their stop words together, the widest range);
- words: `kernels.words_of(..., unicode=True)` (marks inside words, a character of an unspaced script a
  word); for Chinese, Japanese, Thai, Lao, Khmer and Myanmar a word is `chars_per_word` such tokens
  (the characters per English word measured on parallel text for `ptk decontaminate`:
  `pretrainkit.dataprep.kernels.scripts`), so word counts (Gopher's 50 words, C4's 3 words a
  line), n-grams' n and FineWeb's short line scale by it, and the mean word length (of one-character
  tokens) is not measured;
- stop words of an unspaced script, and Korean's (particles, which FineWeb-2's word tokenizer splits
  off the words that carry them), are found anywhere in the text, not as words;
- sentence ends (C4) and line ends (FineWeb's share of lines ending in punctuation): the language's
  own marks too (。！？ need no space after them); Thai and Lao have none, so C4's sentence count and
  FineWeb's punctuation share are off for them. FineWeb's threshold stays English's: FineWeb-2 tuned
  one per language on its own crawl (0 for German, 0.333 for Vietnamese), and on the Debian
  Administrator's Handbook (trafilatura's text) its Vietnamese one kept 16.7 points less of the
  translated pages than of the same pages in English (English's, with the language's marks: 8.3;
  docs/filter.md).
A rule the filters file turns off (null) is off in every language. A language with no config (every
code lid.176 outputs that FineWeb-2 did not tune, and "und") gets rules with `tuned` False: the
stop-word, word-length and punctuation-share rules are off for it, and `ptk filter`'s summary and
stats count its documents.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Generic, TypeVar

from pretrainkit.dataprep.kernels.scripts import UNSPACED_SCRIPTS, WORD_UNITS

ENGLISH = "en"
DATA = Path(__file__).resolve().parent / "data" / "fineweb2.json"
# characters per word of the languages written without spaces between words: a word's WORD_UNITS over
# a character's units of the script (Chinese 12 / 7: 1.71 Han characters a word; Thai 6 code points;
# Japanese's mix, about a quarter Han and the rest kana, 3 characters a word)
_UNITS = {name: units for name, units, _ in UNSPACED_SCRIPTS}
_SOUTHEAST_ASIAN = WORD_UNITS / _UNITS["southeast asian"]
_HAN = WORD_UNITS / _UNITS["han"]
CHARS_PER_WORD = {
    "zh": _HAN,
    "yue": _HAN,
    "wuu": _HAN,
    "ja": 3.0,
    "th": _SOUTHEAST_ASIAN,
    "lo": _SOUTHEAST_ASIAN,
    "km": _SOUTHEAST_ASIAN,
    "my": _SOUTHEAST_ASIAN,
}
STOP_WORDS_IN_TEXT = frozenset({*CHARS_PER_WORD, "ko"})
# the marks that end a sentence for C4's count, beyond ".!?" (which every language keeps: Latin text
# in any page); where they need no space after them; the languages that have none
SENTENCE_MARKS = {
    "zh": "。！？",
    "yue": "。！？",
    "wuu": "。！？",
    "ja": "。！？",
    "ar": "؟",
    "fa": "؟",
    "ur": "؟۔",
    "hi": "।॥",
    "mr": "।॥",
    "ne": "।॥",
    "bn": "।॥",
    "pa": "।॥",
    "hy": "։",
    "am": "።፧",
    "el": "\u037e",
    "km": "។",
    "my": "။",
}
UNSPACED_SENTENCE_MARKS = frozenset({"zh", "yue", "wuu", "ja", "km", "my"})
NO_SENTENCE_MARKS = frozenset({"th", "lo"})
# the steps that turn rules off for a language without rules (their documents are counted)
RULES_OFF_STEPS = ("gopher_quality", "fineweb_quality")
ENGLISH_CHARS_PER_WORD = 6  # with the space after it: FineWeb's short line, 30 characters, is 5 English words


@dataclass(frozen=True)
class LanguageRules:
    lang: str
    stop_words: tuple[str, ...]  # (): the stop-word rule is off
    stop_words_in_text: bool  # found anywhere in the text, not as words
    min_mean_word_length: float | None  # None: off
    max_mean_word_length: float | None
    line_punctuation: bool  # its lines end in marks: FineWeb's punctuation share applies
    chars_per_word: float  # word tokens per word: 1, or an unspaced script's characters per word
    sentence_marks: str  # that end a sentence for C4 ("" where the language has none)
    space_after_sentence: bool  # a sentence mark ends a sentence only before a space
    tuned: bool  # False: a language without a config

    def words(self, count: int | None) -> int | None:
        """A count of words (a threshold) in this language's word tokens."""
        return None if count is None else math.ceil(count * self.chars_per_word - 1e-9)

    @property
    def unspaced(self) -> bool:
        return self.chars_per_word != 1.0


@functools.cache
def _configs() -> dict[str, dict]:
    return json.loads(DATA.read_text(encoding="utf-8"))["languages"]


@functools.cache
def rules_for(lang: str | None) -> LanguageRules | None:
    """The rules of documents labelled `lang`: None for English and for documents no language step
    labelled (the filters file's settings, as they are); for a language without a config, rules with the
    language-dependent ones off (`tuned` False)."""
    if lang is None or lang == ENGLISH:
        return None
    config = _configs().get(lang)
    marks = "" if lang in NO_SENTENCE_MARKS else ".!?" + SENTENCE_MARKS.get(lang, "")
    common = dict(
        lang=lang,
        chars_per_word=CHARS_PER_WORD.get(lang, 1.0),
        sentence_marks=marks,
        space_after_sentence=lang not in UNSPACED_SENTENCE_MARKS,
        stop_words_in_text=lang in STOP_WORDS_IN_TEXT,
    )
    if config is None:
        return LanguageRules(
            stop_words=(),
            min_mean_word_length=None,
            max_mean_word_length=None,
            line_punctuation=False,
            tuned=False,
            **common,
        )
    unspaced = lang in CHARS_PER_WORD
    return LanguageRules(
        stop_words=tuple(config["stop_words"]),
        min_mean_word_length=None if unspaced else config["min_mean_word_length"],
        max_mean_word_length=None if unspaced else config["max_mean_word_length"],
        line_punctuation=lang not in NO_SENTENCE_MARKS,
        tuned=True,
        **common,
    )


Rules = TypeVar("Rules")


class PerLanguage(Generic[Rules]):
    """A step's rules per language, each made once, when a document first needs them: English's (also
    those of documents no language step labelled) as the step made them from its settings.

        self.rules = PerLanguage(english_rules, lambda language: made_for(language))
        rules = self.rules(doc.fields.get("lang"))
    """

    def __init__(self, english: Rules, made: Callable[[LanguageRules], Rules]):
        self.english = english
        self.made = made
        self.by_language: dict[str, Rules] = {}

    def __call__(self, lang: str | None) -> Rules:
        rules = rules_for(lang)
        if rules is None:
            return self.english
        if lang not in self.by_language:
            self.by_language[lang] = self.made(rules)
        return self.by_language[lang]


def untuned(doc_fields: dict) -> str | None:
    """The language of a document (its `lang` field) that has no rules of its own, else None."""
    rules = rules_for(doc_fields.get("lang"))
    return None if rules is None or rules.tuned else rules.lang
