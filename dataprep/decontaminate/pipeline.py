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

import os
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

from pretrainkit import __version__
from pretrainkit.arguments import int_in
from pretrainkit.dataprep.decontaminate.check import CheckJob, check_task
from pretrainkit.dataprep.decontaminate.evalindex import EvalOptions, EvalTables, build_index
from pretrainkit.dataprep.decontaminate.evalsets import check_eval_file
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.dataprep.summary import input_row, summary_table
from pretrainkit.dataprep.workdir import file_stamp, remove_parts
from pretrainkit.errors import UserError
from pretrainkit.files import remove_temporaries
from pretrainkit.output_folders import DECONTAMINATE
from pretrainkit.remote.staging import shown
from pretrainkit.stage_layout import REJECTED_NAME

WORK_FORMAT = 1  # of the files in .work/: a rerun by code that lays them out otherwise starts afresh
CONTAMINATED_NAME = "contaminated.jsonl"


NGRAM = int_in(1, 1000)  # --ngram's type; the check of a pipeline file's or a caller's


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
        NGRAM.check(self.ngram, "ngram")
        if not self.eval_files:
            raise UserError("--eval: at least one evaluation set file is needed")
        seen: dict[str, str] = {}
        for path in self.eval_files:
            check_eval_file(path)
            real = os.path.realpath(path)
            if real in seen:
                raise UserError(f"{path}: evaluation set given twice (also as {seen[real]})")
            seen[real] = path


class DecontaminateStage(Stage):
    name = "decontaminate"
    kind = DECONTAMINATE
    row_names = (CONTAMINATED_NAME, REJECTED_NAME)

    def validate(self, options: DecontaminateOptions) -> None:
        options.validate()

    def options_json(self, options: DecontaminateOptions) -> dict:
        return _shown_options(options)

    def kept_files(self, options: DecontaminateOptions, inputs: list[str], out_dir: Path) -> list[str]:
        """A report-only run keeps every document: a pipeline's next stage reads what it read."""
        return list(inputs) if options.report_only else super().kept_files(options, inputs, out_dir)

    def named_files(self, options: DecontaminateOptions) -> list[str]:
        return list(options.eval_files)

    def prepare(self, options: DecontaminateOptions) -> EvalTables:
        """The evaluation index, every file read and checked before anything is written."""
        o = options
        return build_index(list(o.eval_files), EvalOptions(o.eval_fields, o.eval_id_field, o.ngram))

    def plan(self, run: Run) -> dict:
        o = run.options
        return {
            "work_format": WORK_FORMAT,
            "evals": [file_stamp(p) for p in o.eval_files],
            "tasks": [(t.file.path, t.start, t.end) for t in run.jobs],
            "options": _shown_options(o),
        }

    def reset(self, run: Run) -> None:
        """What an earlier run with another plan left: its kept parts and rows."""
        remove_parts(run.out_dir)
        for name in self.row_names:
            (run.out_dir / name).unlink(missing_ok=True)

    def opened(self, run: Run) -> None:
        super().opened(run)
        remove_temporaries(run.work)
        run.state.write(run.work / "eval")

    def run_jobs(self, run: Run) -> list[dict]:
        return run.runner.run(check_task, _jobs(run), "decontaminate", weights=[t.nbytes for t in run.jobs], unit="B")

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        jobs = _jobs(run)
        return [Path(j.contaminated_path if name == CONTAMINATED_NAME else j.rejected_path) for j in jobs]

    def parts_kept(self, run: Run) -> int:
        return 0 if run.options.report_only else len(run.jobs)  # of a run over more input, or not report-only

    def stats(self, run: Run, results: list[dict]) -> dict:
        total = Counter()
        for r in results:
            total.update({k: v for k, v in r.items() if k != "by_eval_file"})
        per_file = {
            path: dict(counts, contaminated_docs=sum(r["by_eval_file"].get(path, 0) for r in results))
            for path, counts in run.state.per_file.items()
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
            "options": _shown_options(run.options),
            "version": __version__,
        }
        if stats["input_docs"] != stats["kept_docs"] + stats["contaminated_docs"] + stats["rejected"]:
            raise RuntimeError(f"decontaminate accounting does not add up: {stats}")
        return stats

    def usable(self, run: Run, results: list[dict], stats: dict) -> bool:
        return stats["tested_docs"] > 0

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        verb = "found contaminated" if result["options"]["report_only"] else "contaminated (removed)"
        rows = [
            ("input docs", f"{result['input_docs']:,}"),
            ("kept", f"{result['kept_docs']:,}"),
            (verb, f"{result['contaminated_docs']:,}"),
            ("rejected", f"{result['rejected']:,}"),
            input_row(result["input_bytes"], seconds),
        ]
        evals = [
            f"  eval {path}: {c['items']:,} items ({c['items_shorter_than_ngram']:,} shorter than "
            f"{result['options']['ngram']} words, never matched), {c['ngrams']:,} n-grams, "
            f"{c['contaminated_docs']:,} docs"
            for path, c in result["eval_files"].items()
        ]
        return summary_table("decontaminate", out_dir, rows, evals)


def run_decontaminate(inputs: list[str], out_dir: Path, options: DecontaminateOptions, runner: JobRunner) -> dict:
    """Decontaminate `inputs` into `out_dir` (held as its output folder, `pretrainkit.output_folders`);
    returns the stats written to `stats.json`, plus `seconds` and `input_bytes` for the summary. The
    jobs run on `runner` (an entered `pretrainkit.dataprep.executors` runner)."""
    return run_stage(DecontaminateStage(), inputs, out_dir, options, runner)


def _shown_options(options: DecontaminateOptions) -> dict:
    return dict(asdict(options), eval_files=[shown(p) for p in options.eval_files])  # as given


def _jobs(run: Run) -> list[CheckJob]:
    o = run.options
    return [
        CheckJob(
            index=i,
            task=t,
            eval_dir=str(run.work / "eval"),
            ngram=o.ngram,
            text_field=o.text_field,
            id_field=o.id_field,
            report_only=o.report_only,
            out_dir=str(run.out_dir),
            work_dir=str(run.work),
        )
        for i, t in enumerate(run.jobs)
    ]
