"""The filters file: which steps `ptk filter` runs, in which order, with which thresholds.

    steps = read_filters(Path("filters.yaml"))        # [StepSpec("gopher_repetition", settings), ...]
    steps = read_filters(DEFAULT_FILTERS)             # FineWeb's filters, as FineWeb ran them
    runnable = [build_step(spec) for spec in steps]   # in a worker: objects with .name and .check(doc)

The file (YAML) holds one key, `filters`: a list whose every item is a step, a mapping of the
step's name to its settings (`{}` or nothing for its defaults), or the name alone:

    filters:
      - gopher_repetition: {}
      - gopher_quality: {min_words: 50, max_words: 100000}
      - c4: {require_terminal_punctuation: false}
      - pii

A setting left out keeps its default (the published threshold); null turns a rule off. Every error
is one line naming the file and the key: `filters.yaml: filters[2].gopher_quality: unknown key
'min_word' (known: ...)`, `filters.yaml: filters[1].c4.min_sentences: must be an integer >= 0 or
null, got 'five'`. A step may appear once.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pretrainkit.arguments import Bounded, int_in
from pretrainkit.dataprep.filter.c4 import C4, C4Settings
from pretrainkit.dataprep.filter.classifier import ClassifierSettings, ClassifierStep, checked_settings
from pretrainkit.dataprep.filter.fineweb import FineWebQuality, FineWebSettings
from pretrainkit.dataprep.filter.gopher import (
    GopherQuality,
    GopherQualitySettings,
    GopherRepetition,
    GopherRepetitionSettings,
)
from pretrainkit.dataprep.filter.language_codes import checked_codes
from pretrainkit.dataprep.filter.language_filter import LanguageSettings, LanguageStep
from pretrainkit.dataprep.filter.length import MOST_CHARS, MinLength, MinLengthSettings
from pretrainkit.dataprep.filter.pii import PII, PIISettings
from pretrainkit.dataprep.filter.rules import RANGE
from pretrainkit.errors import UserError, quoted
from pretrainkit.remote.staging import shown
from pretrainkit.user_yaml import read_named_items

DEFAULT_FILTERS = Path(__file__).resolve().parent / "examples" / "fineweb.yaml"

# step name -> (its settings, the class that runs it)
STEPS: dict[str, tuple[type, type]] = {
    "language": (LanguageSettings, LanguageStep),
    "gopher_repetition": (GopherRepetitionSettings, GopherRepetition),
    "gopher_quality": (GopherQualitySettings, GopherQuality),
    "c4": (C4Settings, C4),
    "fineweb_quality": (FineWebSettings, FineWebQuality),
    "min_length": (MinLengthSettings, MinLength),
    "pii": (PIISettings, PII),
    "classifier": (ClassifierSettings, ClassifierStep),
}


@dataclass(frozen=True)
class StepSpec:
    """A step as the filters file chose it: picklable, so jobs carry it to their workers."""

    name: str
    settings: Any  # the step's settings dataclass

    def as_json(self) -> dict:
        settings = dataclasses.asdict(self.settings)
        if "model" in settings:  # a classifier's: a fetched model by its URL, as the filters file gave it
            settings["model"] = shown(settings["model"])
        return {self.name: settings}


def build_step(spec: StepSpec):
    return STEPS[spec.name][1](spec.settings)


def read_filters(path: Path) -> list[StepSpec]:
    """The steps of filters file `path`, validated (see the module docstring)."""
    specs = []
    for name, given, where in read_named_items(path, "filters file", "filters", "step", STEPS):
        specs.append(StepSpec(name, settings_from(STEPS[name][0], given, f"{where}.{name}")))
        if name == "language" and specs[-1].settings.languages is not None:
            check_languages(specs[-1].settings.languages, f"{where}.{name}")
        if name == "classifier":
            specs[-1] = StepSpec(name, checked_settings(specs[-1].settings, path.parent, f"{where}.{name}"))
    return specs


def check_languages(codes: list[str], where: str) -> None:
    """A file's `languages` (at `where`: its file and key) are codes the language model outputs."""
    try:
        checked_codes(codes)
    except UserError as e:
        raise UserError(f"{where}.languages: {e}") from None


