"""`ptk dedup --paragraphs` end to end: the rule on crafted documents (first occurrence kept, later
ones removed, blank lines and surrounding whitespace, a repeat inside one document, a document left
too short), the same output as a plain-Python implementation of the rule on real articles, every
document accounted for, the same bytes for any workers and partition count and after a run stopped
at any job, and the one-line errors."""

from __future__ import annotations

import gzip
import hashlib
import json
import random
from pathlib import Path

import pytest
import zstandard

from bench.paragraphs import baseline_rule
from fixtures.corpora import wikitext_documents, write_jsonl
from pretrainkit.cli import main
from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.paragraphs import scan, write
from pretrainkit.dataprep.paragraphs.lines import paragraphs
from pretrainkit.dataprep.paragraphs.pipeline import ParagraphOptions, partitions_for, run_paragraphs


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def kept_records(out: Path) -> list[dict]:
    records = []
    for part in sorted(out.glob("part-*.jsonl.zst")):
        records += [
            json.loads(line)
            for line in zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes()).decode().splitlines()
        ]
    return records


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def small_budget(partition_bytes: int) -> DedupBudget:
    """A budget whose partitions hold `partition_bytes` of entries: many partitions for a small corpus."""
    return DedupBudget(partition_bytes, 1 << 10, 1 << 20, 1 << 10, 1 << 12)


def run(inputs: list[Path], out: Path, workers: int = 1, budget: DedupBudget | None = None, **options) -> dict:
    with LocalRunner(workers) as runner:
        return run_paragraphs([str(p) for p in inputs], out, ParagraphOptions(**options), runner, budget)


def test_the_rule_on_crafted_documents(tmp_path: Path):
    first = [
        {"id": "a1", "text": "Home\nStory one.\n\nShare this\nStory one.", "url": "https://a.example/1"},
        {"id": "a2", "text": "  Home \t\nStory two.\n\n\n\u00a0Share this\u3000"},
    ]
    second = [
        {"id": "b1", "text": "Home\r\nStory one."},  # every line seen before: nothing left
        {"id": "b2", "text": "Story two.\nStory two.\nNew story."},  # a later document's repeats all go
        {"id": "b3", "text": "Share this\nabc"},  # three characters left
        {"id": "b4", "text": "tiny"},  # short, but it lost nothing: not this command's to remove
    ]
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in first))
    (tmp_path / "in" / "b.jsonl.gz").write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in second).encode()))
    stats = run([tmp_path / "in"], tmp_path / "out", min_length=5)
    kept = kept_records(tmp_path / "out")
    assert [r["id"] for r in kept] == ["a1", "a2", "b2", "b4"]
    # first occurrences kept, with the repeat inside a1; blank lines never removed
    assert kept[0] == first[0]
    assert kept[1]["text"] == "Story two.\n\n"  # "Home" and "Share this" after stripping: seen in a1
    assert kept[2]["text"] == "New story."
    assert kept[3]["text"] == "tiny"
    # a removed row shows the text as it came in, not what the repeats left of it
    reason = {"source": "b.jsonl.gz", "filter": "paragraphs.min_length", "threshold": 5}
    assert rows(tmp_path / "out" / "removed.jsonl") == [
        {"id": "b1", "line": 1, **reason, "value": 0, "text_head": "Home\r\nStory one."},
        {"id": "b3", "line": 3, **reason, "value": 3, "text_head": "Share this\nabc"},
    ]
    assert stats["input_docs"] == 6 and stats["kept_docs"] == 4 and stats["removed_docs"] == 2
    assert stats["paragraphs"] == 15 and stats["paragraphs_removed"] == 7 and stats["docs_changed"] == 4
    assert json.loads((tmp_path / "out" / "stats.json").read_text())["removed_by_reason"] == {
        "paragraphs.min_length": {"docs": 2, "bytes": len("Home\r\nStory one.") + len("Share this\nabc")}
    }


