"""The Stage contract: what every dataprep command (extract, filter, paragraphs, dedup,
decontaminate, tokenize) is, and the one skeleton that runs any of them.

    stage = FilterStage()                  # a registered stage: `pretrainkit.dataprep.prepare.stages.STAGES`
    result = run_stage(stage, ["corpus/"], Path("out"), options, runner)   # stats.json's content, timed
    print(stage.summary(result, Path("out"), seconds))
    run_stage_command(args, stage, options)   # a command: `pretrainkit.dataprep.cli_options`

A stage says only what is its own: its name and output kind, its options' checks, the files its
options name and what it reads of them (`prepare`), its plan keys, its jobs (`run_jobs`: one or
several passes on the runner), the rows its jobs leave for OUT, its stats reducer, its record and
its summary. `run_stage` does the rest, in this order, for every stage:

1. `validate` the options, refuse inputs inside OUT and OUT inside an input folder, `announce` a
   first run's compiling, hold OUT as the stage's output folder (`pretrainkit.output_folders`) and
   sweep its temporaries on a failure (`pretrainkit.files.writing_into`) over the folders the stage
   owns (`owned`);
2. discover the inputs, refuse any inside OUT, `prepare` (what its options name, read and checked
   before anything is written: an evaluation index, an older index, the tokenizer; `ptk prepare`
   calls `validate` and `prepare` for every stage before its first, and gives each its state), make
   OUT, check the paths;
3. plan the jobs and open the work folder (`pretrainkit.dataprep.workdir`) with the plan: the
   inputs' stamps and the stage's plan keys; another plan empties it and calls `reset`;
4. `opened`: sweep the temporaries of a killed run, take the last record away (until this run
   ends, OUT is no finished output);
5. `run_jobs`; join each row file of OUT from the jobs' pieces, in job order; `refuse_unusable`
   (a stage that writes no record for an unusable input says so here); `after_rows`;
6. remove parts of an earlier run over more input, sweep the temporaries of retried jobs, reduce
   the stats, `publish` the record (stats.json, last of the outputs), remove the work folder;
7. raise `nothing_usable` where no document was usable (the record stays, saying why).

Where stages differ (dedup's several passes, tokenize's manifest for stats.json, extract's inputs
of other suffixes and no options) they override a hook; the skeleton never asks which stage it runs.
"""

from __future__ import annotations

import json
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, ClassVar

from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.readers import (
    SUFFIXES,
    InputFile,
    discover_inputs,
    nothing_usable,
    plan_read_tasks,
    reason_kind,
    refuse_overlap,
)
from pretrainkit.dataprep.workdir import input_stamps, open_work_dir, remove_parts, remove_work_dir
from pretrainkit.files import (
    output_directory,
    remove_temporaries,
    write_concatenation_atomic,
    write_text_atomic,
    writing_into,
)
from pretrainkit.output_folders import Kind, output_folder
from pretrainkit.stage_layout import KEPT_GLOB, REJECTED_NAME, STATS_NAME, WORK_NAME


@dataclass
class Run:
    """One run of a stage: what the skeleton found and made, as the stage's hooks see it."""

    inputs: list[str]
    out_dir: Path
    options: Any
    runner: JobRunner
    started: float
    files: list[InputFile] = field(default_factory=list)
    state: Any = None  # what the stage's `prepare` read of its options' files (an evaluation index, a tokenizer)
    jobs: list = field(default_factory=list)  # what `plan_jobs` planned: read tasks, job groups

    @property
    def work(self) -> Path:
        return self.out_dir / WORK_NAME


