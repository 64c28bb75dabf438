"""`ptk split` on Reuters-21578 articles scored by their share of letters (a stand-in for a classifier's
score, with many ties): the length-weighted cuts equal a brute-force computation, each quantile bucket
holds ~1/K of the text bytes, every record lands unchanged in the bucket of its score, the bytes are the
same on any number of workers, thresholds cut where given, bad input is one line, and the mixture
template is a mixture `ptk mix inspect` reads once the buckets are tokenized."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from fixtures import corpora
from fixtures.stage_parts import kept_records
from pretrainkit import cli
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.quality.split import SplitOptions, bucket_of, run_split, weighted_cuts
from pretrainkit.dataprep.readers import Document, discover_inputs, plan_read_tasks, read_task
from pretrainkit.errors import UserError
from pretrainkit.mixtures.config import read_mixture_config
from pretrainkit.shards import write_shards

FIELD = "score_letters"


def _letters(text: str) -> float:
    """The share of letters in a text, to four places: a score with some ties, as classifiers' rounded ones."""
    return round(sum(c.isalpha() for c in text) / len(text), 4)


@pytest.fixture(scope="module")
def scored(tmp_path_factory) -> Path:
    """A folder of three scored JSONL files (three read tasks) of Reuters articles."""
    corpora.need_data(corpora.DATA)
    docs = corpora.reuters_documents(files=3)
    folder = tmp_path_factory.mktemp("scored") / "in"
    folder.mkdir()
    for n in range(3):
        with open(folder / f"part-{n}.jsonl", "w", encoding="utf-8") as f:
            for doc_id, text in docs[n::3]:
                f.write(json.dumps({"id": doc_id, "text": text, FIELD: _letters(text)}, ensure_ascii=False) + "\n")
    return folder


def _lines(folder: Path) -> set[bytes]:
    return {line for f in sorted(folder.glob("*.jsonl")) for line in f.read_bytes().splitlines()}


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _split(inputs: list[str], out: Path, *args: str) -> int:
    """`ptk split`'s exit status (an option argparse refuses exits, as `ptk` does then)."""
    try:
        return cli.main(["split", *inputs, "-o", str(out), "--by", FIELD, *args])
    except SystemExit as e:
        return int(e.code)


def _brute_force_cuts(scores: list[float], lengths: list[int], k: int) -> list[float]:
    """Cut j: the score of the first document in score order whose running bytes pass j/k of the total."""
    pairs = sorted(zip(scores, lengths), key=lambda p: p[0])
    total = sum(lengths)
    cuts = []
    for j in range(1, k):
        running = 0
        for score, length in pairs:
            running += length
            if running * k > j * total:
                cuts.append(score)
                break
    return cuts


def test_weighted_cuts_equal_brute_force_and_ignore_order():
    rng = np.random.default_rng(3)
    for k in (2, 3, 7, 20):
        scores = rng.integers(0, 30, 500).astype(np.float64) / 10  # many ties
        # Lengths of 1 and 2: running totals hit j/k of the total exactly, where > and >= part.
        lengths = rng.integers(0, 2000 if k % 2 else 3, 500).astype(np.int64)
        cuts = weighted_cuts(scores, lengths, k)
        assert cuts.tolist() == _brute_force_cuts(scores.tolist(), lengths.tolist(), k)
        shuffled = rng.permutation(500)
        assert weighted_cuts(scores[shuffled], lengths[shuffled], k).tolist() == cuts.tolist()
        # What lies below cut j is at most j/k of the bytes; what lies at or below it, more.
        total = lengths.sum()
        for j, cut in enumerate(cuts, 1):
            assert lengths[scores < cut].sum() * k <= j * total < lengths[scores <= cut].sum() * k


