"""`ptk decontaminate`'s run: the evaluation index, then one job per read task, then the joined outputs.

    with LocalRunner(2) as runner:
        stats = run_decontaminate(["corpus/"], Path("out"), DecontaminateOptions(eval_files=("mmlu.jsonl",)), runner)

1. index  (main process)  every evaluation file read and checked before anything is written, then
               put in `.work/eval/` (`evalindex`): the only state that lives in memory, and it
               depends on the evaluation sets alone, never on the corpus.
2. check  (`check`, one job per read task of `plan_read_tasks`)  the corpus streamed a batch of
               documents at a time: kept records to `part-NNNNN.jsonl.zst`, the task's
               contaminated and rejected rows to the work directory, its counts last.
3. join   (main process)  `contaminated.jsonl` and `rejected.jsonl` are the tasks' rows in task
               order; `stats.json` is written last (input = kept + contaminated + rejected).

The outputs depend only on the inputs, the evaluation files and the options: the same bytes for
any --workers and on Ray. A killed run's rerun keeps the finished jobs (their done-markers) when its
plan is the same (`pretrainkit.dataprep.workdir`) and runs the others.
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from pretrainkit import __version__
from pretrainkit.dataprep.decontaminate.check import CheckJob, check_task
from pretrainkit.dataprep.decontaminate.evalindex import EvalOptions, build_index
from pretrainkit.dataprep.decontaminate.evalsets import check_eval_file
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.readers import (
    discover_inputs,
    nothing_usable,
    plan_read_tasks,
    reason_kind,
    refuse_inputs_inside,
)
from pretrainkit.dataprep.workdir import input_stamps, open_work_dir, remove_parts, remove_work_dir
from pretrainkit.errors import UserError
from pretrainkit.files import (
    output_directory,
    remove_temporaries,
    write_concatenation_atomic,
    write_text_atomic,
    writing_into,
)
from pretrainkit.output_folders import DECONTAMINATE, output_folder
from pretrainkit.remote.staging import shown
from pretrainkit.stage_layout import REJECTED_NAME, STATS_NAME, WORK_NAME

WORK_FORMAT = 1  # of the files in .work/: a rerun by code that lays them out otherwise starts afresh


@dataclass(frozen=True)
class DecontaminateOptions:
    eval_files: tuple[str, ...] = ()
    eval_fields: tuple[str, ...] = ("text",)
    eval_id_field: str = "id"
    ngram: int = 13
    text_field: str = "text"
    id_field: str = "id"
    report_only: bool = False

    def validate(self) -> None:
        if self.ngram < 1:
            raise UserError(f"--ngram must be at least 1, got {self.ngram}")
        if not self.eval_files:
            raise UserError("--eval: at least one evaluation set file is needed")
        seen: dict[str, str] = {}
        for path in self.eval_files:
            check_eval_file(path)
            real = os.path.realpath(path)
            if real in seen:
                raise UserError(f"{path}: evaluation set given twice (also as {seen[real]})")
            seen[real] = path


def owned_directories(out_dir: Path) -> tuple[list[Path], list[Path]]:
    """Where only a decontaminate run into `out_dir` writes: (directories, trees) whose temporaries are its runs'."""
    return [out_dir], [out_dir / WORK_NAME]


def run_decontaminate(inputs: list[str], out_dir: Path, options: DecontaminateOptions, runner: JobRunner) -> dict:
    """Decontaminate `inputs` into `out_dir` (held as its output folder, `pretrainkit.output_folders`);
    returns the stats written to `stats.json`, plus `seconds` and `input_bytes` for the summary. The
    jobs run on `runner` (an entered `pretrainkit.dataprep.executors` runner)."""
    options.validate()
    out_dir = Path(out_dir)
    refuse_inputs_inside(inputs, out_dir)
    with output_folder(out_dir, DECONTAMINATE), writing_into(out_dir, *owned_directories(out_dir)):
        return _decontaminate(inputs, out_dir, options, runner)


