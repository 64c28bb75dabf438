"""`ptk filter` end to end on real articles: every input record kept, removed (with its filter and
value) or rejected, and the stats say so; the kept records carry what the steps changed and added;
the same bytes for any number of workers and after a kill -9 and the same command again."""

from __future__ import annotations

import gc
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import zstandard

from fixtures.corpora import ROOT, write_jsonl
from pretrainkit.cli import main
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS
from pretrainkit.files import TMP_MARK

LOREM = "Lorem ipsum dolor sit amet, consectetur adipiscing elit."


@pytest.fixture(scope="module")
def no_language_filters(tmp_path_factory) -> Path:
    """The default filters but the language step (its model is another module's, tested with it)."""
    text = DEFAULT_FILTERS.read_text()
    start = text.index("  - language:")
    end = text.index("  # Gopher repetition")
    path = tmp_path_factory.mktemp("filters") / "fineweb-no-language.yaml"
    path.write_text(text[:start] + text[end:])
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, reuters_docs) -> tuple[Path, int]:
    """Three files (plain, gzip, zstd) of Reuters articles with an extra field, two crafted documents
    and three unreadable records; returns the folder and its number of records."""
    root = tmp_path_factory.mktemp("filter-corpus")
    docs = reuters_docs[:1500]
    good = reuters_docs[20][1]  # an article that every filter keeps (checked below)
    records = [{"id": i, "text": t, "url": f"https://news.example/{i}"} for i, t in docs]
    records.append({"id": "with-pii", "text": good + "\nWrite to jane.doe@corp-mail.com or ping 8.8.8.8."})
    records.append({"id": "lorem", "text": good + "\n" + LOREM})
    lines = [json.dumps(r) for r in records]
    a, b, c = lines[0::3], lines[1::3], lines[2::3]
    (root / "in").mkdir()
    (root / "in" / "a.jsonl").write_text(
        "\n".join(a + ['{"id": "half", "text": ', '{"id": "empty", "text": " "}']) + "\n"
    )
    (root / "in" / "b.jsonl.gz").write_bytes(gzip.compress(("\n".join(b) + "\n").encode(), mtime=0))
    (root / "in" / "c.jsonl.zst").write_bytes(
        zstandard.compress(("\n".join(c) + "\n").encode() + b'{"text": "caf\xe9"}\n')
    )
    return root / "in", len(records) + 3


