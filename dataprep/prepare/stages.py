"""The stages a `ptk prepare` pipeline chains, each one command's run in its own folder under OUT.

    stage = Stage("dedup", DedupOptions(threshold=0.8))
    state = stage.checked()                                 # before any stage runs: its settings and files
    stats = run_pipeline_stage(stage, inputs, out / stage.folder, runner, state)  # its stats.json (manifest.json)
    inputs = stage_outputs(stage, inputs, out / stage.folder)      # what the next stage reads

A pipeline's stage is a registered `pretrainkit.dataprep.stage.Stage` (`STAGES`, by name) with its
options: what its command would do to the same inputs, into the same bytes: `extract`, `filter`,
`paragraphs` (`ptk dedup --paragraphs`), `dedup`, `decontaminate`, `tokenize`. A text stage's output
is its kept parts (`part-*.jsonl.zst`, the records with their fields, so later stages read the same
text and id fields); `decontaminate` with `report_only` keeps every document, so the stage after it
reads what it read.

A stage from a pipeline file knows where in it it was set (`where`): its errors name the file, the
stage and the settings as the file's keys (`eval_field`, where its command says `--eval-field`).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
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
from pretrainkit.errors import UserError
from pretrainkit.output_folders import Kind

# The order a pipeline's stages must keep where it has them (`pretrainkit.dataprep.prepare.pipeline_file`).
FIRST, LAST = "extract", "tokenize"
# Every stage a pipeline may name, in the order they may come.
STAGES: dict[str, contract.Stage] = {
    s.name: s
    for s in (ExtractStage(), FilterStage(), ParagraphStage(), DedupStage(), DecontaminateStage(), TokenizeStage())
}
FOLDERS = {LAST: "shards"}  # a stage's folder under OUT, where it is not the stage's name
OPTION = re.compile(r"(?<![\w-])--([a-z][a-z0-9-]*)")  # a command's option in a message: `--eval-field`


@dataclass(frozen=True)
class Stage:
    """A stage of a pipeline: the registered stage of this name, with the options of this pipeline."""

    name: str  # as the pipeline file names it
    options: Any  # what the stage runs with
    where: str = field(default="", compare=False)  # in a pipeline file: "pipeline.yaml: stages[4].decontaminate"

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

    def checked(self) -> Any:
        """Its options checked and the files they name read (`validate`, `prepare` of the registered
        stage), before anything is written: what `prepare` read, for `run_pipeline_stage`."""
        with settings_named(self.where):
            self.runs.validate(self.options)
            return self.runs.prepare(self.options)


@contextlib.contextmanager
def settings_named(where: str) -> Iterator[None]:
    """A UserError in the body prefixed by `where` (a pipeline file's stage), naming the command's
    options as the file's keys: each setting is the option of its name, `-` written `_`. Without
    `where` (a stage made in code, or by the command's options), the error as it is."""
    try:
        yield
    except UserError as e:
        if not where:
            raise
        raise UserError(f"{where}: {OPTION.sub(lambda m: m.group(1).replace('-', '_'), str(e))}") from None


def with_fields(stage: Stage, text_field: str, id_field: str) -> Stage:
    """`stage` reading records' text and id from these fields (each command's --text-field, --id-field)."""
    return replace(stage, options=stage.runs.with_fields(stage.options, text_field, id_field))


def run_pipeline_stage(
    stage: Stage,
    inputs: list[str],
    folder: Path,
    runner: JobRunner,
    state: Any = None,
    runs: contract.Stage | None = None,
) -> tuple[dict, str]:
    """Run `stage` over `inputs` into `folder`; return what it leaves there as its record (stats.json;
    the tokenize stage: manifest.json) and the summary its command prints. `state`: what
    `stage.checked()` returned. `runs`: the registered stage made for this run, in place of
    `stage.runs` (the tokenize stage given the pipeline's provenance)."""
    runs = runs or stage.runs
    began = time.monotonic()
    result = contract.run_stage(runs, inputs, folder, stage.options, runner, state)
    summary = runs.summary(result, folder, time.monotonic() - began)
    return json.loads((folder / runs.record_name).read_text(encoding="utf-8")), summary


def stage_outputs(stage: Stage, inputs: list[str], folder: Path) -> list[str]:
    """The files the stage after `stage` reads: its kept parts, in order."""
    return stage.runs.kept_files(stage.options, inputs, folder)