class Stage(ABC):
    """A dataprep command as `run_stage` runs it; see the module docstring for the order of the hooks."""

    name: ClassVar[str]  # as a pipeline file names it
    kind: ClassVar[Kind]  # the output folder's owner
    input_suffixes: ClassVar[tuple[str, ...]] = SUFFIXES
    owned_folders: ClassVar[tuple[str, ...]] = ()  # folders under OUT only this stage writes, besides OUT
    row_names: ClassVar[tuple[str, ...]] = (REJECTED_NAME,)  # OUT's row files, each joined from the jobs' pieces
    record_name: ClassVar[str] = STATS_NAME  # written last: a folder without it is no finished output

    def owned(self, out_dir: Path) -> tuple[list[Path], list[Path]]:
        """Where only this stage's runs into `out_dir` write: (folders, trees) whose temporaries are its runs'."""
        out_dir = Path(out_dir)
        return [out_dir, *(out_dir / name for name in self.owned_folders)], [out_dir / WORK_NAME]

    def validate(self, options: Any) -> None:  # noqa: B027  (a hook: by default nothing)
        """Refuse options that make no run, before OUT is touched."""

    def announce(self) -> None:  # noqa: B027  (a hook: by default nothing)
        """Say, on stderr, what the first run on a machine does before its first job (compiling kernels)."""

    def options_json(self, options: Any) -> Any:
        """The options as a pipeline's record shows them (a fetched file by its URL)."""
        return None if options is None else asdict(options)

    def with_fields(self, options: Any, text_field: str, id_field: str) -> Any:
        """`options` reading records' text and id from these fields (a pipeline's --text-field, --id-field)."""
        return None if options is None else replace(options, text_field=text_field, id_field=id_field)

    def kept_files(self, options: Any, inputs: list[str], out_dir: Path) -> list[str]:
        """What a run into `out_dir` over `inputs` kept, in order: what a pipeline's next stage reads."""
        return sorted(str(p) for p in out_dir.glob(KEPT_GLOB))

    def named_files(self, options: Any) -> list[str]:
        """Files besides the inputs that the options name (evaluation sets, a tokenizer): refused
        inside OUT, and a changed one is another plan of a pipeline."""
        return []

    def prepare(self, options: Any) -> Any:
        """What the options name, read and checked before anything is written (a bad file or a setting
        that makes no run with it fails the run with OUT untouched): `run.state`. Of the options alone,
        never of the inputs, so that a pipeline checks every stage before its first."""
        return None

    def checked_files(self, run: Run) -> list[str]:
        """The files besides the inputs that the runner's workers read (`JobRunner.check_paths`)."""
        return self.named_files(run.options)

    def plan_jobs(self, run: Run) -> list:
        return plan_read_tasks(run.files, runner=run.runner)

    @abstractmethod
    def plan(self, run: Run) -> dict:
        """The plan keys besides the inputs' stamps: a rerun keeps the work folder only under the same plan."""

    def reset(self, run: Run) -> None:
        """What an earlier run of another plan left in OUT, removed before this plan is stamped."""
        remove_parts(run.out_dir)

    def opened(self, run: Run) -> None:
        """After the work folder is open: a killed run's temporaries go, and the record until this run ends."""
        for folder in self.owned(run.out_dir)[0]:
            remove_temporaries(folder)
        (run.out_dir / self.record_name).unlink(missing_ok=True)

    @abstractmethod
    def run_jobs(self, run: Run) -> Any:
        """The stage's jobs on `run.runner`: its results, as `stats` reduces them."""

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        """The jobs' pieces of OUT's row file `name` (one of `row_names`), in job order."""
        raise NotImplementedError(f"{type(self).__name__} lists {name} in row_names but not its pieces")

    def refuse_unusable(self, run: Run, results: Any) -> None:  # noqa: B027  (a hook: by default nothing)
        """Fail here, with no record written, where the stage writes none for an unusable input."""

    def after_rows(self, run: Run, results: Any) -> Any:
        """The jobs that come after the rows are joined (and the input found usable): the results."""
        return results

    def parts_kept(self, run: Run) -> int:
        """How many of OUT's parts this run wrote: those numbered from here on are an earlier run's."""
        return len(run.jobs)

    @abstractmethod
    def stats(self, run: Run, results: Any) -> dict:
        """The record's content, reduced from the jobs' results (its accounting checked)."""

    def publish(self, run: Run, stats: dict) -> None:
        write_text_atomic(run.out_dir / self.record_name, json.dumps(stats, indent=2, sort_keys=True) + "\n")

    def usable(self, run: Run, results: Any, stats: dict) -> bool:
        """Whether any document was usable; a run of none fails once its record says why."""
        return True

    def rejection_reasons(self, run: Run, results: Any) -> Counter:
        """Why the records were rejected, by kind: from OUT's rejected rows (a stage may count them in its jobs)."""
        with open(run.out_dir / REJECTED_NAME, encoding="utf-8") as f:
            return Counter(reason_kind(json.loads(line)["reason"]) for line in f)

    def result(self, run: Run, stats: dict, results: Any) -> dict:
        """What `run_stage` returns: the record's content with the run's time and input bytes."""
        return dict(stats, seconds=time.monotonic() - run.started, input_bytes=sum(t.nbytes for t in run.jobs))

    @abstractmethod
    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        """What the command prints after a run of `seconds` that returned `result`."""


def run_stage(
    stage: Stage, inputs: Sequence[str], out_dir: str | Path, options: Any, runner: JobRunner, state: Any = None
) -> dict:
    """Run `stage` with `options` over `inputs` into `out_dir` on `runner` (an entered runner);
    returns `stage.result` (for most stages the stats written to OUT with `seconds` and `input_bytes`).
    `state`: what `stage.prepare(options)` returned, where the caller has read it already (None: read here)."""
    stage.validate(options)
    out_dir = Path(out_dir)
    refuse_overlap(list(inputs), out_dir)
    stage.announce()
    with output_folder(out_dir, stage.kind), writing_into(out_dir, *stage.owned(out_dir)):
        return _run(stage, Run(list(inputs), out_dir, options, runner, time.monotonic(), state=state))


def _run(stage: Stage, run: Run) -> dict:
    run.files = discover_inputs(run.inputs, stage.input_suffixes)
    refuse_overlap([f.path for f in run.files] + stage.named_files(run.options), run.out_dir)
    if run.state is None:
        run.state = stage.prepare(run.options)
    output_directory(run.out_dir)
    run.runner.check_paths([f.path for f in run.files] + stage.checked_files(run), run.out_dir)
    run.jobs = stage.plan_jobs(run)
    open_work_dir(run.work, {"inputs": input_stamps(run.files), **stage.plan(run)}, on_reset=lambda: stage.reset(run))
    stage.opened(run)

    results = stage.run_jobs(run)
    for name in stage.row_names:
        write_concatenation_atomic(stage.row_pieces(run, name), run.out_dir / name)
    stage.refuse_unusable(run, results)
    results = stage.after_rows(run, results)
    remove_parts(run.out_dir, stage.parts_kept(run))  # an earlier run over more input left these
    for folder in stage.owned(run.out_dir)[0]:
        remove_temporaries(folder)  # of job attempts that died mid-write (a retried Ray task)

    stats = stage.stats(run, results)
    stage.publish(run, stats)
    remove_work_dir(run.work)
    if not stage.usable(run, results, stats):
        raise nothing_usable(run.inputs, stage.rejection_reasons(run, results), run.out_dir / REJECTED_NAME)
    return stage.result(run, stats, results)
