"""The pipeline file `ptk prepare --pipeline FILE` reads: its stages, in order, with their settings.

    stages = read_pipeline(Path("pipeline.yaml"), text_field="text", id_field="id")

    stages:
      - extract: {extractor: nochrome}              # WARC / HTML inputs to page texts
      - filter: {filters: filters.yaml, languages: [en]}
      - paragraphs: {min_length: 200}               # ptk dedup --paragraphs (--languages en: the filter's)
      - dedup: {threshold: 0.8}
      - decontaminate: {eval: [evals/mmlu.jsonl], ngram: 13}
      - tokenize: {tokenizer: tokenizer.json, shard_size: 32M}

Each setting is the option of the same name of the stage's command (`-` written `_`); a stage left
without settings runs with that command's defaults. Paths in the file are relative to the file's
folder. Each stage appears at most once; `extract`, where there is one, comes first and `tokenize`
last. Every mistake is one line naming the file, the stage and the key (an option's message names
the key: `threshold`, where `ptk dedup` says `--threshold`). A stage that changes text after the
filter stage (`paragraphs`) is given the filter's `languages` unless it sets its own
(`passed_languages`). What the settings name (evaluation sets,
an index, the tokenizer) is read when `ptk prepare` checks every stage before its first
(`Stage.checked`), its errors named the same way.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, replace
from pathlib import Path

from pretrainkit.dataprep.decontaminate import pipeline as decontaminate
from pretrainkit.dataprep.decontaminate.pipeline import DecontaminateOptions
from pretrainkit.dataprep.dedup import pipeline as dedup
from pretrainkit.dataprep.dedup.pipeline import DedupOptions
from pretrainkit.dataprep.extract.pipeline import ExtractOptions
from pretrainkit.dataprep.filter.pipeline import FilterOptions
from pretrainkit.dataprep.filter.steps import (
    DEFAULT_FILTERS,
    check_languages,
    ranged,
    read_filters,
    settings_from,
    with_languages,
)
from pretrainkit.dataprep.paragraphs.pipeline import MIN_LENGTH, ParagraphOptions
from pretrainkit.dataprep.prepare.stages import FIRST, LAST, Stage, settings_named
from pretrainkit.dataprep.tokenize.arguments import BATCH_SIZE, SHARD_SIZE
from pretrainkit.dataprep.tokenize.corpus import Tokenize, TokenizeOptions
from pretrainkit.errors import UserError
from pretrainkit.remote.staging import local_copy, shown
from pretrainkit.remote.urls import beside, is_url
from pretrainkit.shards.formats import DEFAULT_BATCH_TOKENS, DEFAULT_SHARD_TOKENS
from pretrainkit.user_yaml import read_named_items


@dataclass(frozen=True)
class ExtractSettings:
    extractor: str = ExtractOptions.extractor


@dataclass(frozen=True)
class FilterSettings:
    filters: str | None = None  # a filters file; default FineWeb's
    languages: list[str] | None = None


@dataclass(frozen=True)
class ParagraphsSettings:
    min_length: int = ranged(ParagraphOptions.min_length, MIN_LENGTH)
    languages: list[str] | None = None  # None: the filter stage's (`passed_languages`)


@dataclass(frozen=True)
class DedupSettings:
    threshold: float = ranged(DedupOptions.threshold, dedup.THRESHOLD)
    num_perm: int = ranged(DedupOptions.num_perm, dedup.NUM_PERM)
    ngram: int = ranged(DedupOptions.ngram, dedup.NGRAM)
    near: bool = DedupOptions.near
    against: str | None = None


@dataclass(frozen=True)
class DecontaminateSettings:
    eval: list[str] | None = None  # required: None is "not given"
    eval_field: list[str] | None = None
    eval_id_field: str = DecontaminateOptions.eval_id_field
    ngram: int = ranged(DecontaminateOptions.ngram, decontaminate.NGRAM)
    report_only: bool = False


@dataclass(frozen=True)
class TokenizeSettings:
    tokenizer: str | None = None  # required
    eos_token: str | None = None
    format: str = TokenizeOptions.format
    shard_size: int = DEFAULT_SHARD_TOKENS
    batch_size: int = DEFAULT_BATCH_TOKENS


SETTINGS = {
    "extract": ExtractSettings,
    "filter": FilterSettings,
    "paragraphs": ParagraphsSettings,
    "dedup": DedupSettings,
    "decontaminate": DecontaminateSettings,
    "tokenize": TokenizeSettings,
}
SIZES = {"shard_size": SHARD_SIZE, "batch_size": BATCH_SIZE}  # token counts, given as 32M or 16384


def read_pipeline(path: Path, text_field: str = "text", id_field: str = "id") -> list[Stage]:
    """The stages of pipeline file `path`, validated, each reading records' text and id from these fields."""
    items = read_named_items(path, "pipeline file", "stages", "stage", SETTINGS)
    stages: list[Stage] = []
    for i, (name, given, where) in enumerate(items):
        if name == FIRST and i != 0:
            raise UserError(f"{where}: '{FIRST}' must be the first stage (it reads WARC and HTML, the others JSONL)")
        if name == LAST and i != len(items) - 1:
            raise UserError(f"{where}: '{LAST}' must be the last stage (the others read and write text)")
        settings = settings_from(SETTINGS[name], _sizes(given, f"{where}.{name}"), f"{where}.{name}")
        stages.append(_stage(name, settings, path.parent, text_field, id_field, f"{where}.{name}"))
    stages = passed_languages(stages)
    if stages[0].name == FIRST and (text_field, id_field) != ("text", "id"):
        raise UserError(f"{path}: --text-field/--id-field: an '{FIRST}' stage writes records with 'text' and 'id'")
    return stages