def test_quantile_buckets_hold_a_kth_of_the_bytes_each_record_unchanged(scored, tmp_path):
    out = tmp_path / "out"
    assert _split([str(scored)], out, "--quantiles", "4", "--workers", "1") == 0
    buckets = json.loads((out / "buckets.json").read_text())
    stats = json.loads((out / "stats.json").read_text())
    assert stats["buckets"] == buckets and [b["name"] for b in buckets] == [f"bucket-0{b}" for b in range(4)]
    lines = _lines(scored)
    scores = np.array([json.loads(line)[FIELD] for line in lines])
    lengths = np.array([len(json.loads(line)["text"].encode()) for line in lines])
    total = int(lengths.sum())
    assert stats["text_bytes"] == total and stats["input_docs"] == len(lines)
    seen = []
    for b in buckets:
        # Off 1/K by at most the bytes whose score ties with a cut (the document straddling it among them).
        tied = sum(int(lengths[scores == cut].sum()) for cut in (b["from"], b["to"]) if cut is not None)
        assert abs(b["text_bytes"] - total / 4) <= tied < total / 50
        records = kept_records(out / b["name"])
        assert len(records) == b["docs"] and sum(len(r["text"].encode()) for r in records) == b["text_bytes"]
        held = [r[FIELD] for r in records]
        assert min(held) == b["lowest"] and max(held) == b["highest"]
        assert all((b["from"] is None or s >= b["from"]) and (b["to"] is None or s < b["to"]) for s in held)
        seen += records
    assert sorted(json.dumps(r, ensure_ascii=False).encode() for r in seen) == sorted(lines)  # each once, unchanged
    assert [b["to"] for b in buckets[:-1]] == _brute_force_cuts(scores.tolist(), lengths.tolist(), 4)
    # the buckets are the corpora to read on: the whole folder (its rejected.jsonl among them) is refused
    with pytest.raises(UserError, match=r": a `ptk split` output: give the bucket folders to read \("):
        discover_inputs([str(out)])


def test_bytes_identical_on_any_number_of_workers_and_on_a_rerun(scored, tmp_path):
    options = SplitOptions(FIELD, quantiles=5)
    with LocalRunner(1) as runner:
        run_split([str(scored)], tmp_path / "one", options, runner)
    with LocalRunner(2) as runner:
        run_split([str(scored)], tmp_path / "two", options, runner)
        first = _files(tmp_path / "two")
        run_split([str(scored)], tmp_path / "two", options, runner)  # a rerun over a finished output
    assert _files(tmp_path / "one") == first == _files(tmp_path / "two")
    assert sum(1 for name in first if name.endswith(".jsonl.zst")) == 5 * 3  # a part per bucket and read task


def test_a_run_of_other_buckets_into_the_same_folder_leaves_none_of_the_earlier(scored, tmp_path):
    assert _split([str(scored)], tmp_path / "out", "--quantiles", "5", "--workers", "1") == 0
    assert _split([str(scored)], tmp_path / "out", "--quantiles", "2", "--workers", "1") == 0
    assert _split([str(scored)], tmp_path / "fresh", "--quantiles", "2", "--workers", "1") == 0
    assert _files(tmp_path / "out") == _files(tmp_path / "fresh")


