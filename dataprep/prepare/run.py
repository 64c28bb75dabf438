"""`ptk prepare`'s run: the pipeline's stages one after another on one runner, each into its own
folder under OUT, then the funnel (OUT/stats.json, the table printed, OUT/funnel.png).

    stages = read_pipeline(Path("pipeline.yaml"))
    with LocalRunner(2) as runner:
        funnel = run_prepare(["crawl/"], Path("out"), stages, runner)

Each stage is its command's run (`pretrainkit.dataprep.prepare.stages`), crash-safe on its own, over
the kept records of the stage before. Before the first stage, every stage's settings are checked and
the files they name read (`Stage.checked`): a mistake in the last stage costs no run of the first. A
finished stage is recorded in OUT/.work (its stats, the profile of what it kept,
`pretrainkit.dataprep.prepare.profile`, and the stamps of its folder's files), so running the same
command again after a kill goes on from the stage it was in, into the same bytes; a changed pipeline
or input starts again (each stage's own plan then decides what of its folder it keeps), and so does a
finished stage whose folder no longer holds what it recorded, with every stage after it. A finished
OUT of the same pipeline over the same inputs is left as it is; one of another pipeline or other
inputs is refused (`pretrainkit.dataprep.prepare.finished`). The stage
folders are the prepare's: no other command writes into a folder under OUT
(`pretrainkit.output_folders`). The documents that enter the first text stage (the extracted pages,
or the inputs) and those the last text stage keeps are profiled with their languages; every stage's
output with its size and lengths. The shard manifest's provenance names the raw inputs with their
hashes and holds every earlier stage's stats, so it describes the whole pipeline. OUT/stats.json is
written last: a folder without it is no finished prepare.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from pretrainkit import __version__
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.extract.pipeline import INPUT_SUFFIXES
from pretrainkit.dataprep.prepare.finished import finished_run, input_records, named_records
from pretrainkit.dataprep.prepare.funnel import funnel_rows
from pretrainkit.dataprep.prepare.picture import draw_funnel
from pretrainkit.dataprep.prepare.profile import profile
from pretrainkit.dataprep.prepare.stages import FIRST, LAST, Stage, run_pipeline_stage, stage_outputs
from pretrainkit.dataprep.readers import discover_inputs, refuse_overlap
from pretrainkit.dataprep.tokenize.corpus import TokenizeStage, input_hashes
from pretrainkit.dataprep.workdir import file_stamp, input_stamps, open_work_dir, remove_work_dir
from pretrainkit.errors import UserError
from pretrainkit.files import output_directory, write_text_atomic, writing_into
from pretrainkit.output_folders import PREPARE, check_folder, output_folder, own_name
from pretrainkit.stage_layout import STATS_NAME, WORK_NAME

PICTURE_NAME = "funnel.png"


def owned_directories(out_dir: Path, stages: list[Stage]) -> tuple[list[Path], list[Path]]:
    """Where only a prepare run into `out_dir` writes: (directories, trees) whose temporaries are its runs'."""
    dirs, trees = [out_dir], [out_dir / WORK_NAME]
    for stage in stages:
        d, t = stage.owned(out_dir / stage.folder)
        dirs, trees = dirs + d, trees + t
    return dirs, trees


def _stamp(path: str) -> tuple[str, int, int, str] | str:
    """The stamp of a file a stage's settings name (`file_stamp`); the path alone of a folder (a tokenizer's)."""
    return file_stamp(path) if Path(path).is_file() else path


def folder_stamps(folder: Path) -> list[list]:
    """What a finished stage's folder holds: each file's path in it with its stamp (`file_stamp`), the
    output folder's marker and lock left out (no output's content)."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and not own_name(p.name)) if folder.is_dir() else []
    return [[p.relative_to(folder).as_posix(), *file_stamp(str(p))[1:]] for p in files]


def run_prepare(
    inputs: list[str],
    out_dir: Path,
    stages: list[Stage],
    runner: JobRunner,
    text_field: str = "text",
    id_field: str = "id",
    report: Callable[[str], None] = lambda summary: None,
) -> dict:
    """Run `stages` over `inputs` into `out_dir` on `runner` (entered); returns OUT/stats.json's content.
    `report` is given each stage's summary as the stage ends (or that an earlier run finished it)."""
    out_dir = Path(out_dir)
    refuse_overlap(inputs, out_dir)
    states = [stage.checked() for stage in stages]  # before anything is written, not after the long stages
    with output_folder(out_dir, PREPARE), writing_into(out_dir, *owned_directories(out_dir, stages)):
        for stage in stages:
            check_folder(out_dir / stage.folder, stage.kind)  # before the long first stage, not after it
        return _prepare(inputs, out_dir, stages, states, runner, text_field, id_field, report)


