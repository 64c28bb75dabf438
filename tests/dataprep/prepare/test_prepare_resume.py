"""`ptk prepare` owns its stage folders and checks everything before it writes: a standalone command
into a stage folder is refused, a resume notices a stage folder changed since it was finished, and a
stage's bad settings or files are found before the first stage writes anything. In-process, small inputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pretrainkit.cli import main
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.prepare.pipeline_file import read_pipeline
from pretrainkit.dataprep.prepare.run import run_prepare
from pretrainkit.stage_layout import WORK_NAME

WORDS = "river stone cloud maple lantern orbit velvet quartz harbor meadow cinder falcon tundra willow".split()


def _corpus(path: Path, docs: int, seed: int = 0) -> Path:
    """`docs` documents of distinct word sequences (none a near duplicate of another), a paragraph each."""
    lines = []
    for i in range(docs):
        words = [WORDS[(i * 7 + j * (i + seed + 3)) % len(WORDS)] + str((i * 31 + j) % 97) for j in range(40)]
        lines.append(json.dumps({"id": f"d{i}", "text": " ".join(words)}) + "\n")
    path.write_text("".join(lines))
    return path


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


class KilledAt:
    """A runner whose jobs of `desc` never run: the run stops there as a killed one would."""

    workers = 1

    def __init__(self, desc: str):
        self.desc, self.inner = desc, LocalRunner(1)

    def run(self, fn, jobs, desc, weights=None, unit="job"):
        if desc == self.desc:
            raise RuntimeError(f"killed at {desc}")
        return self.inner.run(fn, jobs, desc, weights, unit)

    def check_paths(self, inputs, out_dir):
        self.inner.check_paths(inputs, out_dir)


def _pipeline(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text("stages:\n  - paragraphs\n  - dedup\n")
    return path


def test_a_command_writing_into_a_prepare_stage_folder_is_refused(tmp_path, capsys):
    corpus, other = _corpus(tmp_path / "c.jsonl", 30), _corpus(tmp_path / "other.jsonl", 5, seed=4)
    out = tmp_path / "out"
    assert main(["prepare", str(corpus), "--pipeline", str(_pipeline(tmp_path)), "-o", str(out), "--workers", "1"]) == 0
    finished = _tree(out)
    capsys.readouterr()
    for argv in (
        ["dedup", "--paragraphs", str(other), "-o", str(out / "paragraphs")],  # its own stage's command
        ["filter", str(other), "-o", str(out / "filter")],  # a stage folder this pipeline has not
    ):
        assert main(argv) == 2, argv
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "ptk prepare output" in err[0] and str(out) in err[0], err
    assert _tree(out) == finished


def test_a_resume_redoes_a_finished_stage_whose_folder_changed(tmp_path):
    corpus = _corpus(tmp_path / "c.jsonl", 30)
    stages = read_pipeline(_pipeline(tmp_path))
    with LocalRunner(1) as runner:
        run_prepare([str(corpus)], tmp_path / "whole", stages, runner)
    out = tmp_path / "out"
    with pytest.raises(RuntimeError, match="killed at scan"):  # in dedup, the paragraphs stage recorded
        run_prepare([str(corpus)], out, stages, KilledAt("scan"))
    assert (out / WORK_NAME / "stage-00-paragraphs.json").is_file()
    # what another command (or a hand) left: a part of other documents, at another size
    part = out / "paragraphs" / "part-00000.jsonl.zst"
    _corpus(tmp_path / "few.jsonl", 3, seed=9)
    assert main(["dedup", "--paragraphs", str(tmp_path / "few.jsonl"), "-o", str(tmp_path / "few")]) == 0
    part.write_bytes((tmp_path / "few" / "part-00000.jsonl.zst").read_bytes())

    said: list[str] = []
    with LocalRunner(1) as runner:
        run_prepare([str(corpus)], out, stages, runner, report=said.append)
    assert (
        said[0]
        == f"paragraphs -> {out / 'paragraphs'}: changed since an earlier run of this pipeline finished it; run again"
    )
    assert not any("finished by an earlier run" in s for s in said)
    assert _tree(out) == _tree(tmp_path / "whole")


@pytest.mark.parametrize(
    ("settings", "evals", "message"),
    [
        (
            "decontaminate: {eval: [evals.jsonl], eval_field: [context]}",
            '{"id": "q", "question": "a question of several words"}\n',
            "evals.jsonl:1: no field 'context' (fields: 'id', 'question'); choose it with eval_field",
        ),
        (
            "decontaminate: {eval: [evals.jsonl]}",
            '{"id": "q", "text": "too short"}\n',
            "all 1 evaluation items have fewer than ngram 13 words",
        ),
        ("dedup: {against: nowhere}", "", "nowhere"),
    ],
)
def test_a_later_stage_bad_setting_is_found_before_anything_is_written(tmp_path, capsys, settings, evals, message):
    corpus = _corpus(tmp_path / "c.jsonl", 10)
    (tmp_path / "evals.jsonl").write_text(evals)
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(f"stages:\n  - paragraphs\n  - {settings}\n")
    out = tmp_path / "out"
    assert main(["prepare", str(corpus), "--pipeline", str(pipeline), "-o", str(out), "--workers", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"ptk: error: {pipeline}: stages[1].") and message in err[0], err
    assert "--" not in err[0]  # the pipeline file's keys, not the command's options
    assert not out.exists()


def test_a_finished_prepare_is_left_as_it_is_and_another_pipeline_or_input_refused(tmp_path, capsys):
    corpus, pipeline, out = _corpus(tmp_path / "c.jsonl", 30), _pipeline(tmp_path), tmp_path / "out"

    def prepare(inputs: list[Path], pipeline: Path) -> int:
        return main(["prepare", *map(str, inputs), "-o", str(out), "--workers", "1", "--pipeline", str(pipeline)])

    def files() -> dict[Path, tuple[bytes, int]]:
        return {p: (p.read_bytes(), p.stat().st_mtime_ns) for p in out.rglob("*") if p.is_file()}

    assert prepare([corpus], pipeline) == 0
    finished = files()
    capsys.readouterr()
    assert prepare([corpus], pipeline) == 0  # the same pipeline over the same inputs: nothing to do, nothing rewritten
    assert f"prepare -> {out}: finished by an earlier run of this pipeline over these inputs; nothing to do" in (
        capsys.readouterr().out
    )
    assert files() == finished

    other = tmp_path / "other.yaml"
    other.write_text("stages:\n  - paragraphs\n  - dedup: {threshold: 0.7}\n")
    more = _corpus(tmp_path / "more.jsonl", 31)
    for inputs, given, difference in (
        ([corpus], other, "another pipeline (pipeline[1].dedup.threshold: 0.8 then, 0.7 now)"),
        ([corpus, more], pipeline, 'other inputs (inputs[1] now only: {"path": "more.jsonl"'),
    ):
        assert prepare(inputs, given) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith(f"ptk: error: {out}: holds a finished prepare of {difference}"), err
        assert files() == finished


def test_a_finished_prepare_whose_evaluation_set_changed_is_refused(tmp_path, capsys):
    corpus, evals, out = _corpus(tmp_path / "c.jsonl", 10), tmp_path / "evals.jsonl", tmp_path / "out"
    evals.write_text(json.dumps({"id": "q", "text": "a question of seven words in it"}) + "\n")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - decontaminate: {eval: [evals.jsonl], ngram: 5}\n")
    argv = ["prepare", str(corpus), "-o", str(out), "--workers", "1", "--pipeline", str(pipeline)]
    assert main(argv) == 0
    evals.write_text(json.dumps({"id": "q", "text": "another question of six words"}) + "\n")
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out}: holds a finished prepare of other named files (files[0].bytes: " in err[0], err
