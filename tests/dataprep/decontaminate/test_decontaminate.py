"""`ptk decontaminate` on real text: evaluation passages (Wikitext-2's test split) copied into a
corpus (Reuters articles) lower-cased and stripped of punctuation are found, 12 shared words of 13
are not; removal and --report-only; the evaluation formats; short items; the one-line errors;
the same bytes for any --workers."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from fixtures.corpora import DATA, need_data, wikitext_documents, write_jsonl
from pretrainkit.cli import main
from pretrainkit.dataprep.decontaminate.evalindex import EvalIndex, EvalOptions, build_index
from pretrainkit.dataprep.decontaminate.ngrams import first_hits, gram_hashes, hash_filter, normalized_words


def stripped(text: str) -> str:
    """A copy as a careless scrape makes it: lower-cased, punctuation gone, whitespace collapsed."""
    return " ".join(re.sub(r"[^\w\s]|_", "", text.lower()).split())


@pytest.fixture(scope="module")
def passages() -> list[str]:
    """Evaluation items: Wikitext-2 test paragraphs of 40 words or more."""
    need_data(DATA / "wikitext2")
    return [t for _, t in wikitext_documents("test") if len(t.split()) >= 40][:30]


@pytest.fixture(scope="module")
def setup(tmp_path_factory, reuters_docs, passages):
    """A corpus of 600 Reuters articles in 3 files, where article 10 holds eval item 3's words
    40-60 lower-cased and unpunctuated, article 20 holds 12 words of item 4 (one short of 13)
    and article 30 holds item 5 whole, as it is."""
    root = tmp_path_factory.mktemp("decon")
    docs = [list(d) for d in reuters_docs[:600]]
    item3, item4, item5 = (passages[i].split() for i in (3, 4, 5))
    docs[10][1] += " " + stripped(" ".join(item3[20:40]))
    docs[20][1] += " " + " ".join(item4[:12]) + " and more besides"
    docs[30][1] = docs[30][1] + "\n\n" + passages[5]
    for i in range(3):
        write_jsonl([tuple(d) for d in docs[i * 200 : (i + 1) * 200]], root / "corpus" / f"part{i}.jsonl")
    evals = root / "wikitext-test.jsonl"
    evals.write_text("".join(json.dumps({"id": f"wt-{i}", "text": t}) + "\n" for i, t in enumerate(passages)))
    return root, evals, docs


def run(*argv: str) -> int:
    return main(["decontaminate", *argv])


def kept_records(out: Path) -> list[bytes]:
    lines = []
    for part in sorted(out.glob("part-*.jsonl.zst")):
        lines += zstandard.ZstdDecompressor().stream_reader(part.read_bytes()).read().splitlines()
    return lines


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


def test_copies_are_found_and_removed_twelve_shared_words_are_not(setup, tmp_path, capsys):
    root, evals, docs = setup
    out = tmp_path / "out"
    assert run(str(root / "corpus"), "--eval", str(evals), "-o", str(out), "--workers", "2") == 0
    rows = [json.loads(line) for line in (out / "contaminated.jsonl").read_text().splitlines()]
    assert [(r["id"], r["source"], r["line"], r["eval_id"]) for r in rows] == [
        (docs[10][0], "part0.jsonl", 11, "wt-3"),
        (docs[30][0], "part0.jsonl", 31, "wt-5"),
    ]
    assert rows[0]["eval_file"] == str(evals)
    # each row shows its document's first 200 characters (these records have no url)
    assert [r["text_head"] for r in rows] == [docs[10][1][:200], docs[30][1][:200]]
    assert not any("url" in r for r in rows)
    copy = normalized_words(stripped(" ".join(passages_of(evals)[3].split()[20:40])))
    assert rows[0]["ngram"].split() == [w.decode() for w in copy[:13]]
    assert rows[1]["ngram"].split() == [w.decode() for w in normalized_words(passages_of(evals)[5])[:13]]
    # every other record kept byte for byte, in input order, in the same part layout
    inputs = [(root / "corpus" / f"part{i}.jsonl").read_bytes().splitlines() for i in range(3)]
    assert kept_records(out) == [
        line for i, lines in enumerate(inputs) for j, line in enumerate(lines) if (i, j) not in ((0, 10), (0, 30))
    ]
    assert len(list(out.glob("part-*.jsonl.zst"))) == 3
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["input_docs"], stats["kept_docs"], stats["contaminated_docs"], stats["rejected"]) == (600, 598, 2, 0)
    assert stats["eval_files"][str(evals)]["contaminated_docs"] == 2
    assert stats["eval_files"][str(evals)]["items"] == 30
    assert re.search(r"\n  contaminated \(removed\) +2\n", capsys.readouterr().out)


def passages_of(evals: Path) -> list[str]:
    return [json.loads(line)["text"] for line in evals.read_text().splitlines()]


def test_report_only_lists_the_same_rows_and_writes_no_records(setup, tmp_path, capsys):
    root, evals, _ = setup
    removed, listed = tmp_path / "removed", tmp_path / "listed"
    assert run(str(root / "corpus"), "--eval", str(evals), "-o", str(removed), "--workers", "1") == 0
    assert run(str(root / "corpus"), "--eval", str(evals), "-o", str(listed), "--report-only", "--workers", "2") == 0
    assert (listed / "contaminated.jsonl").read_bytes() == (removed / "contaminated.jsonl").read_bytes()
    assert not list(listed.glob("part-*"))
    stats = json.loads((listed / "stats.json").read_text())
    assert (stats["kept_docs"], stats["contaminated_docs"], stats["options"]["report_only"]) == (598, 2, True)
    # A report is no corpus: another command given the folder (or one holding it) says so and reads nothing.
    deduped = tmp_path.with_name(f"{tmp_path.name}-deduped")  # in no folder given (an output there is refused)
    for given in (listed, tmp_path):
        assert main(["dedup", str(given), "-o", str(deduped)]) == 2
        line = capsys.readouterr().err.strip().splitlines()[-1]
        assert line == (
            f"ptk: error: {listed}: a `ptk decontaminate --report-only` output: it lists the contaminated documents "
            f"({listed / 'contaminated.jsonl'}) and keeps none; give the corpus it read instead"
        )
        assert not deduped.exists()


def test_the_same_bytes_for_one_and_two_workers(setup, tmp_path):
    root, evals, _ = setup
    for workers in ("1", "2"):
        assert run(str(root / "corpus"), "--eval", str(evals), "-o", str(tmp_path / workers), "--workers", workers) == 0
    assert snapshot(tmp_path / "1") == snapshot(tmp_path / "2")


def test_items_shorter_than_the_ngram_are_counted_and_match_only_at_a_smaller_ngram(setup, tmp_path, reuters_docs):
    root, _, _ = setup
    words = reuters_docs[50][1].split()[:8]  # an article's first 8 words: an item too short for 13-grams
    evals = tmp_path / "short.txt"
    passage = " ".join(passages_of(setup[1])[0].split())  # on one line
    evals.write_text("\n".join([" ".join(words), "", passage]) + "\n")  # a blank line is no item
    assert run(str(root / "corpus"), "--eval", str(evals), "-o", str(tmp_path / "n13")) == 0
    stats = json.loads((tmp_path / "n13" / "stats.json").read_text())
    assert stats["eval_files"][str(evals)] == {
        "items": 2,
        "items_shorter_than_ngram": 1,
        "ngrams": len(gram_hashes(passage, 13)),
        "contaminated_docs": 0,
    }
    assert run(str(root / "corpus"), "--eval", str(evals), "-o", str(tmp_path / "n8"), "--ngram", "8") == 0
    rows = [json.loads(line) for line in (tmp_path / "n8" / "contaminated.jsonl").read_text().splitlines()]
    assert reuters_docs[50][0] in {r["id"] for r in rows}
    assert {r["eval_id"] for r in rows} >= {f"{evals}:1"}


def test_question_and_choices_parquet_and_zstd(setup, tmp_path):
    root, evals, docs = setup
    passages = passages_of(evals)
    # an ARC-like item: the copy in article 10 lies in its choices' texts, reached by a dotted field
    arc = {
        "id": "arc-1",
        "question": "Which of these is true?",
        "choices": {"text": ["no", passages[3]], "label": ["A", "B"]},
    }
    arc_file = tmp_path / "arc.jsonl.zst"
    arc_file.write_bytes(zstandard.ZstdCompressor().compress((json.dumps(arc) + "\n").encode()))
    table = pa.table({"question": [passages[5]], "choices": [["x", "y"]]})  # no id column: FILE:ROW
    parquet = tmp_path / "mmlu.parquet"
    pq.write_table(table, parquet)
    out = tmp_path / "out"
    argv = [str(root / "corpus"), "--eval", str(arc_file), str(parquet), "-o", str(out)]
    assert (
        run(*argv, "--eval-field", "question", "--eval-field", "choices.text") != 0
    )  # the parquet has no choices.text
    assert run(*argv[:3], "-o", str(out), "--eval-field", "question", "--eval-field", "choices.text") == 0
    rows = [json.loads(line) for line in (out / "contaminated.jsonl").read_text().splitlines()]
    assert [(r["id"], r["eval_id"]) for r in rows] == [(docs[10][0], "arc-1")]
    out2 = tmp_path / "out2"
    assert run(str(root / "corpus"), "--eval", str(parquet), "-o", str(out2), "--eval-field", "question") == 0
    rows = [json.loads(line) for line in (out2 / "contaminated.jsonl").read_text().splitlines()]
    assert [(r["id"], r["eval_id"], r["eval_file"]) for r in rows] == [(docs[30][0], f"{parquet}:1", str(parquet))]


def test_normalization_meets_case_punctuation_whitespace_and_compatibility_forms():
    assert normalized_words("Don't PANIC,\u00a0it's 42!  e-mail") == [b"dont", b"panic", b"its", b"42", b"email"]
    # NFKC then case folding: a ligature, full-width letters, the German sharp s
    assert normalized_words("\ufb01ne \uff26\uff35\uff2c\uff2c Stra\u00dfe") == normalized_words("FINE full STRASSE")
    assert normalized_words("caf\u00e9 \u201cquoted\u201d \u2014 na\u00efve") == [
        "café".encode(),
        b"quoted",
        "naïve".encode(),
    ]


def test_a_hash_hit_is_confirmed_on_the_words(setup):
    _, evals, _ = setup
    tables = build_index([str(evals)], EvalOptions())
    words = normalized_words(passages_of(evals)[0])
    h = gram_hashes(passages_of(evals)[0], 13)[0]
    assert h in tables.hashes
    return_dir = Path(evals.parent / "index")
    tables.write(return_dir)
    index = EvalIndex.open(str(return_dir))
    assert index.confirm(words, 0, 13, h).eval_id == "wt-0"
    other = [b"collision"] + words[1:]  # another n-gram, given the same hash: no match
    assert index.confirm(other, 0, 13, h) is None
    assert np.all(np.diff(index.hashes.astype(np.uint64)) >= 0)


def half(data: bytes) -> bytes:
    return data[: len(data) // 2]


@pytest.mark.parametrize(
    ("make", "extra", "expected"),
    [
        (None, [], "missing.jsonl: no such evaluation set file"),
        (b"", [], "empty.jsonl: no evaluation items in the file"),
        (
            b'{"id": 1, "text": "fine"}\n{"id": 2, "question": "q"}\n',
            [],
            "bad.jsonl:2: no field 'text' (fields: 'id', 'question')",
        ),
        (
            half(gzip.compress(b"".join(b'{"id": %d, "text": "fine"}\n' % i for i in range(500)))),
            [],
            "eval.jsonl.gz: truncated or corrupt compressed stream",
        ),
        (b'{"id": 1, "text": "caf\xe9"}\n', [], "bad.jsonl:1: invalid UTF-8 at byte 22"),
        (b'{"id": [1], "text": "fine words"}\n', [], "bad.jsonl:1: id field 'id' is a list, not a string or integer"),
        (b'{"id": 1, "text": null}\n', [], "bad.jsonl:1: field 'text' is null, not a string or list of strings"),
    ],
    ids=["missing", "empty", "no-field", "truncated-gzip", "not-utf8", "bad-id", "null-text"],
)
def test_bad_evaluation_input_is_one_line(setup, tmp_path, capsys, make, extra, expected):
    root, _, _ = setup
    name = {None: "missing.jsonl", b"": "empty.jsonl"}.get(make, "eval.jsonl.gz" if "gz" in expected else "bad.jsonl")
    path = tmp_path / name
    if make is not None:
        path.write_bytes(make)
    out = tmp_path / "out"
    assert run(str(root / "corpus"), "--eval", str(path), "-o", str(out), *extra) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert not out.exists()


@pytest.mark.parametrize("value", ["0", "99999999999999999999"])
def test_an_ngram_out_of_range_is_one_line_when_parsed(setup, tmp_path, capsys, value):
    root, evals, _ = setup
    out = tmp_path / "out"
    with pytest.raises(SystemExit) as e:
        run(str(root / "corpus"), "--eval", str(evals), "-o", str(out), "--ngram", value)
    assert e.value.code == 2
    assert capsys.readouterr().err == (
        f"ptk decontaminate: error: argument --ngram: must be in [1, 1000], got '{value}' "
        "(see ptk decontaminate --help)\n"
    )
    assert not out.exists()


def test_its_folder_is_its_own(setup, tmp_path, capsys):
    root, evals, _ = setup
    out = tmp_path / "out"
    assert run(str(root / "corpus"), "--eval", str(evals), "-o", str(out)) == 0
    capsys.readouterr()
    assert main(["dedup", str(root / "corpus"), "-o", str(out)]) == 2
    assert "holds a ptk decontaminate output" in capsys.readouterr().err
    assert main(["dedup", str(out), "-o", str(tmp_path / "dedup")]) == 0  # its kept records are a corpus
    assert json.loads((tmp_path / "dedup" / "stats.json").read_text())["input_docs"] == 598


def test_the_one_pass_lookup_agrees_with_the_hashes_of_the_words(reuters_docs, passages):
    """`first_hits` (one pass over a batch's bytes) finds, in every text, the first n-gram that
    `gram_hashes` (normalized words, then their n-grams) puts in the table: on real texts of
    several scripts and punctuation."""
    texts = [t for _, t in reuters_docs[:400]] + passages + ["ﬁne Ｆull — ÉTÉ, naïve; Straße " * 5, "", "   "]
    for ngram in (1, 5, 13):
        table = np.unique(np.concatenate([gram_hashes(t, ngram)[5::7] for t in texts[::3]] + [np.zeros(0, np.uint64)]))
        first, words = first_hits(texts, ngram, table, hash_filter(table))
        assert np.count_nonzero(first > 0) > 100
        for text, at, count in zip(texts, first.tolist(), words.tolist()):
            hashes = gram_hashes(text, ngram)
            hits = np.flatnonzero(np.isin(hashes, table))
            assert at == (int(hits[0]) if len(hits) else -1)
            if at < 0:
                assert count == len(normalized_words(text))
