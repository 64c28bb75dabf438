"""The Stage contract (`pretrainkit.dataprep.stage`): every registered stage provides it, and the
skeleton's output layout, resume, plan reset and refusals hold for a toy stage, in-process."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import pytest

from pretrainkit.dataprep.prepare.stages import STAGES
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from pretrainkit.output_folders import FILTER, Kind
from pretrainkit.stage_layout import (
    KEPT_SUFFIX,
    MARKER_NAME,
    PLAN_MARKER,
    REJECTED_NAME,
    STATS_NAME,
    WORK_NAME,
    part_name,
)

CALLS: list[int] = []  # the jobs the toy stage ran, in order
FAIL_AT: set[int] = set()  # jobs that fail (a run killed there)


class InProcess:
    """A runner that runs the jobs one after another in this process (the skeleton's runner interface)."""

    workers = 1

    def run(self, fn, jobs, desc, weights=None, unit="job"):
        return [fn(job) for job in jobs]

    def check_paths(self, inputs, out_dir):
        pass


def toy_job(job: tuple[int, str, str, str]) -> dict:
    """Upper-cases a task's documents into its part; a line without text is a rejected row."""
    index, task, out_dir, work = job
    done = Path(work) / f"done-{index:05d}.json"
    if done.exists():
        return json.loads(done.read_text())
    CALLS.append(index)
    if index in FAIL_AT:
        raise RuntimeError(f"job {index} killed")
    lines = [json.loads(line) for line in Path(task).read_text().splitlines()]
    kept = [d["text"].upper() for d in lines if d.get("text")]
    rejected = [{"source": task, "reason": "no text"} for d in lines if not d.get("text")]
    write_text_atomic(Path(out_dir) / f"{part_name(index)}{KEPT_SUFFIX}", "".join(t + "\n" for t in kept))
    write_text_atomic(Path(work) / f"rejected-{index:05d}.jsonl", "".join(json.dumps(r) + "\n" for r in rejected))
    counts = {"kept": len(kept), "rejected": len(rejected)}
    write_text_atomic(done, json.dumps(counts))
    return counts


class ToyStage(Stage):
    name = "toy"
    kind = FILTER  # an output kind written only with a marker

    def plan(self, run: Run) -> dict:
        return {"tasks": [t.file.path for t in run.jobs], "suffix": run.options}

    def run_jobs(self, run: Run) -> list[dict]:
        jobs = [(i, t.file.path, str(run.out_dir), str(run.work)) for i, t in enumerate(run.jobs)]
        return run.runner.run(toy_job, jobs, "toy")

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        return [run.work / f"rejected-{i:05d}.jsonl" for i in range(len(run.jobs))]

    def stats(self, run: Run, results: list[dict]) -> dict:
        return {"kept": sum(r["kept"] for r in results), "rejected": sum(r["rejected"] for r in results)}

    def usable(self, run: Run, results: list[dict], stats: dict) -> bool:
        return stats["kept"] > 0

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        return f"toy: kept {result['kept']}"


@pytest.fixture(autouse=True)
def _fresh_calls():
    CALLS.clear()
    FAIL_AT.clear()


def corpus(tmp_path: Path, texts: list[list[str]]) -> list[str]:
    folder = tmp_path / "in"
    folder.mkdir(exist_ok=True)
    for i, docs in enumerate(texts):
        (folder / f"{i}.jsonl").write_text(
            "".join(json.dumps({"id": str(j), "text": t}) + "\n" for j, t in enumerate(docs))
        )
    return [str(folder)]


def outputs(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("name", sorted(STAGES))
def test_every_registered_stage_provides_the_contract(name, tmp_path):
    stage = STAGES[name]
    assert isinstance(stage, Stage) and stage.name == name and isinstance(stage.kind, Kind)
    assert not getattr(type(stage), "__abstractmethods__", None)  # plan, run_jobs, stats and summary are its own
    dirs, trees = stage.owned(tmp_path)
    assert dirs[0] == tmp_path and trees == [tmp_path / WORK_NAME]
    for row in stage.row_names:  # each row file it joins has its pieces
        assert type(stage).row_pieces is not Stage.row_pieces, (name, row)
    assert stage.record_name in (STATS_NAME, "manifest.json")


def test_a_run_writes_the_layout_and_removes_its_work_folder(tmp_path):
    inputs = corpus(tmp_path, [["a", "", "b"], ["c"]])
    result = run_stage(ToyStage(), inputs, tmp_path / "out", "x", InProcess())
    out = tmp_path / "out"
    assert json.loads((out / STATS_NAME).read_text()) == {"kept": 3, "rejected": 1}
    assert result["kept"] == 3 and result["seconds"] >= 0 and result["input_bytes"] > 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        [MARKER_NAME, "part-00000.jsonl.zst", "part-00001.jsonl.zst", REJECTED_NAME, STATS_NAME]
    )
    assert (out / "part-00000.jsonl.zst").read_text() == "A\nB\n"
    assert [json.loads(line)["reason"] for line in (out / REJECTED_NAME).read_text().splitlines()] == ["no text"]


def test_a_killed_run_resumes_its_plan_keeping_finished_jobs_into_the_same_bytes(tmp_path):
    inputs = corpus(tmp_path, [["a"], ["b", ""], ["c"]])
    run_stage(ToyStage(), inputs, tmp_path / "whole", "x", InProcess())
    reference = outputs(tmp_path / "whole")

    CALLS.clear()
    FAIL_AT.add(1)
    with pytest.raises(RuntimeError, match="job 1 killed"):
        run_stage(ToyStage(), inputs, tmp_path / "out", "x", InProcess())
    work = tmp_path / "out" / WORK_NAME
    assert (work / PLAN_MARKER).is_file() and (work / "done-00000.json").is_file()
    assert not (tmp_path / "out" / STATS_NAME).exists()  # no finished output yet

    CALLS.clear()
    FAIL_AT.clear()
    run_stage(ToyStage(), inputs, tmp_path / "out", "x", InProcess())
    assert CALLS == [1, 2]  # job 0 was finished: kept
    assert outputs(tmp_path / "out") == reference


def test_another_plan_starts_afresh_and_removes_parts_of_a_run_over_more_input(tmp_path):
    inputs = corpus(tmp_path, [["a"], ["b"]])
    FAIL_AT.add(1)
    with pytest.raises(RuntimeError):
        run_stage(ToyStage(), inputs, tmp_path / "out", "x", InProcess())
    write_text_atomic(tmp_path / "out" / f"{part_name(7)}{KEPT_SUFFIX}", "stale\n")  # an earlier, longer run's

    CALLS.clear()
    FAIL_AT.clear()
    run_stage(ToyStage(), inputs, tmp_path / "out", "y", InProcess())  # other options: another plan
    assert CALLS == [0, 1]  # nothing of the other plan's work was reused
    assert sorted(p.name for p in (tmp_path / "out").glob(f"part-*{KEPT_SUFFIX}")) == [
        "part-00000.jsonl.zst",
        "part-00001.jsonl.zst",
    ]


def test_nothing_usable_fails_with_the_record_saying_why(tmp_path):
    inputs = corpus(tmp_path, [["", ""]])
    with pytest.raises(UserError, match="no text"):
        run_stage(ToyStage(), inputs, tmp_path / "out", "x", InProcess())
    assert json.loads((tmp_path / "out" / STATS_NAME).read_text()) == {"kept": 0, "rejected": 2}
    assert not (tmp_path / "out" / WORK_NAME).exists()


def test_the_default_rejection_reasons_come_from_the_joined_rows(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / REJECTED_NAME).write_text(
        json.dumps({"reason": "not JSON at column 3"}) + "\n" + json.dumps({"reason": "no text"}) + "\n"
    )
    run = Run([], out, None, InProcess(), 0.0)
    assert ToyStage().rejection_reasons(run, []) == Counter({"not JSON": 1, "no text": 1})


def test_an_input_edited_in_place_at_its_size_and_time_is_another_plan(tmp_path):
    inputs = corpus(tmp_path, [["a"], ["b"]])
    FAIL_AT.add(1)
    with pytest.raises(RuntimeError):
        run_stage(ToyStage(), inputs, tmp_path / "out", "x", InProcess())
    first = Path(inputs[0]) / "0.jsonl"
    stat = first.stat()
    first.write_text(first.read_text().replace('"a"', '"z"'))  # the same size
    os.utime(first, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # and the same modification time

    CALLS.clear()
    FAIL_AT.clear()
    run_stage(ToyStage(), inputs, tmp_path / "out", "x", InProcess())
    assert CALLS == [0, 1]  # job 0's part was of the old content: not kept
    assert (tmp_path / "out" / "part-00000.jsonl.zst").read_text() == "Z\n"
