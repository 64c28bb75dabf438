"""`ptk dedup` end to end: accounting, unchanged records, determinism across workers, --against,
short documents, bad input, and the CLI's error contract."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import zstandard

from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.dedup.index import DedupIndex
from pretrainkit.dataprep.dedup.pairs import partition_pairs
from pretrainkit.dataprep.dedup.pipeline import DedupOptions, run_dedup
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.errors import UserError


def read_zst_lines(path: Path) -> list[bytes]:
    with open(path, "rb") as f:
        return zstandard.ZstdDecompressor().stream_reader(f).read().splitlines()


def dedup(inputs: list[str], out: Path, options: DedupOptions, workers: int, budget: DedupBudget | None = None) -> dict:
    with LocalRunner(workers) as runner:
        return run_dedup(inputs, out, options, runner, budget)


def kept_records(out: Path) -> list[bytes]:
    return [line for p in sorted(out.glob("part-*.jsonl.zst")) for line in read_zst_lines(p)]


def output_bytes(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def jsonl_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_counts_add_up_and_kept_records_are_unchanged(tmp_path, reuters_jsonl):
    stats = dedup([str(reuters_jsonl)], tmp_path / "out", DedupOptions(), workers=1)
    saved = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert (
        saved["input_docs"]
        == saved["kept_docs"] + saved["exact_duplicates"] + saved["near_duplicates"] + saved["rejected"]
    )
    assert saved["input_docs"] == len(reuters_jsonl.read_text().splitlines())
    assert saved["exact_duplicates"] > 0 and saved["near_duplicates"] > 0  # Reuters has both, naturally
    assert stats["kept_docs"] == saved["kept_docs"]

    original = reuters_jsonl.read_bytes().splitlines()
    kept = kept_records(tmp_path / "out")
    assert len(kept) == saved["kept_docs"]
    dups = jsonl_rows(tmp_path / "out" / "duplicates.jsonl")
    removed = {d["id"] for d in dups}
    # kept records are the original lines, byte for byte, in input order, minus the removed ones
    assert kept == [line for line in original if json.loads(line)["id"] not in removed]
    assert len(dups) == saved["exact_duplicates"] + saved["near_duplicates"]
    by_id = {json.loads(line)["id"]: json.loads(line)["text"] for line in original}
    for d in dups:
        assert d["kind"] in ("exact", "near")
        if d["kind"] == "exact":
            assert by_id[d["id"]].strip() == by_id[d["duplicate_of"]].strip()
        else:  # verified pairs reach 0.8; a cluster's chain can leave a member a little below with its root
            assert d["similarity"] >= 0.5
    near = [d["similarity"] for d in dups if d["kind"] == "near"]
    assert sum(s >= 0.8 for s in near) >= 0.9 * len(near)
    # the kept representative comes first in input order
    order = {doc_id: i for i, doc_id in enumerate(by_id)}
    assert all(order[d["duplicate_of"]] < order[d["id"]] for d in dups)


def test_output_is_byte_identical_for_any_worker_count(tmp_path, reuters_docs):
    from fixtures.corpora import write_jsonl

    inputs = tmp_path / "in"
    for i in range(3):  # several files and tasks, so that workers really share the work
        write_jsonl(reuters_docs[i::3], inputs / f"part{i}.jsonl")
    dedup([str(inputs)], tmp_path / "w1", DedupOptions(), workers=1)
    dedup([str(inputs)], tmp_path / "w2", DedupOptions(), workers=2)
    one, two = output_bytes(tmp_path / "w1"), output_bytes(tmp_path / "w2")
    assert one.keys() == two.keys()
    assert one == two
    dedup([str(inputs)], tmp_path / "w2", DedupOptions(), workers=2)  # rerun over a finished output
    assert output_bytes(tmp_path / "w2") == one


class RecordingRunner(LocalRunner):
    """A local runner that notes the stages it ran and, per stage, how much each job had to hold:
    the candidate pairs of a verification job's partition, the keys of a resolve job's range."""

    def __init__(self, workers: int):
        super().__init__(workers)
        self.stages: list[str] = []
        self.held: dict[str, list[int]] = {}

    def run(self, fn, jobs, desc, weights=None, unit="job"):
        self.stages.append(desc)
        if desc == "verify":
            self.held[desc] = [partition_pairs(Path(j.candidates_dir), j.partition) for j in jobs]
        elif desc == "resolve":
            self.held[desc] = [j.hi - j.lo for j in jobs]
        return super().run(fn, jobs, desc, weights, unit)


def test_output_is_byte_identical_for_any_memory_budget(tmp_path, reuters_docs):
    """A budget smaller than the run's pair state, so that every stage is cut into many pieces
    (partitions, pair files, verification and resolve jobs, chunks of duplicates rows), gives the
    bytes of the default one, and no job held more than its piece."""
    from fixtures.corpora import write_jsonl

    inputs = write_jsonl(reuters_docs, tmp_path / "in" / "reuters.jsonl")
    dedup([str(inputs)], tmp_path / "default", DedupOptions(), workers=2)
    tiny = DedupBudget(partition_bytes=4096, verify_pairs=7, shingle_bytes=2048, describe_rows=5, range_docs=100)
    with RecordingRunner(2) as runner:
        stats = run_dedup([str(inputs)], tmp_path / "tiny", DedupOptions(), runner, budget=tiny)
    assert stats["near_duplicates"] > 5 and stats["exact_duplicates"] > 5  # so that the chunks are many
    assert output_bytes(tmp_path / "tiny") == output_bytes(tmp_path / "default")
    candidates = sum(runner.held["verify"])
    assert candidates * 8 > 2 * tiny.partition_bytes  # the pair state is larger than the budget's pieces
    assert len(runner.held["verify"]) > 2 and max(runner.held["verify"]) < candidates / 2  # spread over pair files
    assert len(runner.held["resolve"]) == -(-stats["input_docs"] // tiny.range_docs)
    assert max(runner.held["resolve"]) <= tiny.range_docs
    with pytest.raises(UserError, match="--memory-limit .* too small"):
        DedupBudget.for_limit(10 << 20, workers=2)


def test_output_is_byte_identical_whatever_the_chunks_of_bucketing_and_writing(tmp_path, reuters_docs, monkeypatch):
    """Buckets of many chunks per part (each chunk's partitions a run of the part's file), and kept
    records read in blocks smaller than a record (records over several blocks, blocks without a
    newline), give the bytes of the default sizes."""
    import pretrainkit.dataprep.dedup.kept as kept
    import pretrainkit.dataprep.dedup.match as match
    from fixtures.corpora import write_jsonl

    inputs = write_jsonl(reuters_docs, tmp_path / "in" / "reuters.jsonl")
    stats = dedup([str(inputs)], tmp_path / "default", DedupOptions(), workers=1)
    monkeypatch.setattr(kept, "BLOCK_BYTES", 97)  # the shortest record here is longer
    monkeypatch.setattr(match, "BUCKET_CHUNK_DOCS", 7)
    dedup([str(inputs)], tmp_path / "small", DedupOptions(), workers=1)
    assert 0 < stats["kept_docs"] < stats["input_docs"] and stats["near_duplicates"] > 5
    assert output_bytes(tmp_path / "small") == output_bytes(tmp_path / "default")


def _pid(_job: object) -> int:
    return os.getpid()


def test_with_workers_even_a_stage_of_one_job_runs_off_the_main_process():
    """The main process never holds a job's working memory (a match partition of a small corpus)."""
    with LocalRunner(2) as runner:
        assert runner.run(_pid, [None], "one job") != [os.getpid()]
    with LocalRunner(1) as runner:
        assert runner.run(_pid, [None], "one job") == [os.getpid()]


