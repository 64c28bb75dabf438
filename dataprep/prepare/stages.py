"""The stages a `ptk prepare` pipeline chains, each one command's run in its own folder under OUT.

    stage = Stage("dedup", DedupOptions(threshold=0.8))
    stats = run_pipeline_stage(stage, inputs, out / stage.folder, runner)   # the folder's stats.json (manifest.json)
    inputs = stage_outputs(stage, inputs, out / stage.folder)      # what the next stage reads

A pipeline's stage is a registered `pretrainkit.dataprep.stage.Stage` (`STAGES`, by name) with its
options: what its command would do to the same inputs, into the same bytes: `extract`, `filter`,
`paragraphs` (`ptk dedup --paragraphs`), `dedup`, `decontaminate`, `tokenize`. A text stage's output
is its kept parts (`part-*.jsonl.zst`, the records with their fields, so later stages read the same
text and id fields); `decontaminate` with `report_only` keeps every document, so the stage after it
reads what it read.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from pretrainkit.dataprep import stage as contract
from pretrainkit.dataprep.decontaminate.pipeline import DecontaminateStage
from pretrainkit.dataprep.dedup.pipeline import DedupStage
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.extract.pipeline import ExtractStage
from pretrainkit.dataprep.filter.pipeline import FilterStage
from pretrainkit.dataprep.paragraphs.pipeline import ParagraphStage
from pretrainkit.dataprep.tokenize.corpus import TokenizeStage
from pretrainkit.output_folders import Kind

# The order a pipeline's stages must keep where it has them (`pretrainkit.dataprep.prepare.pipeline_file`).
FIRST, LAST = "extract", "tokenize"
# Every stage a pipeline may name, in the order they may come.
STAGES: dict[str, contract.Stage] = {
    s.name: s
    for s in (ExtractStage(), FilterStage(), ParagraphStage(), DedupStage(), DecontaminateStage(), TokenizeStage())
}
FOLDERS = {LAST: "shards"}  # a stage's folder under OUT, where it is not the stage's name


@dataclass(frozen=True)
class Stage:
    """A stage of a pipeline: the registered stage of this name, with the options of this pipeline."""

    name: str  # as the pipeline file names it
    options: Any  # what the stage runs with: None for extract

    @property
    def runs(self) -> contract.Stage:
        return STAGES[self.name]

    @property
    def folder(self) -> str:
        return FOLDERS.get(self.name, self.name)

    @property
    def kind(self) -> Kind:
        return self.runs.kind

    def as_json(self) -> dict:
        return {self.name: self.runs.options_json(self.options)}

    def files(self) -> list[str]:
        """The files its settings name besides the inputs (evaluation sets, the tokenizer)."""
        return self.runs.named_files(self.options)

    def owned(self, folder: Path) -> tuple[list[Path], list[Path]]:
        return self.runs.owned(folder)


def with_fields(stage: Stage, text_field: str, id_field: str) -> Stage:
    """`stage` reading records' text and id from these fields (each command's --text-field, --id-field)."""
    return replace(stage, options=stage.runs.with_fields(stage.options, text_field, id_field))


def run_pipeline_stage(
    stage: Stage, inputs: list[str], folder: Path, runner: JobRunner, runs: contract.Stage | None = None
) -> tuple[dict, str]:
    """Run `stage` over `inputs` into `folder`; return what it leaves there as its record (stats.json;
    the tokenize stage: manifest.json) and the summary its command prints. `runs`: the registered stage
    made for this run, in place of `stage.runs` (the tokenize stage given the pipeline's provenance)."""
    runs = runs or stage.runs
    began = time.monotonic()
    result = contract.run_stage(runs, inputs, folder, stage.options, runner)
    summary = runs.summary(result, folder, time.monotonic() - began)
    return json.loads((folder / runs.record_name).read_text(encoding="utf-8")), summary


def stage_outputs(stage: Stage, inputs: list[str], folder: Path) -> list[str]:
    """The files the stage after `stage` reads: its kept parts, in order."""
    return stage.runs.kept_files(stage.options, inputs, folder)