def test_lines_are_stripped_as_str_strip_strips_them():
    spaces = [chr(c) for c in range(0x110000) if chr(c).isspace() and c != 10]
    alphabet = [*spaces, *"ab\u00e9\u4e2d\U0001f600\u200b\u00c2\ud800", "\n", "\n"]
    rng = random.Random(0)
    texts = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 30))) for _ in range(3000)]
    expected = [
        (
            int.from_bytes(hashlib.blake2b(s.encode("utf-8", "surrogatepass"), digest_size=16).digest()[:8], "little"),
            d,
            i,
        )
        for d, text in enumerate(texts)
        for i, line in enumerate(text.split("\n"))
        if (s := line.strip())
    ]
    found = paragraphs(texts)
    assert list(zip(found.hashes.tolist(), found.docs.tolist(), found.lines.tolist())) == expected
    assert found.text_bytes.tolist() == [len(t.encode("utf-8", "surrogatepass")) for t in texts]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, reuters_docs) -> tuple[Path, list[str]]:
    """Reuters articles (their datelines and sign-offs repeat) and Wikitext-2 articles in three
    files, part of the Reuters ones twice, and two unreadable records; returns the folder and the
    texts in corpus order."""
    root = tmp_path_factory.mktemp("paragraph-corpus") / "in"
    news = reuters_docs[:1200]
    wiki = wikitext_documents("valid")[:300]
    files = [("a.jsonl", news[:800]), ("b.jsonl", wiki + news[600:1000]), ("c.jsonl", news[900:])]
    for name, docs in files:
        write_jsonl(docs, root / name)
    with open(root / "b.jsonl", "a") as f:
        f.write('{"id": "half", "text": \n{"id": "empty", "text": "  "}\n')
    return root, [text for _, docs in files for _, text in docs]


def test_the_same_as_the_rule_in_plain_python_on_real_articles(tmp_path: Path, corpus):
    folder, texts = corpus
    stats = run([folder], tmp_path / "out", workers=2)
    rule = baseline_rule()
    expected = [rule(text) for text in texts]
    assert [r["text"] for r in kept_records(tmp_path / "out")] == [t for t in expected if t is not None]
    assert stats["removed_docs"] == expected.count(None) > 0
    assert stats["paragraphs_removed"] > 1000 and stats["rejected"] == 2
    assert stats["input_docs"] == len(texts) + 2 == stats["kept_docs"] + stats["removed_docs"] + stats["rejected"]
    removed = stats["removed_text_bytes"]
    assert stats["input_text_bytes"] == stats["output_text_bytes"] + removed["paragraphs"] + removed["documents"]
    assert [r["reason"] for r in rows(tmp_path / "out" / "rejected.jsonl")] == [
        "malformed JSON: Expecting value at column 24",
        "empty text",
    ]


def test_byte_identical_for_any_workers_partitions_chunks_and_windows(tmp_path: Path, corpus, monkeypatch):
    folder, _ = corpus
    stats = run([folder], tmp_path / "one", workers=1)
    assert partitions_for(stats["paragraphs"], 2, small_budget(4096)) > 100
    run([folder], tmp_path / "many", workers=2, budget=small_budget(4096))
    assert snapshot(tmp_path / "many") == snapshot(tmp_path / "one")
    # small batches and chunks (most copies go on to the resolve stage instead of being found in
    # their chunk), and windows of 7 documents in the write stage; the jobs in this process, which
    # these settings reach (workers a forkserver starts, as from a process with threads, import the modules afresh)
    monkeypatch.setattr(scan, "BATCH_BYTES", 2000)
    monkeypatch.setattr(scan, "CHUNK_ENTRIES", 100)
    monkeypatch.setattr(write, "WINDOW_DOCS", 7)
    run([folder], tmp_path / "chunks", workers=1)
    assert snapshot(tmp_path / "chunks") == snapshot(tmp_path / "one")


class Stopped(Exception):
    pass


class StopAfter(LocalRunner):
    """A one-process runner that stops the run (as a kill would) once `jobs` jobs have finished."""

    def __init__(self, jobs: int):
        super().__init__(1)
        self.left = jobs

    def run(self, fn, jobs, desc, weights=None, unit="job"):
        results = []
        for job in jobs:
            if self.left == 0:
                raise Stopped(desc)
            results.append(fn(job))
            self.left -= 1
        return results