class InterruptingRunner(LocalRunner):
    """Runs half the jobs of stage `stop_at`, then stops the run as Ctrl-C would."""

    def __init__(self, workers: int, stop_at: str):
        super().__init__(workers)
        self.stop_at = stop_at

    def run(self, fn, jobs, desc, weights=None, unit="job"):
        if desc == self.stop_at:
            super().run(fn, jobs[: len(jobs) // 2], desc)
            raise KeyboardInterrupt
        return super().run(fn, jobs, desc, weights, unit)


@pytest.mark.parametrize("stage", ["match exact", "match bands", "verify", "resolve", "write"])
def test_a_run_interrupted_in_a_stage_resumes_to_the_same_bytes(tmp_path, reuters_docs, stage):
    """The pair files, links, labels and resolve pieces an interrupted run left are reused or redone
    so that the rerun's output is the uninterrupted one's."""
    from fixtures.corpora import write_jsonl

    inputs = write_jsonl(
        reuters_docs[:1500] + [(f"{i}-again", t) for i, t in reuters_docs[:300]], tmp_path / "in" / "r.jsonl"
    )
    budget = DedupBudget(partition_bytes=8192, verify_pairs=16, shingle_bytes=4096, describe_rows=8, range_docs=256)
    dedup([str(inputs)], tmp_path / "whole", DedupOptions(), workers=2, budget=budget)
    with pytest.raises(KeyboardInterrupt), InterruptingRunner(2, stage) as runner:
        run_dedup([str(inputs)], tmp_path / "resumed", DedupOptions(), runner, budget=budget)
    work = tmp_path / "resumed" / ".work"
    assert work.is_dir() and not (tmp_path / "resumed" / "stats.json").exists()
    matched = {"match exact": [], "match bands": ["exact"]}.get(stage, ["exact", "bands"])
    unmatched = {"match exact": ["exact"], "match bands": ["bands"]}.get(stage, [])
    assert [p.name.split("-")[1] for p in work.glob("buckets-*")] == unmatched  # a matched round's buckets are deleted
    with RecordingRunner(2) as runner:
        run_dedup([str(inputs)], tmp_path / "resumed", DedupOptions(), runner, budget=budget)
    assert output_bytes(tmp_path / "resumed") == output_bytes(tmp_path / "whole")
    assert not [
        s for s in runner.stages for kind in matched if s in (f"bucket {kind}", f"match {kind}")
    ]  # finished rounds are not redone


def test_a_run_interrupted_while_writing_resumes_with_other_workers_and_limit(tmp_path, reuters_docs):
    """Write jobs delete the scan files that the stages before them read, and another worker count or
    memory limit would cut those stages otherwise: the rerun goes straight on writing, to the same bytes."""
    from fixtures.corpora import write_jsonl

    docs = reuters_docs[:1500] + [(f"{i}-again", t) for i, t in reuters_docs[:300]]
    for k in range(4):  # four read tasks: half of them written before the interruption
        write_jsonl(docs[k::4], tmp_path / "in" / f"r{k}.jsonl")
    inputs = tmp_path / "in"
    budget = DedupBudget(partition_bytes=8192, verify_pairs=16, shingle_bytes=4096, describe_rows=8, range_docs=256)
    dedup([str(inputs)], tmp_path / "whole", DedupOptions(), workers=2, budget=budget)
    with pytest.raises(KeyboardInterrupt), InterruptingRunner(2, "write") as runner:
        run_dedup([str(inputs)], tmp_path / "resumed", DedupOptions(), runner, budget=budget)
    assert len(list((tmp_path / "resumed" / ".work").glob("written-*.json"))) == 2  # their scan files are gone
    with RecordingRunner(1) as runner:
        run_dedup([str(inputs)], tmp_path / "resumed", DedupOptions(), runner)
    assert output_bytes(tmp_path / "resumed") == output_bytes(tmp_path / "whole")
    assert runner.stages == ["plan", "scan", "write"]


def test_a_run_stopped_while_finishing_an_index_part_scans_its_task_again(tmp_path, reuters_docs, monkeypatch):
    """A write job makes the index part of the scan's files, in place: stopped half way (some files
    taken, one cut short), the rerun scans that task again and writes the same bytes."""
    from fixtures.corpora import write_jsonl
    from pretrainkit.dataprep.dedup import index

    docs = reuters_docs[:900] + [(f"{i}-again", t) for i, t in reuters_docs[:200]]
    for k in range(3):
        write_jsonl(docs[k::3], tmp_path / "in" / f"r{k}.jsonl")
    inputs = tmp_path / "in"
    dedup([str(inputs)], tmp_path / "whole", DedupOptions(), workers=1)
    real_keep_in_place, taken = index._keep_in_place, []

    def stopping_at_the_fourth_file(f, ends, kept):
        taken.append(f.name)
        real_keep_in_place(f, ends, kept)
        if len(taken) == 4:
            os.truncate(f.name, os.path.getsize(f.name) // 2)
            raise KeyboardInterrupt

    monkeypatch.setattr(index, "_keep_in_place", stopping_at_the_fourth_file)
    with pytest.raises(KeyboardInterrupt):
        dedup([str(inputs)], tmp_path / "resumed", DedupOptions(), workers=1)
    monkeypatch.undo()
    parts = tmp_path / "resumed" / ".work" / "parts"
    assert not index.part_files_whole(str(parts / "part-00000")) and (parts / "part-00000.json").exists()
    with RecordingRunner(1) as runner:
        run_dedup([str(inputs)], tmp_path / "resumed", DedupOptions(), runner)
    assert runner.stages == ["plan", "scan", "write"]
    assert output_bytes(tmp_path / "resumed") == output_bytes(tmp_path / "whole")


def test_against_removes_documents_already_in_the_old_corpus(tmp_path, reuters_docs):
    from fixtures.corpora import write_jsonl

    old_docs = reuters_docs[:1500]
    old = write_jsonl(old_docs, tmp_path / "old.jsonl")
    dedup([str(old)], tmp_path / "old_out", DedupOptions(), workers=1)
    old_removed = {d["id"] for d in jsonl_rows(tmp_path / "old_out" / "duplicates.jsonl")}

    # new corpus: 40 copies of old documents (some lightly edited), and fresh documents
    copies = [(f"copy-{i}", text) for i, (_, text) in enumerate(old_docs[100:140])]
    edited = [
        (f"edit-{i}", text + " Reuters") for i, (_, text) in enumerate(old_docs[200:240]) if len(text.split()) > 150
    ]
    fresh = reuters_docs[1500:2500]
    new = write_jsonl(copies + edited + fresh, tmp_path / "new.jsonl")
    dedup([str(new)], tmp_path / "new_out", DedupOptions(against=str(tmp_path / "old_out" / "index")), workers=2)

    dups = {d["id"]: d for d in jsonl_rows(tmp_path / "new_out" / "duplicates.jsonl")}
    old_ids = {doc_id for doc_id, _ in old_docs}
    for i in range(40):
        d = dups[f"copy-{i}"]
        assert d["duplicate_of"] in old_ids and d["duplicate_of"] not in old_removed
    for doc_id, _ in edited:
        assert dups[doc_id]["duplicate_of"] in old_ids
    kept_ids = {json.loads(r)["id"] for r in kept_records(tmp_path / "new_out")}
    assert not kept_ids & old_ids  # old documents are never written again
    assert not any(doc_id.startswith(("copy-", "edit-")) for doc_id in kept_ids)
    stats = json.loads((tmp_path / "new_out" / "stats.json").read_text())
    assert stats["input_docs"] == len(copies) + len(edited) + len(fresh)
    assert (
        stats["input_docs"]
        == stats["kept_docs"] + stats["exact_duplicates"] + stats["near_duplicates"] + stats["rejected"]
    )


def test_against_a_mismatched_or_unfinished_index_is_a_clear_error(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text('{"text": "one two three four five six"}\n')
    dedup([str(src)], tmp_path / "a", DedupOptions(), workers=1)
    with pytest.raises(UserError, match="index was built with --ngram 5, this run uses --ngram 3"):
        dedup([str(src)], tmp_path / "b", DedupOptions(ngram=3, against=str(tmp_path / "a" / "index")), workers=1)
    with pytest.raises(UserError, match="not a finished dedup index"):
        dedup([str(src)], tmp_path / "b", DedupOptions(against=str(tmp_path)), workers=1)


def test_short_documents_are_compared_whole_never_merged_blindly(tmp_path):
    texts = [
        "Hello, world!",  # 2 words: one shingle of both words
        "hello world",  # same words after normalization -> near duplicate of the first
        "Goodbye world",  # different short text: kept
        "!!!",  # no words at all: kept, never compared
        "???",  # no words either: kept (not merged with "!!!")
        "Héllo, WÖRLD",  # accents and case removed -> near duplicate of the first
        "one two three four five six seven",
    ]
    src = tmp_path / "short.jsonl"
    urls = {i: f"https://short.example/é?{i}" for i in range(len(texts)) if i != 5}  # s5's record has none
    src.write_text(
        "".join(
            json.dumps({"id": f"s{i}", "text": t} | ({"url": urls[i]} if i in urls else {}), ensure_ascii=False) + "\n"
            for i, t in enumerate(texts)
        )
    )
    dedup([str(src)], tmp_path / "out", DedupOptions(), workers=1)
    dups = {d["id"]: d for d in jsonl_rows(tmp_path / "out" / "duplicates.jsonl")}
    assert set(dups) == {"s1", "s5"}
    assert "url" not in dups["s5"] and dups["s5"]["text_head"] == "Héllo, WÖRLD"
    assert dups["s1"] == {
        "id": "s1",
        "source": "short.jsonl",
        "line": 2,
        "duplicate_of": "s0",
        "duplicate_of_source": "short.jsonl",
        "duplicate_of_line": 1,
        "kind": "near",
        "similarity": 1.0,
        "matched": "s0",
        "matched_source": "short.jsonl",
        "matched_line": 1,
        "matched_similarity": 1.0,
        "url": "https://short.example/é?1",
        "text_head": "hello world",
    }
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert stats["docs_without_words"] == 2 and stats["kept_docs"] == 5


def test_no_near_keeps_near_duplicates(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in ["Hello, world!", "hello world", "Hello, world!"]))
    dedup([str(src)], tmp_path / "out", DedupOptions(near=False), workers=1)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    assert (stats["exact_duplicates"], stats["near_duplicates"], stats["kept_docs"]) == (1, 0, 2)


def test_bad_records_are_accounted_and_the_run_goes_on(tmp_path):
    good = "".join(json.dumps({"text": f"document {i} " + "word " * i}) + "\n" for i in range(1, 300)).encode()
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(good + b"{broken\n" + b'{"text": "\xff"}\n' + b'{"text": ""}\n')
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(gzip.compress(good)[:-200])  # truncated
    dedup([str(tmp_path / "in")], tmp_path / "out", DedupOptions(), workers=2)
    stats = json.loads((tmp_path / "out" / "stats.json").read_text())
    rejected = jsonl_rows(tmp_path / "out" / "rejected.jsonl")
    assert len(rejected) == stats["rejected"] >= 4
    assert {r["source"] for r in rejected} == {"a.jsonl", "b.jsonl.gz"}
    assert (
        stats["input_docs"]
        == stats["kept_docs"] + stats["exact_duplicates"] + stats["near_duplicates"] + stats["rejected"]
    )


def run_cli(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pretrainkit.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_cli_summary_and_one_line_errors(tmp_path):
    src = tmp_path / "a.jsonl"
    src.write_text("".join(json.dumps({"text": f"text number {i} is here"}) + "\n" for i in range(50)))
    ok = run_cli("dedup", str(src), "-o", str(tmp_path / "out"), "--workers", "1")
    assert ok.returncode == 0, ok.stderr
    assert "input docs" in ok.stdout and "MB/s" in ok.stdout
    for args, message in [
        (["dedup", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "o2")], "missing.jsonl: no such file"),
        (["dedup", str(src), "-o", str(tmp_path / "o4"), "--against", str(tmp_path)], "not a finished dedup index"),
        (["dedup", str(src), "-o", str(tmp_path)], "input lies inside the output directory"),
    ]:
        r = run_cli(*args)
        assert r.returncode == 2
        *notes, error = r.stderr.strip().splitlines()  # notes: files a directory scan left out
        assert all(n.startswith("ptk: note: ") for n in notes)
        assert error.startswith("ptk: error: ") and message in error and "Traceback" not in r.stderr
    r = run_cli("dedup", str(src), "-o", str(tmp_path / "o3"), "--threshold", "1.5")  # refused when parsed
    assert r.returncode == 2 and not (tmp_path / "o3").exists()
    assert r.stderr == "ptk dedup: error: argument --threshold: must be in (0, 1], got '1.5' (see ptk dedup --help)\n"


def test_same_file_names_under_two_inputs_get_distinct_ids_and_rows_locate_the_raw_line(tmp_path):
    """`ptk dedup x/data.jsonl y/data.jsonl` once named both first records `data.jsonl:1` (issue 13 item 1)."""
    for sub, texts in (
        ("x", ["alpha beta gamma delta epsilon", "unique words here for x"]),
        ("y", ["something else entirely, in y", "alpha beta gamma delta epsilon"]),
    ):
        (tmp_path / sub).mkdir()
        (tmp_path / sub / "data.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    dedup(
        [str(tmp_path / "x" / "data.jsonl"), str(tmp_path / "y" / "data.jsonl")],
        tmp_path / "out",
        DedupOptions(),
        workers=1,
    )
    (row,) = jsonl_rows(tmp_path / "out" / "duplicates.jsonl")
    assert row == {
        "id": "y/data.jsonl:2",
        "source": "y/data.jsonl",
        "line": 2,
        "duplicate_of": "x/data.jsonl:1",
        "duplicate_of_source": "x/data.jsonl",
        "duplicate_of_line": 1,
        "kind": "exact",
        "similarity": 1.0,
        "matched": "x/data.jsonl:1",
        "matched_source": "x/data.jsonl",
        "matched_line": 1,
        "matched_similarity": 1.0,
        "text_head": "alpha beta gamma delta epsilon",
    }
    kept_ids = [json.loads(r)["id"] for r in kept_records(tmp_path / "out")]
    assert kept_ids == ["x/data.jsonl:1", "x/data.jsonl:2", "y/data.jsonl:1"]


def test_the_same_corpus_given_twice_keeps_each_document_once_and_rows_name_the_second_files_lines(
    tmp_path, reuters_docs
):
    """Repeated ids no longer stop a run (issue 22 part 8): the second copy's records are exact duplicates
    of the first's, each row naming the removed record by its file and line."""
    from fixtures.corpora import write_jsonl

    once = write_jsonl(reuters_docs[:600], tmp_path / "x" / "a.jsonl")
    (tmp_path / "y").mkdir()
    shutil.copy(once, tmp_path / "y" / "a.jsonl")
    dedup([str(once)], tmp_path / "once", DedupOptions(), workers=1)
    stats = dedup([str(once), str(tmp_path / "y" / "a.jsonl")], tmp_path / "twice", DedupOptions(), workers=2)
    assert kept_records(tmp_path / "twice") == kept_records(tmp_path / "once")
    assert stats["kept_docs"] == json.loads((tmp_path / "once" / "stats.json").read_text())["kept_docs"]
    second = [r for r in jsonl_rows(tmp_path / "twice" / "duplicates.jsonl") if r["source"] == "y/a.jsonl"]
    assert sorted(r["line"] for r in second) == list(range(1, 601))
    ids = {line: doc_id for line, (doc_id, _) in enumerate(reuters_docs[:600], 1)}
    assert all(r["id"] == ids[r["line"]] for r in second)
    assert all(
        r["kind"] == "exact" and r["duplicate_of_source"] == "x/a.jsonl" and r["similarity"] == 1.0 for r in second
    )
    # its twin in x, unless that one repeats an earlier text of x: then that text's first record
    repeats = {r["line"] for r in jsonl_rows(tmp_path / "once" / "duplicates.jsonl") if r["kind"] == "exact"}
    assert {r["line"] for r in second if r["duplicate_of_line"] == r["line"]} == set(range(1, 601)) - repeats


def test_a_repeated_id_is_no_identity_records_are_deduplicated_by_content_only(tmp_path):
    """Records are identified by file and line: one id on three records, two of them of the same text,
    keeps the two texts and removes the repeat as an exact duplicate; an id shared with nothing else
    in common changes nothing."""
    (tmp_path / "a.jsonl").write_text(
        '{"id": "k", "text": "first text of the record"}\n{"id": "k", "text": "other words entirely here"}\n'
        '{"id": "m", "text": "fine"}\n{"id": "k", "text": "first text of the record"}\n'
    )
    stats = dedup([str(tmp_path / "a.jsonl")], tmp_path / "out", DedupOptions(), workers=2)
    assert [json.loads(r)["text"] for r in kept_records(tmp_path / "out")] == [
        "first text of the record",
        "other words entirely here",
        "fine",
    ]
    (row,) = jsonl_rows(tmp_path / "out" / "duplicates.jsonl")
    assert (row["id"], row["line"], row["duplicate_of"], row["duplicate_of_line"], row["kind"]) == (
        "k",
        4,
        "k",
        1,
        "exact",
    )
    assert (stats["exact_duplicates"], stats["near_duplicates"]) == (1, 0)


def test_index_keeps_only_what_against_needs_and_costs_less_than_the_input(tmp_path, reuters_docs):
    from fixtures.corpora import write_jsonl

    copies = [(f"copy-{doc_id}", text) for doc_id, text in reuters_docs[:50]]
    corpus = write_jsonl(reuters_docs + copies, tmp_path / "in" / "reuters.jsonl")
    stats = dedup([str(corpus)], tmp_path / "out", DedupOptions(), workers=2)
    index_dir = tmp_path / "out" / "index"
    idx = DedupIndex.open(index_dir)
    assert idx.docs == stats["kept_docs"] < stats["input_docs"]
    assert {p.suffix for p in index_dir.iterdir()} == {
        ".exact",
        ".counts",
        ".shingles",
        ".ids",
        ".idpos",
        ".lines",
        ".json",
    }
    assert sum(p.stat().st_size for p in index_dir.iterdir()) < corpus.stat().st_size
    kept_ids = [json.loads(r)["id"] for r in kept_records(tmp_path / "out")]
    assert [i for p in idx.parts for i in p.ids_of(list(range(p.docs)))] == kept_ids
    again = dedup([str(corpus)], tmp_path / "again", DedupOptions(against=str(index_dir)), workers=2)
    assert again["kept_docs"] == 0  # every document is in the old corpus, or a duplicate of one


@pytest.mark.parametrize(
    "old_options, new_options",
    [
        (DedupOptions(), DedupOptions(threshold=0.5, num_perm=64)),
        (DedupOptions(near=False), DedupOptions(threshold=0.7)),
    ],
)
def test_against_an_index_keeps_what_one_run_over_both_corpora_keeps(tmp_path, reuters_docs, old_options, new_options):
    """The index keeps shingle sets, no signatures: a run against it, with any --num-perm and
    --threshold, hashes them again and finds the candidates that one run over the old corpus's kept
    records and the new corpus would: the same new documents are kept."""
    from fixtures.corpora import write_jsonl

    old_docs = reuters_docs[:700]
    rng = np.random.default_rng(3)
    edited = []
    for i, (_, text) in enumerate(old_docs[:300:3]):
        words = text.split()
        for k in rng.choice(len(words), size=max(1, len(words) // int(rng.choice([4, 8, 20]))), replace=False):
            words[k] = f"w{k}"
        edited.append((f"edit-{i}", " ".join(words)))
    new_docs = edited + [(f"copy-{i}", t) for i, (_, t) in enumerate(old_docs[400:420])] + reuters_docs[700:1000]
    dedup([str(write_jsonl(old_docs, tmp_path / "old" / "a.jsonl"))], tmp_path / "old_out", old_options, workers=2)
    new = write_jsonl(new_docs, tmp_path / "new" / "b.jsonl")
    against = dedup(
        [str(new)], tmp_path / "against", replace(new_options, against=str(tmp_path / "old_out" / "index")), workers=2
    )

    (tmp_path / "joint").mkdir()
    (tmp_path / "joint" / "a.jsonl").write_bytes(b"".join(r + b"\n" for r in kept_records(tmp_path / "old_out")))
    (tmp_path / "joint" / "b.jsonl").write_bytes(new.read_bytes())
    dedup([str(tmp_path / "joint")], tmp_path / "joint_out", new_options, workers=2)
    new_ids = {doc_id for doc_id, _ in new_docs}
    kept_new = [json.loads(r)["id"] for r in kept_records(tmp_path / "joint_out") if json.loads(r)["id"] in new_ids]
    assert [json.loads(r)["id"] for r in kept_records(tmp_path / "against")] == kept_new
    assert 0 < against["near_duplicates"] and against["kept_docs"] < len(new_docs) - 20


def test_kept_records_come_from_the_input_or_the_record_file_in_input_order(tmp_path, reuters_docs, monkeypatch):
    """Verbatim records are copied from the input file and the others (generated ids, CRLF, the BOM
    line, the last line without a line feed, a compressed file) from the scan's record file, in
    runs that alternate, around rejected lines: the output is every kept record as the reader gives
    it, in input order, also when blocks are shorter than a line."""
    import pretrainkit.dataprep.dedup.kept as kept
    from pretrainkit.dataprep.readers import Document, discover_inputs, plan_read_tasks, read_task

    lines = [b"\xef\xbb\xbf" + json.dumps({"id": "bom", "text": reuters_docs[0][1]}).encode() + b"\n"]
    for i, (doc_id, text) in enumerate(reuters_docs[1:400]):
        kind = i % 7
        record = {"text": text} if kind == 1 else {"id": doc_id, "text": text}
        line = json.dumps(record, ensure_ascii=kind != 2).encode()
        lines.append(line + (b"\r\n" if kind == 3 else b"\n"))
        if kind == 4:
            lines.append(b"{not json\n" if i % 2 else b"\n")
        if kind == 5:  # an exact copy under another id, to be removed
            lines.append(json.dumps({"id": f"copy-{doc_id}", "text": text}).encode() + b"\n")
    lines.append(json.dumps({"id": "last", "text": reuters_docs[-1][1]}).encode())
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_bytes(b"".join(lines))
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(
        gzip.compress(b"".join(lines[5:40]).replace(b'"id": "', b'"id": "gz-'))
    )

    stats = dedup([str(tmp_path / "in")], tmp_path / "default", DedupOptions(), workers=1)
    removed = {row["id"] for row in jsonl_rows(tmp_path / "default" / "duplicates.jsonl")}
    docs = [
        d
        for t in plan_read_tasks(discover_inputs([str(tmp_path / "in")]))
        for d in read_task(t)
        if isinstance(d, Document)
    ]
    assert sum(d.verbatim for d in docs) > 100 and sum(not d.verbatim for d in docs) > 100 and stats["rejected"] > 10
    expected = b"".join(d.record + b"\n" for d in docs if d.id not in removed)
    written = b"".join(
        zstandard.ZstdDecompressor().decompress(p.read_bytes(), max_output_size=1 << 30)
        for p in sorted((tmp_path / "default").glob("part-*.jsonl.zst"))
    )
    assert written == expected and stats["exact_duplicates"] >= 50
    monkeypatch.setattr(kept, "BLOCK_BYTES", 13)
    dedup([str(tmp_path / "in")], tmp_path / "small", DedupOptions(), workers=1)
    assert output_bytes(tmp_path / "small") == output_bytes(tmp_path / "default")