def test_thresholds_cut_where_given_and_ties_go_up(scored, tmp_path):
    scores = sorted(json.loads(line)[FIELD] for line in _lines(scored))
    low, high = 0.7, scores[len(scores) // 2]  # the median: a score some documents have, a tie to place
    out = tmp_path / "out"
    assert _split([str(scored)], out, "--thresholds", f"{low},{high},2", "--workers", "1") == 0
    buckets = json.loads((out / "buckets.json").read_text())
    assert [(b["from"], b["to"]) for b in buckets] == [(None, low), (low, high), (high, 2), (2, None)]
    assert buckets[3]["docs"] == 0 and buckets[3]["lowest"] is None and kept_records(out / "bucket-03") == []
    # The mixture leaves the empty bucket out and weights the others by their bytes, 4 epochs at most each.
    for b in range(3):  # where the shards will be (the config checks that the folders are there)
        (out / "tokens" / f"bucket-0{b}").mkdir(parents=True)
    sources = read_mixture_config(out / "mixture.yaml").sources
    total = sum(b["text_bytes"] for b in buckets)
    assert [(s.name, s.shards, s.max_epochs) for s in sources] == [
        (f"bucket-0{b}", out / "tokens" / f"bucket-0{b}", 4) for b in range(3)
    ]
    assert [s.weight for s in sources] == pytest.approx([b["text_bytes"] / total for b in buckets[:3]], rel=1e-5)
    expected = [sum(s < low for s in scores), sum(low <= s < high for s in scores), sum(s >= high for s in scores)]
    assert [b["docs"] for b in buckets[:3]] == expected and all(expected)
    assert high in [r[FIELD] for r in kept_records(out / "bucket-02")] and buckets[2]["lowest"] == high
    assert np.bincount(bucket_of(np.array(scores), np.array([low, high, 2]))).tolist() == expected


@pytest.mark.parametrize(
    ("record", "args", "expected"),
    [
        ('{"id": "a", "text": "words"}', ["--quantiles", "2"], r"bad\.jsonl:2: no field 'score_letters'"),
        (
            '{"id": "a", "text": "words", "score_letters": "high"}',
            ["--quantiles", "2"],
            r'bad\.jsonl:2: .*"high", not a',
        ),
        ('{"id": "a", "text": "words", "score_letters": true}', ["--quantiles", "2"], r"bad\.jsonl:2: .*true, not a"),
        ('{"id": "a", "text": "words", "score_letters": NaN}', ["--quantiles", "2"], r"bad\.jsonl:2: .*nan, not a fin"),
        (
            '{"id": "a", "text": "words", "score_letters": 1}',
            ["--quantiles", "1"],
            r"--quantiles: must be in \[2, 100\]",
        ),
        ('{"id": "a", "text": "words", "score_letters": 1}', ["--thresholds", "2,1"], r"--thresholds must increase"),
        ('{"id": "a", "text": "words", "score_letters": 1}', ["--thresholds", "1,x"], r"--thresholds takes numbers"),
        ('{"id": "a", "text": "words", "score_letters": 1}', ["--quantiles", "2", "--upsample-top", "3:2"], r"of 2"),
    ],
)
def test_bad_input_is_one_line(record, args, expected, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "z", "text": "fine", "score_letters": 0.5}\n' + record + "\n")
    assert _split([str(bad)], tmp_path / "out", *args, "--workers", "1") == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and re.search(expected, err), err
    assert not (tmp_path / "out" / "stats.json").exists()


def _tokenize_bytes(bucket: Path, shards: Path) -> None:
    """A bucket read as a corpus (the readers) into byte-level shards: token = UTF-8 byte, EOS 256."""
    texts = [
        np.frombuffer(item.text.encode(), dtype=np.uint8).astype(np.uint16)
        for task in plan_read_tasks(discover_inputs([str(bucket)]))
        for item in read_task(task)
        if type(item) is Document
    ]
    write_shards(texts, shards, vocab_size=257, eos_id=256, tokenizer_sha256="b" * 64, batch_tokens=8192)


def test_mixture_template_reads_as_a_mixture_with_the_top_bucket_upsampled(scored, tmp_path, capsys):
    out = tmp_path / "out"
    assert _split([str(scored)], out, "--quantiles", "2", "--upsample-top", "1:2", "--max-epochs", "6") == 0
    for name in ("bucket-00", "bucket-01"):
        _tokenize_bytes(out / name, out / "tokens" / name)
    capsys.readouterr()
    assert cli.main(["mix", "inspect", str(out / "mixture.yaml"), "--tokens", "1M", "--seq-len", "128"]) == 0
    report = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in report.splitlines() if line.startswith("bucket-")}
    low, high = rows["bucket-00"], rows["bucket-01"]
    assert low[-1] == high[-1] == "6"  # max_epochs
    epochs_low, epochs_high = float(low[8]), float(high[8])
    assert epochs_high == pytest.approx(2 * epochs_low, rel=0.05)  # twice the passes per byte
    assert math.isclose(float(high[1]) / float(low[1]), 2, rel_tol=0.05)  # buckets of ~equal bytes, one 2x