def kept_records(out: Path) -> list[dict]:
    rows = []
    for part in sorted(out.glob("part-*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes())
        rows += [json.loads(line) for line in data.decode().splitlines()]
    return rows


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_every_record_is_kept_removed_or_rejected(tmp_path, corpus, no_language_filters, reuters_docs, capsys):
    inputs, records = corpus
    out = tmp_path / "out"
    assert main(["filter", str(inputs), "-o", str(out), "--filters", str(no_language_filters), "--workers", "2"]) == 0
    stats = json.loads((out / "stats.json").read_text())
    kept, removed, rejected = kept_records(out), rows(out / "removed.jsonl"), rows(out / "rejected.jsonl")
    assert stats["input_docs"] == records == len(kept) + len(removed) + len(rejected)
    assert (stats["kept_docs"], stats["removed_docs"], stats["rejected"]) == (len(kept), len(removed), len(rejected))
    assert stats["input_text_bytes"] == stats["kept_text_bytes"] + stats["removed_text_bytes"]
    assert sum(v["docs"] for v in stats["removed_by_filter"].values()) == len(removed)
    assert sum(v["docs"] for v in stats["removed_by_step"].values()) == len(removed)
    assert stats["rejected_reasons"].keys() == {"empty text", "malformed JSON: Expecting value", "invalid UTF-8"}
    assert 0.1 < len(removed) / records < 0.9  # real articles: the filters keep most and remove some

    # every removed row names the record, the rule and the value that failed its threshold, and shows
    # the record's url (the Reuters records have one, the crafted ones none) and its text's first 200 characters
    by_rule = {}
    texts = {str(i): t for i, t in reuters_docs[:1500]}
    for row in removed:
        has_url = {"url"} if row["id"] in texts else set()
        assert row.keys() == {"id", "source", "line", "filter", "value", "threshold", "text_head"} | has_url
        if has_url:
            assert row["url"] == f"https://news.example/{row['id']}"
            assert row["text_head"] == texts[row["id"]][:200]
        by_rule[row["filter"]] = by_rule.get(row["filter"], 0) + 1
        step, _, rule = row["filter"].partition(".")
        assert step in ("gopher_repetition", "gopher_quality", "c4", "fineweb_quality") and rule
    assert by_rule == {rule: v["docs"] for rule, v in stats["removed_by_filter"].items()}
    assert {r["id"]: r["filter"] for r in removed}["lorem"] == "c4.lorem_ipsum"
    assert {r["id"]: r["text_head"] for r in removed}["lorem"] == (reuters_docs[20][1] + "\n" + LOREM)[:200]
    short = [r for r in removed if r["filter"] == "gopher_quality.min_words"]
    assert short and all(r["value"] < r["threshold"] == 50 for r in short)

    # kept records keep their other fields; the text is as C4 and PII left it, and the count is recorded
    by_id = {r["id"]: r for r in kept}
    assert by_id["with-pii"]["pii"] == {"email": 1, "ip": 1}
    assert by_id["with-pii"]["text"].endswith("Write to email@example.com or ping 192.0.2.1.")
    assert stats["pii"] == {"email": 1, "ip": 1}
    assert all(r["url"] == f"https://news.example/{r['id']}" for r in kept if isinstance(r["id"], int))
    assert "filter ->" in capsys.readouterr().out


def test_the_same_bytes_for_one_and_two_workers(tmp_path, corpus, no_language_filters):
    inputs, _ = corpus
    outs = []
    for workers in ("1", "2"):
        out = tmp_path / f"w{workers}"
        assert (
            main(["filter", str(inputs), "-o", str(out), "--filters", str(no_language_filters), "--workers", workers])
            == 0
        )
        outs.append(snapshot(out))
    assert outs[0] == outs[1]


def test_a_job_leaves_the_cycle_collector_as_it_found_it(tmp_path, corpus, no_language_filters, monkeypatch):
    """A job runs its steps with Python's cycle collector off (its objects make no cycles); after the
    job, also one whose step failed, the collector is as the caller had it."""
    from pretrainkit.dataprep.filter import pipeline

    inputs, _ = corpus
    argv = ["filter", str(inputs), "--filters", str(no_language_filters), "--workers", "1"]  # jobs in this process
    run_steps, seen = pipeline._run_steps, []

    def watched(steps, docs, seconds):
        seen.append(gc.isenabled())
        return run_steps(steps, docs, seconds)

    def failing(steps, docs, seconds):
        raise OSError("a step failed")

    monkeypatch.setattr(pipeline, "_run_steps", watched)
    assert gc.isenabled()
    assert main([*argv, "-o", str(tmp_path / "on")]) == 0
    assert seen and not any(seen) and gc.isenabled()
    gc.disable()
    try:
        assert main([*argv, "-o", str(tmp_path / "off")]) == 0
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert snapshot(tmp_path / "off") == snapshot(tmp_path / "on")
    monkeypatch.setattr(pipeline, "_run_steps", failing)
    with pytest.raises(OSError, match="a step failed"):
        main([*argv, "-o", str(tmp_path / "failed")])
    assert gc.isenabled()


@pytest.mark.parametrize("batch_docs", [1, 7])
def test_batches_of_documents_give_the_bytes_of_one_document_at_a_time(
    tmp_path, corpus, no_language_filters, monkeypatch, batch_docs
):
    """A job runs each step on a batch of documents before the next step; batch edges fall between
    unreadable records, removed and kept documents, and the rows come out as from the default batches."""
    from pretrainkit.dataprep.filter import pipeline

    inputs, _ = corpus
    argv = ["filter", str(inputs), "--filters", str(no_language_filters), "--workers", "1"]
    assert main([*argv, "-o", str(tmp_path / "default")]) == 0
    monkeypatch.setattr(pipeline, "BATCH_DOCS", batch_docs)
    assert main([*argv, "-o", str(tmp_path / "small")]) == 0
    assert snapshot(tmp_path / "small") == snapshot(tmp_path / "default")


def test_kill_9_then_the_same_command_resumes_to_the_same_bytes(tmp_path, reuters_docs, no_language_filters):
    inputs = tmp_path / "in"
    for i in range(6):
        write_jsonl(reuters_docs[i::6], inputs / f"part{i}.jsonl")

    def command(out: Path) -> list[str]:
        return [
            sys.executable,
            "-m",
            "pretrainkit.cli",
            "filter",
            str(inputs),
            "-o",
            str(out),
            "--filters",
            str(no_language_filters),
            "--workers",
            "1",
        ]

    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    clean = tmp_path / "clean"
    subprocess.run(command(clean), check=True, capture_output=True, env=env)
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        command(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True
    )
    deadline = time.monotonic() + 120
    while not (out / ".work" / "done-00001.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    rerun = subprocess.run(command(out), capture_output=True, text=True, env=env)
    assert rerun.returncode == 0, rerun.stderr
    assert snapshot(out) == snapshot(clean)
    assert not [p for p in out.rglob("*") if TMP_MARK in p.name]


def test_a_bad_filters_file_is_one_line_and_writes_nothing(tmp_path, corpus, capsys):
    inputs, _ = corpus
    bad = tmp_path / "bad.yaml"
    bad.write_text("filters:\n  - c4: {}\n  - pii\n  - gopher_quality: {min_word: 3}\n")
    out = tmp_path / "out"
    assert main(["filter", str(inputs), "-o", str(out), "--filters", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"ptk: error: {bad}: filters[2].gopher_quality: unknown key 'min_word' (known: ")
        and "\n" not in err
    )
    assert not out.exists()


def test_a_run_whose_filters_remove_every_document_fails_in_one_line(tmp_path, capsys):
    """Nothing kept is no output: the record and the removed rows are written (to see why), the exit is not 0."""
    inputs = write_jsonl([("a", "short"), ("b", "tiny"), ("c", "x" * 50)], tmp_path / "in" / "a.jsonl")
    filters = tmp_path / "filters.yaml"
    filters.write_text("filters:\n  - min_length: {min_chars: 100}\n")
    out = tmp_path / "out"
    assert main(["filter", str(inputs), "-o", str(out), "--filters", str(filters)]) == 2
    err = capsys.readouterr().err.strip()
    want = f"ptk: error: {inputs}: the filters removed all 3 documents (min_length.min_chars: 3; each listed in "
    assert err == f"{want}{out / 'removed.jsonl'}); nothing kept", err
    assert json.loads((out / "stats.json").read_text())["removed_docs"] == 3
    assert len((out / "removed.jsonl").read_text().splitlines()) == 3
