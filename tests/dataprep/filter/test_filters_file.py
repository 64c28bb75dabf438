"""The filters file: the default is FineWeb's set in FineWeb's order; a file chooses steps, order and
thresholds; every mistake is one line naming the file and the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrainkit.dataprep.filter.c4 import C4Settings
from pretrainkit.dataprep.filter.fineweb import FineWebSettings
from pretrainkit.dataprep.filter.gopher import GopherQualitySettings, GopherRepetitionSettings
from pretrainkit.dataprep.filter.language_filter import LanguageSettings
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, StepSpec, read_filters, with_languages
from pretrainkit.errors import UserError


def test_the_default_is_fineweb_as_fineweb_ran_it():
    specs = read_filters(DEFAULT_FILTERS)
    assert [s.name for s in specs] == [
        "language",
        "gopher_repetition",
        "gopher_quality",
        "c4",
        "fineweb_quality",
        "pii",
    ]
    settings = {s.name: s.settings for s in specs}
    # every threshold the file writes out is the published one, the code's default
    assert settings["gopher_repetition"] == GopherRepetitionSettings()
    assert settings["gopher_quality"] == GopherQualitySettings()
    assert settings["c4"] == C4Settings(require_terminal_punctuation=False)  # FineWeb's one change
    assert settings["fineweb_quality"] == FineWebSettings()
    assert settings["language"] == LanguageSettings(languages=None)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "filters.yaml"
    path.write_text(text)
    return path


def test_a_file_chooses_steps_order_and_thresholds(tmp_path):
    path = write(
        tmp_path,
        "filters:\n  - pii\n  - min_length: {min_chars: 200}\n  - c4: {min_sentences: null, min_words_per_line: 5}\n"
        "  - gopher_repetition: {max_top_ngram_char_fraction: {2: 0.3}}\n",
    )
    specs = read_filters(path)
    assert [s.name for s in specs] == ["pii", "min_length", "c4", "gopher_repetition"]
    assert specs[1].settings.min_chars == 200
    assert specs[2].settings.min_sentences is None and specs[2].settings.min_words_per_line == 5
    assert specs[2].settings.max_word_length == 1000  # left out: the default
    assert specs[3].settings.max_top_ngram_char_fraction == {2: 0.3}


@pytest.mark.parametrize(
    "text,message",
    [
        (
            "filters:\n  - c4: {}\n  - pii\n  - gopher_quality: {min_word: 3}\n",
            "filters[2].gopher_quality: unknown key 'min_word' (known: min_words, max_words, ",
        ),
        ("filters:\n  - gopher_qualty: {}\n", "filters[0]: unknown step 'gopher_qualty' (known: language, "),
        (
            "filters:\n  - c4: {min_sentences: five}\n",
            "filters[0].c4.min_sentences: must be an integer >= 0 or null, got 'five'",
        ),
        (
            "filters:\n  - c4: {min_sentences: 99999999999999999999}\n",
            "filters[0].c4.min_sentences: must be an integer in [0, 1000000000], got 99999999999999999999",
        ),
        (
            "filters:\n  - gopher_quality: {max_words: 1000000001}\n",
            "filters[0].gopher_quality.max_words: must be an integer in [0, 1000000000], got 1000000001",
        ),
        (
            "filters:\n  - gopher_repetition: {max_top_ngram_char_fraction: {99999999999999999999: 0.1}}\n",
            "filters[0].gopher_repetition.max_top_ngram_char_fraction: n: must be an integer in [2, 100], got 9999",
        ),
        (
            "filters:\n  - fineweb_quality: {max_short_line_ratio: 1.5}\n",
            "filters[0].fineweb_quality.max_short_line_ratio: must be a fraction in [0, 1] or null, got 1.5",
        ),
        ("filters:\n  - c4: {lorem_ipsum: 1}\n", "filters[0].c4.lorem_ipsum: must be true or false, got 1"),
        ("filters:\n  - c4: {curly_bracket: null}\n", "filters[0].c4.curly_bracket: must be set"),
        (
            "filters:\n  - gopher_repetition: {max_dup_ngram_char_fraction: {1: 0.1}}\n",
            "filters[0].gopher_repetition.max_dup_ngram_char_fraction: must map each n >= 2",
        ),
        ("filters:\n  - pii\n  - c4\n  - pii\n", "filters[2]: step 'pii' given twice (also filters[0])"),
        (
            "filters:\n  - {c4: {}, pii: {}}\n",
            "filters[0]: a step is its name, or a mapping of its name to its settings",
        ),
        ("filters:\n  - c4: [1]\n", "filters[0].c4: settings must be a mapping, got [1]"),
        ("filters: []\n", "filters: must be a non-empty list of steps"),
        ("steps:\n  - c4\n", "a filters file is a mapping with the key 'filters'"),
        ("filters:\n  - c4\nfilter: 1\n", "unknown key 'filter' (known: filters)"),
        (
            "filters:\n  - c4: {min_sentences: 2, min_sentences: 3}\n",
            "line 2: invalid YAML (duplicate key 'min_sentences'",
        ),
        (
            "filters:\n  - language: {languages: en}\n",
            "filters[0].language.languages: must be a list of non-empty strings",
        ),
    ],
)
def test_every_mistake_is_one_line_naming_the_file_and_key(tmp_path, text, message):
    path = write(tmp_path, text)
    with pytest.raises(UserError) as e:
        read_filters(path)
    assert str(e.value).startswith(f"{path}: {message}"), str(e.value)
    assert "\n" not in str(e.value)


def test_a_missing_file_is_one_line(tmp_path):
    with pytest.raises(UserError, match="filters file not found"):
        read_filters(tmp_path / "nope.yaml")


def test_languages_option_sets_the_language_step_or_puts_one_first():
    specs = read_filters(DEFAULT_FILTERS)
    chosen = with_languages(specs, ["de", "en"])
    assert chosen[0] == StepSpec("language", LanguageSettings(languages=["de", "en"]))
    assert chosen[1:] == specs[1:]
    without = [s for s in specs if s.name != "language"]
    assert with_languages(without, ["fr"])[0].settings.languages == ["fr"]
    assert with_languages(specs, None) == specs
