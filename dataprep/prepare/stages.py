"""The stages a `ptk prepare` pipeline chains, each one command's run in its own folder under OUT.

    stage = Stage("dedup", DedupOptions(threshold=0.8))
    stats = run_stage(stage, inputs, out / stage.folder, runner)   # the folder's stats.json (manifest.json)
    inputs = stage_outputs(stage, inputs, out / stage.folder)      # what the next stage reads

A stage is what its command would do to the same inputs, into the same bytes: `extract`, `filter`,
`paragraphs` (`ptk dedup --paragraphs`), `dedup`, `decontaminate`, `tokenize`. A text stage's output
is its kept parts (`part-*.jsonl.zst`, the records with their fields, so later stages read the same
text and id fields); `decontaminate` with `report_only` keeps every document, so the stage after it
reads what it read.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from pretrainkit.dataprep.decontaminate.cli import format_summary as decontaminate_summary
from pretrainkit.dataprep.decontaminate.pipeline import DecontaminateOptions, run_decontaminate
from pretrainkit.dataprep.decontaminate.pipeline import owned_directories as decontaminate_owned
from pretrainkit.dataprep.dedup.cli import format_summary as dedup_summary
from pretrainkit.dataprep.dedup.pipeline import owned_directories as dedup_owned
from pretrainkit.dataprep.dedup.pipeline import run_dedup
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.extract.cli import format_summary as extract_summary
from pretrainkit.dataprep.extract.pipeline import owned_directories as extract_owned
from pretrainkit.dataprep.extract.pipeline import run_extract
from pretrainkit.dataprep.filter.cli import format_summary as filter_summary
from pretrainkit.dataprep.filter.pipeline import FilterOptions, run_filter
from pretrainkit.dataprep.filter.pipeline import owned_directories as filter_owned
from pretrainkit.dataprep.paragraphs.cli import format_summary as paragraphs_summary
from pretrainkit.dataprep.paragraphs.pipeline import owned_directories as paragraphs_owned
from pretrainkit.dataprep.paragraphs.pipeline import run_paragraphs
from pretrainkit.dataprep.tokenize.cli import format_tokenize_summary
from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions, tokenize_corpus
from pretrainkit.dataprep.tokenize.corpus import owned_directories as tokenize_owned
from pretrainkit.files import writing_into
from pretrainkit.output_folders import (
    DECONTAMINATE,
    DEDUP,
    EXTRACT,
    FILTER,
    PARAGRAPHS,
    TOKENIZE,
    Kind,
    output_folder,
)
from pretrainkit.remote.staging import shown
from pretrainkit.stage_layout import KEPT_GLOB, STATS_NAME

# The order a pipeline's stages must keep where it has them (`pretrainkit.dataprep.prepare.pipeline_file`).
FIRST, LAST = "extract", "tokenize"


@dataclass(frozen=True)
class Tokenize:
    """The tokenize stage's options: the tokenizer and what changes the shards' bytes."""

    tokenizer: str
    options: TokenizeOptions


@dataclass(frozen=True)
class Stage:
    name: str  # as the pipeline file names it
    options: Any  # what the command's run takes: None for extract

    @property
    def folder(self) -> str:
        return FOLDERS[self.name]

    @property
    def kind(self) -> Kind:
        return KINDS[self.name]

    def as_json(self) -> dict:
        options = self.options
        if isinstance(options, Tokenize):
            options = {"tokenizer": shown(options.tokenizer), **asdict(options.options)}
        elif isinstance(options, FilterOptions):
            options = {"filters": [s.as_json() for s in options.steps]}
        elif options is not None:
            options = asdict(options)
            for key in ("against", "eval_files"):  # paths as given: a fetched file by its URL
                if options.get(key):
                    options[key] = [shown(p) for p in options[key]] if key == "eval_files" else shown(options[key])
        return {self.name: options}

    def files(self) -> list[str]:
        """The files its settings name besides the inputs (evaluation sets, the tokenizer)."""
        if isinstance(self.options, DecontaminateOptions):
            return list(self.options.eval_files)
        if isinstance(self.options, Tokenize):
            return [self.options.tokenizer]
        return []

    def owned(self, folder: Path) -> tuple[list[Path], list[Path]]:
        return OWNED[self.name](folder)


FOLDERS = {
    "extract": "extract",
    "filter": "filter",
    "paragraphs": "paragraphs",
    "dedup": "dedup",
    "decontaminate": "decontaminate",
    "tokenize": "shards",
}
KINDS = {
    "extract": EXTRACT,
    "filter": FILTER,
    "paragraphs": PARAGRAPHS,
    "dedup": DEDUP,
    "decontaminate": DECONTAMINATE,
    "tokenize": TOKENIZE,
}
OWNED = {
    "extract": extract_owned,
    "filter": filter_owned,
    "paragraphs": paragraphs_owned,
    "dedup": dedup_owned,
    "decontaminate": decontaminate_owned,
    "tokenize": tokenize_owned,
}


def with_fields(stage: Stage, text_field: str, id_field: str) -> Stage:
    """`stage` reading records' text and id from these fields (each command's --text-field, --id-field)."""
    options = stage.options
    if isinstance(options, Tokenize):
        return replace(
            stage, options=replace(options, options=replace(options.options, text_field=text_field, id_field=id_field))
        )
    if options is None:
        return stage
    return replace(stage, options=replace(options, text_field=text_field, id_field=id_field))


def run_stage(
    stage: Stage, inputs: list[str], folder: Path, runner: JobRunner, provenance: dict | None = None
) -> tuple[dict, str]:
    """Run `stage` over `inputs` into `folder`; return what it leaves there as its record (stats.json;
    the tokenize stage: manifest.json, with `provenance` merged into the manifest's) and the summary
    its command prints."""
    o = stage.options
    if stage.name == "extract":
        began = time.monotonic()
        with output_folder(folder, EXTRACT), writing_into(folder, *extract_owned(folder)):
            stats = run_extract(inputs, folder, runner)
        summary = extract_summary(stats, folder, time.monotonic() - began)
    elif stage.name == "filter":
        summary = filter_summary(run_filter(inputs, folder, o, runner), folder)
    elif stage.name == "paragraphs":
        summary = paragraphs_summary(run_paragraphs(inputs, folder, o, runner), folder)
    elif stage.name == "dedup":
        summary = dedup_summary(run_dedup(inputs, folder, o, runner), folder)
    elif stage.name == "decontaminate":
        summary = decontaminate_summary(run_decontaminate(inputs, folder, o, runner), folder)
    else:
        manifest = tokenize_corpus(inputs, folder, o.tokenizer, o.options, runner=runner, provenance=provenance)
        return manifest, format_tokenize_summary(manifest, folder)
    return json.loads((folder / STATS_NAME).read_text(encoding="utf-8")), summary


def stage_outputs(stage: Stage, inputs: list[str], folder: Path) -> list[str]:
    """The files the stage after `stage` reads: its kept parts, in order."""
    if isinstance(stage.options, DecontaminateOptions) and stage.options.report_only:
        return inputs
    return sorted(str(p) for p in folder.glob(KEPT_GLOB))