def _prepare(
    inputs: list[str],
    out_dir: Path,
    stages: list[Stage],
    states: list,
    runner: JobRunner,
    text_field: str,
    id_field: str,
    report: Callable[[str], None],
) -> dict:
    raw = discover_inputs(inputs, INPUT_SUFFIXES) if stages[0].name == FIRST else discover_inputs(inputs)
    output_directory(out_dir)
    runner.check_paths([f.path for f in raw] + [str(p) for s in stages for p in s.files()], out_dir)
    work = out_dir / WORK_NAME
    stamps = input_stamps(raw)
    plan = {
        "inputs": stamps,
        "files": [_stamp(path) for stage in stages for path in stage.files()],  # a changed eval set or tokenizer
        "stages": [s.as_json() for s in stages],
        "fields": [text_field, id_field],
        "version": __version__,
    }
    named = [path for stage in stages for path in stage.files()]
    made = {"pipeline": plan["stages"], "files": named_records(named), "inputs": input_records(raw, stamps)}
    done = finished_run(out_dir, made)  # another pipeline's or other inputs' finished output: refused
    if done is not None:
        report(f"prepare -> {out_dir}: finished by an earlier run of this pipeline over these inputs; nothing to do")
        if work.is_dir():
            remove_work_dir(work)  # of a run killed after it wrote OUT/stats.json
        return done
    open_work_dir(work, plan)
    (out_dir / STATS_NAME).unlink(missing_ok=True)  # until this run ends, OUT is no finished output

    def recorded(name: str, make) -> dict:
        """`make()`, or what an earlier, interrupted run of this plan recorded of it."""
        path = work / f"{name}.json"
        if not path.exists():
            write_text_atomic(path, json.dumps(make(), sort_keys=True))
        return json.loads(path.read_text(encoding="utf-8"))

    text_stages = [s for s in stages if s.name != LAST]
    profiles = {}
    if stages[0].name != FIRST:
        profiles["input"] = recorded("profile-input", lambda: profile(inputs, text_field, id_field, True, runner))
    records: list[dict] = []
    current = list(inputs)
    for i, (stage, state) in enumerate(zip(stages, states)):
        folder = out_dir / stage.folder
        runs = stage.runs
        if stage.name == LAST:  # its manifest's provenance names the raw inputs and the stages before
            hashes = recorded("input-hashes", lambda: input_hashes(raw, runner))
            provenance = {"inputs": hashes, "pipeline": plan["stages"][:-1]}
            provenance.update({s.name: r["stats"] for s, r in zip(stages, records)})
            runs = TokenizeStage(provenance)

        def finish(stage=stage, state=state, folder=folder, runs=runs, current=current) -> dict:
            stats, summary = run_pipeline_stage(stage, current, folder, runner, state, runs)
            report(summary)
            record = {"stats": stats}
            if stage.name != LAST:
                languages = stage.name == FIRST or stage is text_stages[-1]
                kept = stage_outputs(stage, current, folder)
                record["profile"] = profile(kept, text_field, id_field, languages, runner, f"profile {stage.name}")
            return dict(record, folder=folder_stamps(folder))

        name = f"stage-{i:02d}-{stage.name}"
        if (work / f"{name}.json").exists():
            if json.loads((work / f"{name}.json").read_text(encoding="utf-8"))["folder"] == folder_stamps(folder):
                report(f"{stage.name} -> {folder}: finished by an earlier run of this pipeline")
            else:  # replaced or edited since: this stage and every one after it run again
                report(
                    f"{stage.name} -> {folder}: changed since an earlier run of this pipeline finished it; run again"
                )
                for later in range(i, len(stages)):
                    (work / f"stage-{later:02d}-{stages[later].name}.json").unlink(missing_ok=True)
        records.append(recorded(name, finish))
        current = stage_outputs(stage, current, folder)
        if i + 1 < len(stages) and not records[-1]["profile"]["docs"]:
            raise UserError(
                f"{folder}: the {stage.name} stage kept no documents (its stats.json says why); "
                f"nothing is left for the {stages[i + 1].name} stage"
            )
    if stages[0].name == FIRST:
        profiles["input"] = records[0]["profile"]
    if text_stages:
        profiles["output"] = records[len(text_stages) - 1]["profile"]

    result = {
        "funnel": funnel_rows(stages, records, profiles.get("input")),
        "profiles": profiles,
        "stages": {s.name: s.folder for s in stages},
        "pipeline": plan["stages"],
        "files": made["files"],
        "inputs": made["inputs"],
        "version": __version__,
    }
    draw_funnel(result, out_dir / PICTURE_NAME)
    write_text_atomic(out_dir / STATS_NAME, json.dumps(result, indent=2, sort_keys=True) + "\n")
    remove_work_dir(work)
    return result