def test_a_run_stopped_after_any_job_resumes_to_the_same_bytes(tmp_path: Path, corpus):
    folder, _ = corpus
    reference = run([folder], tmp_path / "reference")
    budget = small_budget(1 << 16)
    partitions = partitions_for(reference["paragraphs"], 1, budget)
    assert partitions > 4
    stages = set()
    # 3 scan jobs, then the partitions, then 3 write jobs: stopped within each stage and at its end
    for jobs in (1, 3, 3 + partitions // 2, 3 + partitions, 4 + partitions):
        out = tmp_path / f"stopped-{jobs}"
        with pytest.raises(Stopped) as stopped, StopAfter(jobs) as runner:
            run_paragraphs([str(folder)], out, ParagraphOptions(), runner, budget)
        stages.add(stopped.value.args[0])
        assert not (out / "stats.json").exists()
        run([folder], out, workers=2)  # another worker count and budget: the finished jobs still count
        assert snapshot(out) == snapshot(tmp_path / "reference"), jobs
    assert stages == {"scan paragraphs", "resolve paragraphs", "write paragraphs"}


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--threshold", "0.5"], "ptk: error: --threshold: document dedup's, not used with --paragraphs"),
        (["--no-near", "--ngram", "3"], "ptk: error: --ngram, --no-near: document dedup's, not used with --paragraphs"),
    ],
)
def test_bad_options_are_one_line(tmp_path: Path, capsys, reuters_jsonl, extra, message):
    assert main(["dedup", "--paragraphs", str(reuters_jsonl), "-o", str(tmp_path / "out"), *extra]) == 2
    assert capsys.readouterr().err.strip() == message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["-1", "99999999999999999999"])
def test_a_min_length_out_of_range_is_one_line_when_parsed(tmp_path: Path, capsys, reuters_jsonl, value):
    """99999999999999999999 once ran the whole dedup, then raised a TypeError (issue 49 item 11)."""
    with pytest.raises(SystemExit) as e:
        main(["dedup", "--paragraphs", str(reuters_jsonl), "-o", str(tmp_path / "out"), "--min-length", value])
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        f"ptk dedup: error: argument --min-length: must be in [0, 1000000000], got '{value}' (see ptk dedup --help)\n"
    )
    assert not (tmp_path / "out").exists()


def test_min_length_without_paragraphs_is_one_line(tmp_path: Path, capsys, reuters_jsonl):
    assert main(["dedup", str(reuters_jsonl), "-o", str(tmp_path / "out"), "--min-length", "10"]) == 2
    assert capsys.readouterr().err.strip() == "ptk: error: --min-length needs --paragraphs (it is paragraph dedup's)"


def test_the_command_prints_its_summary_and_refuses_a_document_dedup_folder(tmp_path: Path, capsys, reuters_jsonl):
    assert main(["dedup", "--paragraphs", str(reuters_jsonl), "-o", str(tmp_path / "out"), "--workers", "2"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"dedup --paragraphs -> {tmp_path / 'out'}\n  input docs")
    assert "paragraphs removed" in out
    assert main(["dedup", str(reuters_jsonl), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith(
        "holds a ptk dedup --paragraphs output; ptk dedup writes only into an empty folder or a ptk dedup output"
    )


def test_the_text_field_named_is_the_one_rewritten(tmp_path: Path):
    records = [
        {"doc": "x", "body": "Menu\nFirst story.", "text": "Menu"},
        {"doc": "y", "body": "Menu\nSecond story.", "text": "Menu"},
    ]
    (tmp_path / "a.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    stats = run([tmp_path / "a.jsonl"], tmp_path / "out", text_field="body", id_field="doc")
    assert kept_records(tmp_path / "out") == [records[0], {"doc": "y", "body": "Second story.", "text": "Menu"}]
    assert stats["options"] == {"min_length": 1, "text_field": "body", "id_field": "doc"}