NGRAM_N = int_in(2, 100)  # the n of gopher_repetition's n-gram rules


def ranged(default: float, bounds: Bounded) -> Any:
    """A setting whose values are those of its command-line option: `ngram: int = ranged(13, NGRAM)`."""
    return dataclasses.field(default=default, metadata={RANGE: bounds})


def settings_from(cls: type, given: dict, where: str):
    """`cls` (a settings dataclass) from the mapping a user's file gave, each value checked against its
    field's type: an unknown key or a bad value is a one-line error naming `where` and the key."""
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key in given:
        if key not in known:
            raise UserError(f"{where}: unknown key {quoted(key)} (known: {', '.join(known)})")
    for key, f in known.items():
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and key not in given:
            raise UserError(f"{where}: {key}: must be set")
    return cls(**{key: _value(known[key], value, f"{where}.{key}") for key, value in given.items()})


def _value(f: dataclasses.Field, value: object, where: str) -> object:
    """`value` checked against the setting's type (as its annotation names it) and range."""
    kind, optional = f.type.removesuffix(" | None"), f.type.endswith(" | None")
    if value is None:
        if optional:
            return None
        raise UserError(f"{where}: must be set (this setting cannot be turned off with null)")
    # in [0, 1], unless the field says its range
    unit = ("ratio" in f.name or "fraction" in f.name or "score" in f.name) and RANGE not in f.metadata
    nullable = " or null" if optional else ""
    if kind == "bool":
        if not isinstance(value, bool):
            raise UserError(f"{where}: must be true or false, got {quoted(value)}")
        return value
    bounds = f.metadata.get(RANGE)  # a `ranged` setting's, as its command line's option has it
    if kind == "int":
        least = 1 if f.name in ("short_line_length",) else 0
        if not _is_int(value) or value < least:
            raise UserError(f"{where}: must be an integer >= {least}{nullable}, got {quoted(value)}")
        return (bounds or int_in(least, MOST_CHARS)).check(value, where)  # and not past what a kernel compares
    if kind == "float":
        number = _number(value, unit, f"{where}", nullable)
        return bounds.check(number, where) if bounds else number
    if kind == "str":
        if not isinstance(value, str) or not value:
            raise UserError(f"{where}: must be a non-empty string, got {quoted(value)}")
        return value
    if kind == "list[str]":
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise UserError(f"{where}: must be a list of non-empty strings{nullable}, got {quoted(value)}")
        return list(value)
    if kind == "dict[int, float]":
        if not isinstance(value, dict) or not all(_is_int(n) and n >= 2 for n in value):
            raise UserError(f"{where}: must map each n >= 2 to its fraction, e.g. {{2: 0.2}}, got {quoted(value)}")
        for n in value:  # the kernel keeps a limit for every n up to the largest
            NGRAM_N.check(n, f"{where}: n")
        return {n: _number(v, True, f"{where}.{n}", "") for n, v in sorted(value.items())}
    raise AssertionError(f"setting {f.name} has a type no filters file can give: {f.type}")


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: object, unit: bool, where: str, nullable: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value < 0:
        raise UserError(f"{where}: must be a number >= 0{nullable}, got {quoted(value)}")
    if unit and value > 1:
        raise UserError(f"{where}: must be a fraction in [0, 1]{nullable}, got {quoted(value)}")
    return float(value)


def with_languages(specs: list[StepSpec], languages: list[str] | None) -> list[StepSpec]:
    """`--languages`: the language step keeps those (one is put first where the file has none), in
    sorted order, each once: the same settings, and stats, however a command or a pipeline lists them."""
    if languages is None:
        return specs
    languages = sorted(set(languages))
    at = next((i for i, s in enumerate(specs) if s.name == "language"), None)
    if at is None:
        return [StepSpec("language", LanguageSettings(languages=languages)), *specs]
    chosen = dataclasses.replace(specs[at].settings, languages=languages)
    return [*specs[:at], StepSpec("language", chosen), *specs[at + 1 :]]
