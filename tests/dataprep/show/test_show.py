"""`ptk show` on a real `ptk prepare` run over Reuters articles (filter, paragraphs, dedup,
decontaminate): each stage's removed rows grouped by reason with the counts and first examples that
the row files hold, each row with its url and the text as it entered the stage; the first kept
records with --kept; --filter picks one reason, and an unknown one, a missing, empty or unfinished
folder is one line."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from fixtures.corpora import write_jsonl
from fixtures.fault_commands import run_in_process
from fixtures.stage_parts import kept_records
from pretrainkit.cli import main

REASONS: dict[str, tuple[str, Callable[[dict], str]]] = {  # the folder's row file, and a row's reason
    "filter": ("removed.jsonl", lambda r: r["filter"]),
    "paragraphs": ("removed.jsonl", lambda r: r["filter"]),
    "dedup": ("duplicates.jsonl", lambda r: f"dedup.{r['kind']}"),
    "decontaminate": ("contaminated.jsonl", lambda r: f"decontaminate.{r['eval_file']}"),
}


@pytest.fixture(scope="module")
def prepared(tmp_path_factory, reuters_docs) -> Path:
    """`ptk prepare` over 400 Reuters articles with urls, and copies of 20 long ones with every space
    doubled (paragraph dedup, comparing lines, keeps them; dedup finds them near duplicates), against
    evaluation items that are passages of 10 others."""
    root = tmp_path_factory.mktemp("show")
    docs = reuters_docs[:400]
    long = [(i, t) for i, t in docs if len(t.split()) > 250]
    copies = [(f"{i}-copy", t.replace(" ", "  ")) for i, t in long[:20]]
    write_jsonl(docs + copies, root / "corpus" / "news.jsonl")
    lines = (root / "corpus" / "news.jsonl").read_text().splitlines()
    with_urls = [json.loads(line) | {"url": f"https://news.example/{json.loads(line)['id']}"} for line in lines]
    (root / "corpus" / "news.jsonl").write_text("".join(json.dumps(r) + "\n" for r in with_urls))
    evals = root / "evals.jsonl"
    evals.write_text("".join(json.dumps({"id": f"q-{i}", "text": t[:600]}) + "\n" for i, t in long[20:30]))
    pipeline = root / "pipeline.yaml"
    stages = ["filter", "paragraphs", {"dedup": {"threshold": 0.8}}, {"decontaminate": {"eval": [str(evals)]}}]
    pipeline.write_text(yaml.safe_dump({"stages": stages}))
    out = root / "out"
    assert main(["prepare", str(root / "corpus"), "--pipeline", str(pipeline), "-o", str(out), "--workers", "2"]) == 0
    return out


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def show(capsys, *argv: str) -> tuple[int, str, str]:
    return run_in_process(["show", *argv], capsys)


def expected_groups(folder: Path, n: int) -> list[dict]:
    """The groups as the row file holds them: by count (largest first), then name; the first n rows of each."""
    name, reason_of = REASONS[folder.name]
    listed = rows(folder / name)
    counts = Counter(map(reason_of, listed))
    order = sorted(counts, key=lambda r: (-counts[r], r))
    return [{"reason": r, "count": counts[r], "examples": [x for x in listed if reason_of(x) == r][:n]} for r in order]


def test_each_stage_of_a_prepare_is_shown_by_reason_with_counts_and_the_first_examples(prepared, capsys):
    code, out, err = show(capsys, str(prepared), "--n", "2", "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert [Path(s["folder"]).name for s in shown["stages"]] == ["filter", "paragraphs", "dedup", "decontaminate"]
    for stage in shown["stages"]:
        folder = Path(stage["folder"])
        stats = json.loads((folder / "stats.json").read_text())
        assert stage["groups"] == expected_groups(folder, 2), folder.name
        assert stage["groups"], f"{folder.name} removed nothing: the corpus no longer tests it"
        assert stage["kept_docs"] == stats["kept_docs"]
        assert stage["removed_docs"] == len(rows(folder / REASONS[folder.name][0]))
    by_name = {Path(s["folder"]).name: s for s in shown["stages"]}
    assert {g["reason"] for g in by_name["dedup"]["groups"]} == {"dedup.near"}  # the copies with doubled spaces


def test_every_removed_row_shows_its_url_and_the_text_as_it_entered_the_stage(prepared):
    entered = {"filter": {r["id"]: r["text"] for r in rows(prepared.parent / "corpus" / "news.jsonl")}}
    for before, stage in (("filter", "paragraphs"), ("paragraphs", "dedup"), ("dedup", "decontaminate")):
        entered[stage] = {r["id"]: r["text"] for r in kept_records(prepared / before)}
    for stage, (name, _) in REASONS.items():
        removed = rows(prepared / stage / name)
        assert removed, stage
        for row in removed:
            assert row["url"] == f"https://news.example/{row['id']}"
            assert row["text_head"] == entered[stage][row["id"]][:200], (stage, row["id"])
    # paragraph dedup shows the text it was given, not what the repeats left of it
    changed = [r for r in rows(prepared / "paragraphs" / "removed.jsonl") if r["value"] < len(r["text_head"].strip())]
    assert changed


def test_a_stage_folder_alone_and_its_text_for_a_person(prepared, capsys):
    folder = prepared / "filter"
    code, out, err = show(capsys, str(folder), "--n", "1")
    assert code == 0, err
    groups = expected_groups(folder, 1)
    kept = json.loads((folder / "stats.json").read_text())["kept_docs"]
    removed = sum(g["count"] for g in groups)
    lines = out.splitlines()
    assert (
        lines[0]
        == f"ptk filter -> {folder}: {kept:,} kept, {removed:,} removed (each listed in {folder / 'removed.jsonl'})"
    )
    first = groups[0]["examples"][0]
    assert lines[1] == f"  {groups[0]['reason']}: {groups[0]['count']:,} removed, the first 1"
    assert lines[2] == (
        f"    1. {first['id']} ({first['source']}:{first['line']}): value {json.dumps(first['value'])}, "
        f"threshold {json.dumps(first['threshold'])}, lang {first['lang']} ({first['lang_score']})"
    )
    assert lines[3:5] == [f"       {first['url']}", f"       {json.dumps(first['text_head'], ensure_ascii=False)}"]
    assert sum(line.startswith("  ") and not line.startswith("   ") for line in lines) == len(groups)


def test_filter_shows_one_reason_across_the_stages_and_n_zero_only_counts(prepared, capsys):
    group = expected_groups(prepared / "paragraphs", 3)[0]
    code, out, _ = show(capsys, str(prepared), "--filter", group["reason"], "--n", "3", "--json")
    assert code == 0
    (stage,) = json.loads(out)["stages"]
    assert Path(stage["folder"]).name == "paragraphs" and stage["groups"] == [group]
    assert stage["removed_docs"] == len(rows(prepared / "paragraphs" / "removed.jsonl"))  # every reason's
    code, out, _ = show(capsys, str(prepared / "dedup"), "--n", "0")
    assert code == 0 and out.splitlines()[1:] == [
        f"  {g['reason']}: {g['count']:,} removed" for g in expected_groups(prepared / "dedup", 0)
    ]


def test_kept_shows_the_first_kept_records(prepared, capsys):
    folder = prepared / "dedup"
    code, out, err = show(capsys, str(folder), "--kept", "--n", "3", "--json")
    assert code == 0, err
    (stage,) = json.loads(out)["stages"]
    kept = kept_records(folder)
    assert stage["rows"] is None and stage["kept_docs"] == len(kept)
    assert stage["groups"] == [
        {
            "reason": "kept",
            "count": len(kept),
            "examples": [
                {
                    "id": r["id"],
                    "source": "part-00000.jsonl.zst",
                    "line": n,
                    "url": r["url"],
                    "text_head": r["text"][:200],
                }
                for n, r in enumerate(kept[:3], 1)
            ],
        }
    ]


def test_an_unknown_filter_is_one_line_naming_those_there(prepared, capsys):
    code, out, err = show(capsys, str(prepared / "filter"), "--filter", "c4.no_such_rule")
    names = sorted({g["reason"] for g in expected_groups(prepared / "filter", 0)})
    assert code == 2 and not out
    assert err == (
        f"ptk: error: {prepared / 'filter'}: no document removed by 'c4.no_such_rule'; "
        f"the reasons there: {', '.join(names)}\n"
    )


def test_a_missing_empty_unfinished_or_other_folder_is_one_line(prepared, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("not an output")
    for folder, message in (
        (tmp_path / "missing", "no such folder"),
        (tmp_path / "empty", "an empty folder; ptk show reads the outputs of ptk filter, "),
        (tmp_path / "mine", "no ptk output; ptk show reads"),
        ("s3://bucket/out", "ptk show reads a local folder, not a URL"),
    ):
        code, out, err = show(capsys, str(folder))
        assert code == 2 and not out and err.startswith(f"ptk: error: {folder}: {message}") and err.count("\n") == 1
    unfinished = tmp_path / "unfinished"
    shutil.copytree(prepared / "filter", unfinished)
    (unfinished / "stats.json").unlink()  # as a killed run leaves it
    code, _, err = show(capsys, str(unfinished))
    rerun = "rerun that command to finish it"
    assert code == 2 and err == f"ptk: error: {unfinished}: an unfinished ptk filter output (no stats.json); {rerun}\n"


def test_a_broken_row_is_one_line_naming_the_file_and_line(prepared, tmp_path, capsys):
    copy = tmp_path / "filter"
    shutil.copytree(prepared / "filter", copy)
    with open(copy / "removed.jsonl", "ab") as f:
        f.write(b'{"id": "half", \n')
    lines = len((copy / "removed.jsonl").read_bytes().splitlines())
    code, _, err = show(capsys, str(copy))
    assert code == 2 and err.startswith(f"ptk: error: {copy / 'removed.jsonl'}: line {lines}: not a JSON row")
    assert err.count("\n") == 1


def test_a_report_only_decontamination_is_shown_as_found_not_removed(prepared, tmp_path, capsys):
    out = tmp_path / "listed"
    evals = prepared.parent / "evals.jsonl"
    assert main(["decontaminate", str(prepared / "dedup"), "--eval", str(evals), "--report-only", "-o", str(out)]) == 0
    capsys.readouterr()
    code, text, err = show(capsys, str(out), "--n", "0")
    listed = rows(out / "contaminated.jsonl")
    assert code == 0 and listed, err
    assert text.splitlines() == [
        f"ptk decontaminate -> {out}: {json.loads((out / 'stats.json').read_text())['kept_docs']:,} kept, "
        f"{len(listed):,} found (--report-only: not removed; each listed in {out / 'contaminated.jsonl'})",
        f"  decontaminate.{evals}: {len(listed):,} found",
    ]
