"""A finished `ptk prepare` output met again: the same pipeline over the same inputs is done already,
another pipeline or other inputs must not replace it (a training run may be built on it).

    made = {"pipeline": ..., "files": named_records(paths), "inputs": input_records(raw, input_stamps(raw))}
    done = finished_run(out, made)      # OUT/stats.json's content: nothing to do; None: run
                                        # UserError: OUT holds a finished prepare of something else

OUT/stats.json says what a finished prepare was made of: `pipeline` (every stage with every
setting), `files` (the files the settings name, evaluation sets and the tokenizer, as the pipeline
names them, each with its size and a hash of its first and last MiB,
`pretrainkit.dataprep.workdir.file_stamp`) and `inputs` (each raw input's path relative to the
inputs given, its size and that hash: no absolute path and no time, so the same inputs anywhere
give the same bytes). A finished output made by another version of ptk
from the same pipeline and inputs, or by one that did not record its inputs, is run again.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pretrainkit import __version__
from pretrainkit.dataprep.readers import InputFile
from pretrainkit.dataprep.workdir import file_stamp
from pretrainkit.errors import UserError, shortened
from pretrainkit.files import read_json_object
from pretrainkit.remote.staging import shown
from pretrainkit.stage_layout import STATS_NAME


def input_records(files: Sequence[InputFile], stamps: Sequence[tuple[str, int, int, str]]) -> list[dict]:
    """What OUT/stats.json records of the raw inputs (`stamps`: their `file_stamp`s, in order)."""
    return [{"path": f.rel, "bytes": size, "ends_sha256": ends} for f, (_, size, _, ends) in zip(files, stamps)]


def named_records(paths: Sequence[str]) -> list[dict]:
    """What OUT/stats.json records of the files the settings name (a folder, a tokenizer's: its path)."""
    records = []
    for path in paths:
        if Path(path).is_file():
            _, size, _, ends = file_stamp(path)
            records.append({"path": shown(path), "bytes": size, "ends_sha256": ends})
        else:
            records.append({"path": shown(path)})
    return records


def finished_run(out_dir: Path, made: dict) -> dict | None:
    """OUT/stats.json's content where OUT holds a finished prepare of `made` (its `pipeline`, `files`
    and `inputs`) by this version; None where there is none to keep; a UserError naming the first
    difference where OUT holds a finished prepare of another pipeline, other named files or other inputs."""
    path = out_dir / STATS_NAME
    if not path.is_file():
        return None
    done = read_json_object(path, "a ptk prepare's stats.json")
    made = json.loads(json.dumps(made))  # tuples as JSON gives them back: lists
    for key, what in (("pipeline", "another pipeline"), ("files", "other named files"), ("inputs", "other inputs")):
        if key in done and done[key] != made[key]:
            raise UserError(
                f"{out_dir}: holds a finished prepare of {what} ({_difference(done[key], made[key], key)}); "
                "choose another -o, or remove the folder to run this one there"
            )
    return done if "inputs" in done and done.get("version") == __version__ else None


def _difference(then: Any, now: Any, where: str) -> str:
    """The first place where two JSON values differ: `pipeline[3].dedup.threshold: 0.8 then, 0.7 now`."""
    if isinstance(then, dict) and isinstance(now, dict):
        key = next(k for k in [*then, *now] if then.get(k) != now.get(k))
        return _difference(then.get(key), now.get(key), f"{where}.{key}")
    if isinstance(then, list) and isinstance(now, list):
        i = next((i for i, (a, b) in enumerate(zip(then, now)) if a != b), min(len(then), len(now)))
        if i < len(then) and i < len(now):
            return _difference(then[i], now[i], f"{where}[{i}]")
        extra, which = (then[i], "then only") if i < len(then) else (now[i], "now only")
        return f"{where}[{i}] {which}: {shortened(json.dumps(extra), 80)}"
    return f"{where}: {shortened(json.dumps(then), 80)} then, {shortened(json.dumps(now), 80)} now"