def _decontaminate(inputs: list[str], out_dir: Path, options: DecontaminateOptions, runner: JobRunner) -> dict:
    started = time.monotonic()
    files = discover_inputs(inputs)
    refuse_inputs_inside([f.path for f in files] + list(options.eval_files), out_dir)
    tables = build_index(
        list(options.eval_files), EvalOptions(options.eval_fields, options.eval_id_field, options.ngram)
    )
    output_directory(out_dir)
    runner.check_paths([f.path for f in files] + list(options.eval_files), out_dir)
    tasks = plan_read_tasks(files, runner=runner)

    work = out_dir / WORK_NAME
    plan = {
        "work_format": WORK_FORMAT,
        "inputs": input_stamps(files),
        "evals": [(p, os.path.getsize(p), os.stat(p).st_mtime_ns) for p in options.eval_files],
        "tasks": [(t.file.path, t.start, t.end) for t in tasks],
        "options": dict(asdict(options), eval_files=[shown(p) for p in options.eval_files]),  # as given
    }
    open_work_dir(work, plan, on_reset=lambda: _remove_outputs(out_dir))
    for d in (out_dir, work):
        remove_temporaries(d)
    (out_dir / STATS_NAME).unlink(missing_ok=True)  # until this run ends, the directory is no finished output
    tables.write(work / "eval")

    jobs = [
        CheckJob(
            index=i,
            task=t,
            eval_dir=str(work / "eval"),
            ngram=options.ngram,
            text_field=options.text_field,
            id_field=options.id_field,
            report_only=options.report_only,
            out_dir=str(out_dir),
            work_dir=str(work),
        )
        for i, t in enumerate(tasks)
    ]
    results = runner.run(check_task, jobs, "decontaminate", weights=[t.nbytes for t in tasks], unit="B")
    write_concatenation_atomic([Path(j.contaminated_path) for j in jobs], out_dir / "contaminated.jsonl")
    write_concatenation_atomic([Path(j.rejected_path) for j in jobs], out_dir / REJECTED_NAME)
    remove_parts(out_dir, 0 if options.report_only else len(tasks))  # of a run over more input, or not report-only
    remove_temporaries(out_dir)  # of job attempts that died mid-write (a retried Ray task)

    total = Counter()
    for r in results:
        total.update({k: v for k, v in r.items() if k != "by_eval_file"})
    per_file = {
        path: dict(counts, contaminated_docs=sum(r["by_eval_file"].get(path, 0) for r in results))
        for path, counts in tables.per_file.items()
    }
    stats = {
        "input_docs": total["docs"] + total["rejected"],
        "tested_docs": total["docs"],
        "kept_docs": total["kept"],
        "contaminated_docs": total["contaminated"],
        "rejected": total["rejected"],
        "docs_shorter_than_ngram": total["shorter_than_ngram"],
        "hash_collisions": total["hash_collisions"],
        "eval_files": per_file,
        "options": dict(asdict(options), eval_files=[shown(p) for p in options.eval_files]),  # as given
        "version": __version__,
    }
    if stats["input_docs"] != stats["kept_docs"] + stats["contaminated_docs"] + stats["rejected"]:
        raise RuntimeError(f"decontaminate accounting does not add up: {stats}")
    write_text_atomic(out_dir / STATS_NAME, json.dumps(stats, indent=2, sort_keys=True) + "\n")
    remove_work_dir(work)
    if total["docs"] == 0:
        raise nothing_usable(inputs, _rejection_reasons(out_dir / REJECTED_NAME), out_dir / REJECTED_NAME)
    return dict(stats, seconds=time.monotonic() - started, input_bytes=sum(t.nbytes for t in tasks))


def _remove_outputs(out_dir: Path) -> None:
    """What an earlier run with another plan left: its kept parts and rows."""
    remove_parts(out_dir)
    for name in ("contaminated.jsonl", REJECTED_NAME):
        (out_dir / name).unlink(missing_ok=True)


def _rejection_reasons(path: Path) -> Counter:
    with open(path, encoding="utf-8") as f:
        return Counter(reason_kind(json.loads(line)["reason"]) for line in f)
