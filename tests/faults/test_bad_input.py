"""Every command given a bad value, and every input kind it reads damaged every way DAMAGES knows: one
line naming the damaged file and a non-zero exit, nothing written, the input left as it was; or, for
a broken record inside a corpus, the run succeeds and accounts for the record as rejected."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures.fault_commands import (
    COMMANDS,
    DAMAGES,
    Command,
    damaged_workspace,
    error_line,
    output_of,
    run_in_process,
)


def tree(path: Path) -> dict[str, bytes]:
    if path.is_file():
        return {path.name: path.read_bytes()}
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}


BAD_VALUES = [(c, value) for c in COMMANDS for value in (c.bad_value, c.huge_value) if value]


@pytest.mark.parametrize(("command", "bad_value"), BAD_VALUES, ids=[f"{c}-{' '.join(v)}" for c, v in BAD_VALUES])
def test_a_bad_value_is_one_line_and_writes_nothing(
    command: Command, bad_value: tuple[str, ...], workspace, tmp_path: Path, capsys, one_thread
):
    out = output_of(command, tmp_path)
    code, _, err = run_in_process(command.argv(workspace, out) + list(bad_value), capsys)
    assert code == 2, err
    option = bad_value[-1].split("=")[0] if bad_value[0] == "--set" else bad_value[0]
    line = error_line(err)
    assert "unrecognized arguments" not in line, line  # the option exists: it is its value that is bad
    assert option.lstrip("-").replace("-", "_") in line.replace("-", "_")
    assert not out.exists()


CASES = [(c, kind, d) for c in COMMANDS for kind in c.reads for d in DAMAGES[kind]]


@pytest.mark.parametrize(("command", "kind", "damage"), CASES, ids=[f"{c}-{kind}-{d.name}" for c, kind, d in CASES])
def test_a_damaged_input_is_one_line_naming_it_or_accounted_for(
    command: Command, kind: str, damage, workspace, tmp_path: Path, capsys, one_thread
):
    ws, named = damaged_workspace(workspace, kind, damage, tmp_path / "inputs")
    before = tree(tmp_path / "inputs")
    out = output_of(command, tmp_path / "output")
    code, stdout, err = run_in_process(command.argv(ws, out), capsys)
    assert tree(tmp_path / "inputs") == before  # nothing read is changed
    if command.reports_damage and code == 1:  # a finding of `ptk shards verify`, not its failure
        assert str(named) in stdout and "Traceback" not in err, (stdout, err)
        return
    if not damage.accounted:
        assert code != 0, (stdout, err)
        line = error_line(err)
        # the path as the command reached it (a mixture's may be relative: out/../inputs/...)
        assert f"{named.parent.name}/{named.name}" in line or line.startswith(f"ptk: error: {named}"), (named, line)
        assert not out.exists() or command.name in ("train", "init") and not any(out.rglob("*.tmp-*"))
        return
    assert code == 0, err
    if command.name in ("tokenizer-train", "classifier-train"):  # no output folder: the count is said
        assert "(1 rejected records skipped)" in stdout, stdout
        return
    first_stage = {"prepare": "dedup", "prepare-pipeline": "extract"}.get(command.name, "")
    rejected = out / first_stage / "rejected.jsonl"
    rows = [json.loads(line) for line in rejected.read_text().splitlines()]
    assert any(r["source"] == named.name for r in rows), rows
    assert any(r["source"] == named.name and r["reason"].startswith(damage.reason) for r in rows), rows