def passed_languages(stages: list[Stage]) -> list[Stage]:
    """The filter stage's `languages` (its language step's) given to each later stage that changes text
    (`paragraphs`) and has none of its own, so that they hold for the pipeline's output: such a stage
    identifies a changed document's language again and removes it where it is in none of them."""
    kept = None
    for i, stage in enumerate(stages):
        if stage.name == "filter":
            kept = next((s.settings.languages for s in stage.options.steps if s.name == "language"), None)
        elif stage.name == "paragraphs" and stage.options.languages is None and kept is not None:
            stages[i] = replace(stage, options=replace(stage.options, languages=kept))
    return stages


def _sizes(given: dict, where: str) -> dict:
    """Token counts written as 32M (as on the command line) made integers, and checked as there."""
    out = dict(given)
    for key, bounds in SIZES.items():
        if isinstance(out.get(key), str):
            try:
                out[key] = bounds(out[key])
            except argparse.ArgumentTypeError as e:  # the command line's parser of sizes
                raise UserError(f"{where}.{key}: {e}") from None
        elif key in out:
            bounds.check(out[key], f"{where}.{key}")
    return out


def _relative(base: Path, path: str) -> str:
    """A path the file names: relative to its folder (an absolute one stays as it is), which for a pipeline
    file fetched from a bucket is its folder there; a URL is fetched."""
    folder = shown(str(base))
    if not is_url(path) and is_url(folder) and not Path(path).is_absolute():
        try:
            path = beside(folder, path)
        except ValueError as e:
            raise UserError(f"{folder}: {e}") from None
    return str(local_copy(path)) if is_url(path) else str(base / path)


def _stage(name: str, s, base: Path, text_field: str, id_field: str, where: str) -> Stage:
    if name in ("filter", "paragraphs") and s.languages is not None:
        check_languages(s.languages, where)
    with settings_named(where):
        return Stage(name, _options(name, s, base, {"text_field": text_field, "id_field": id_field}), where)


def _options(name: str, s, base: Path, fields: dict):
    """The options of stage `name`'s command from its settings `s` (checked as the command checks them)."""
    if name == "extract":
        return ExtractOptions(s.extractor)
    if name == "filter":
        steps = read_filters(Path(_relative(base, s.filters)) if s.filters else DEFAULT_FILTERS)
        return FilterOptions(tuple(with_languages(steps, s.languages)), **fields)
    if name == "paragraphs":
        return ParagraphOptions(s.min_length, **fields, languages=s.languages)
    if name == "dedup":
        against = _relative(base, s.against) if s.against else None
        return DedupOptions(**dict(dataclasses.asdict(s), against=against), **fields)
    if name == "decontaminate":
        if not s.eval:
            raise UserError("eval: the evaluation set files are needed (a list of paths)")
        options = DecontaminateOptions(
            eval_files=tuple(_relative(base, p) for p in s.eval),
            eval_fields=tuple(s.eval_field or DecontaminateOptions.eval_fields),
            eval_id_field=s.eval_id_field,
            ngram=s.ngram,
            report_only=s.report_only,
            **fields,
        )
        options.validate()
        return options
    if not s.tokenizer:
        raise UserError("tokenizer: the tokenizer (a tokenizer.json, or a folder holding one) is needed")
    options = TokenizeOptions(s.format, s.shard_size, s.batch_size, eos_token=s.eos_token, **fields)
    return Tokenize(_relative(base, s.tokenizer), options)
