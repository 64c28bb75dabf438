"""Per-language rules (`dataprep.filter.language_rules`): the words of every script, counted on real
text nobody here wrote (this machine's message catalogues in Hindi, Bengali, Tamil, Chinese, Japanese
and Thai); the language's thresholds at their edges; English as it was; a language without rules
has them off, and the run says so."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import regex

from fixtures import language_documents as ld
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.filter.c4 import C4, C4Settings
from pretrainkit.dataprep.filter.gopher import (
    GopherQuality,
    GopherQualitySettings,
    GopherRepetition,
    GopherRepetitionSettings,
)
from pretrainkit.dataprep.filter.kernels import scan_words
from pretrainkit.dataprep.filter.language_filter import LanguageSettings
from pretrainkit.dataprep.filter.language_rules import rules_for
from pretrainkit.dataprep.filter.pipeline import FilterOptions, FilterStage, run_filter
from pretrainkit.dataprep.filter.rules import Doc
from pretrainkit.dataprep.filter.steps import StepSpec

from .test_rules import only

WORD = r"\w+(?:['’.\-]\w+)*"  # the words of kernels.scan_words, with `regex`'s \w: marks are word characters
HAN = regex.compile(r"\p{Han}")


def catalogue(folder: str, name: str) -> str:
    path = ld.LOCALE_ROOT / folder / "LC_MESSAGES" / name
    if not path.is_file():
        pytest.fail(f"the message catalogue this test reads is absent: {path}")
    return ld.catalogue_text(path)


def labelled(text: str, lang: str | None) -> Doc:
    doc = Doc(text)
    if lang is not None:
        doc.fields["lang"] = lang
    return doc


@pytest.mark.parametrize("folder", ["hi", "bn", "ta"])
def test_indic_words_keep_their_vowel_signs(folder):
    text = catalogue(folder, "glib20.mo")
    found = regex.findall(WORD, text)
    words = scan_words(text, unicode=True)
    assert list(words.lengths) == [len(w) for w in found]
    assert scan_words("हिन्दी भाषा", unicode=True).lengths.tolist() == [6, 4]
    assert scan_words("हिन्दी भाषा").lengths.tolist() == [1, 1, 1, 1, 1]  # re's \w: every sign ends a word
    # English's words made every Indic page fail the mean word length; the language's words do not
    step = GopherQuality(only(GopherQualitySettings, min_mean_word_length=3, max_mean_word_length=10))
    assert step.check(labelled(text, None)).filter == "gopher_quality.min_mean_word_length"
    assert step.check(labelled(text, folder)) is None
    assert 3 <= words.lengths.mean() <= 10


@pytest.mark.parametrize("folder,lang", [("zh_CN", "zh"), ("ja", "ja"), ("th", "th")])
def test_every_character_of_an_unspaced_script_is_a_word(folder, lang):
    text = catalogue(folder, "glib20.mo")
    words = scan_words(text, unicode=True)
    unspaced = regex.findall(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}]", text)
    spaced = regex.findall(WORD, regex.sub(r"[\p{Han}\p{Hiragana}\p{Katakana}\p{Thai}]", " ", text))
    assert words.count == len(unspaced) + len(spaced)
    assert int(words.lengths.sum()) == len(unspaced) + sum(map(len, spaced))
    assert rules_for(lang).unspaced and GopherQuality(GopherQualitySettings()).check(labelled(text, lang)) is None


def test_a_chinese_page_needs_as_many_characters_as_50_words_hold():
    han = "".join(HAN.findall(catalogue("zh_CN", "glib20.mo")))
    step = GopherQuality(only(GopherQualitySettings, min_words=50))
    least = rules_for("zh").words(50)
    assert least == 86  # 50 words of 12 / 7 Han characters (`kernels.scripts`)
    assert step.check(labelled(han[:least], "zh")) is None
    removal = step.check(labelled(han[: least - 1], "zh"))
    assert (removal.filter, removal.value, removal.threshold) == ("gopher_quality.min_words", 85, 86)
    assert step.check(labelled(han[:least], None)).value == 1  # English's words: one word of 86 characters


def test_stop_words_of_an_unspaced_script_are_found_in_the_text():
    step = GopherQuality(only(GopherQualitySettings, min_stop_words=2))
    for folder, lang in (("zh_CN", "zh"), ("ja", "ja"), ("th", "th")):
        text = catalogue(folder, "glib20.mo")
        assert step.check(labelled(text, lang)) is None
        assert step.check(labelled(text, None)).filter == "gopher_quality.min_stop_words"
    removal = step.check(labelled("打开这个文件失败", "zh"))
    assert (removal.filter, removal.value, removal.threshold) == ("gopher_quality.min_stop_words", 0, 2)


def test_c4_keeps_chinese_lines_and_counts_their_sentences():
    text = catalogue("zh_CN", "glib20.mo")
    lines = [line for line in text.splitlines() if line.endswith("。") and len(HAN.findall(line)) >= 6]
    page = "\n".join(lines[:5])
    step = C4(only(C4Settings, min_words_per_line=3, min_sentences=5))
    doc = labelled(page, "zh")
    assert step.check(doc) is None and doc.text == page  # every line holds 3 words' characters
    assert step.check(labelled(page, None)).filter == "c4.min_sentences"  # English's: lines of one or two words
    one_line = "".join(lines[:5])  # five sentences on one line: 。 needs no space after it
    assert step.check(labelled(one_line, "zh")) is None
    assert step.check(labelled(lines[0], "zh")).filter == "c4.min_sentences"


def test_chinese_ngrams_are_of_characters_as_many_as_the_words():
    repeated = "".join(HAN.findall(catalogue("zh_CN", "glib20.mo")))[:40]
    text = repeated + "。" + "".join(HAN.findall(catalogue("zh_CN", "gtk20.mo")))[:400]
    step = GopherRepetition(only(GopherRepetitionSettings, max_dup_ngram_char_fraction={10: 0.1}))
    assert step.rules("zh").most_n == 17  # 10 words: 17 Han characters
    assert step.check(labelled(text, "zh")) is None
    removal = step.check(labelled(text + repeated * 2, "zh"))
    assert removal.filter == "gopher_repetition.max_dup_ngram_char_fraction.10"


def test_english_and_unlabelled_documents_are_judged_as_before(reuters_docs):
    steps = [
        GopherQuality(GopherQualitySettings()),
        GopherRepetition(GopherRepetitionSettings()),
        C4(C4Settings(require_terminal_punctuation=False)),
    ]
    for step in steps:
        for _, text in reuters_docs[:200]:
            assert step.check(labelled(text, "en")) == step.check(labelled(text, None))
    assert rules_for("en") is None and rules_for(None) is None


def test_a_language_without_rules_has_them_off_and_the_run_says_so(tmp_path: Path):
    step = GopherQuality(only(GopherQualitySettings, min_stop_words=2, min_mean_word_length=3))
    text = "Ël mè paés l'è bèl e la zént i-én bòuna " * 10  # Emilian-Romagnol: no FineWeb-2 config
    assert not rules_for("eml").tuned
    assert step.check(labelled(text, "eml")) is None
    assert step.check(labelled(text, None)).filter == "gopher_quality.min_stop_words"
    # text without letters is "und": no language, no rules; counted in the stats and the summary
    corpus = tmp_path / "in.jsonl"
    records = [{"id": "digits", "text": "1234 5678 90 " * 30}, {"id": "de", "text": catalogue("de", "glib20.mo")}]
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    steps = (StepSpec("language", LanguageSettings()), StepSpec("gopher_quality", GopherQualitySettings()))
    with LocalRunner(1) as runner:
        result = run_filter([str(corpus)], tmp_path / "out", FilterOptions(steps), runner)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["language_rules_off"] == {"und": 1} == result["language_rules_off"]
    summary = FilterStage().summary(result, tmp_path / "out", 1.0)
    assert "no language rules" in summary and "und 1" in summary
