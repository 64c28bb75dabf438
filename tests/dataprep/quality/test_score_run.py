"""`ptk score` end to end: every record written with its scores (each classifier's, and the combined
ones), in input order, the unreadable ones as rejected rows; stats.json's distribution is that of
the scores written; the same bytes on one and two workers; a run stopped part way resumes into
the same bytes without redoing finished jobs; bad input is one line and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fixtures.corpora import pep_documents, reuters_documents
from fixtures.stage_parts import kept_records
from pretrainkit.cli import main
from pretrainkit.dataprep.classifiers.score_fasttext import FastTextClassifier
from pretrainkit.dataprep.classifiers.score_models import int_score
from pretrainkit.dataprep.quality import score


def snapshot(out: Path) -> dict[str, bytes]:
    return {p.relative_to(out).as_posix(): p.read_bytes() for p in sorted(out.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[dict]]:
    """Three files of news and PEPs (an extra field in each record), one record without a text field
    and one line that is not JSON; returns the folder and the readable records in order."""
    root = tmp_path_factory.mktemp("score-corpus") / "in"
    root.mkdir()
    docs = reuters_documents(4)[900:1020] + pep_documents()[300:330]
    good = [{"id": i, "text": t, "url": f"https://example.org/{i}"} for i, t in docs]
    lines = [json.dumps(r) for r in good]
    (root / "a.jsonl").write_text("\n".join(lines[:50] + ['{"id": "no-text", "body": "x"}']) + "\n")
    (root / "b.jsonl").write_text("\n".join(lines[50:100] + ['{"id": "cut", "text": ']) + "\n")
    (root / "c.jsonl").write_text("\n".join(lines[100:]) + "\n")
    return root, good


def argv(inputs: Path, out: Path, models: dict[str, Path], workers: str = "2") -> list[str]:
    return [
        "score", str(inputs), "-o", str(out),
        "--classifier", str(models["softmax-bigrams.bin"]), "--label", "news", "--name", "news",
        "--classifier", str(models["hs-subwords.bin"]), "--name", "pep", "--label", "__label__pep",
        "--combine", "max,mean", "--workers", workers,
    ]  # fmt: skip


def test_every_record_is_written_with_its_scores(tmp_path, corpus, fasttext_models, capsys):
    inputs, good = corpus
    out = tmp_path / "out"
    assert main(argv(inputs, out, fasttext_models)) == 0
    written = kept_records(out)
    assert [{k: r[k] for k in ("id", "text", "url")} for r in written] == good  # every field kept, in order
    texts = [r["text"] for r in good]
    news = FastTextClassifier.load(fasttext_models["softmax-bigrams.bin"]).probabilities(texts, 0)
    pep = FastTextClassifier.load(fasttext_models["hs-subwords.bin"]).probabilities(texts, 1)
    for r, n, p in zip(written, news, pep):
        assert list(r)[3:] == ["score_news", "score_pep", "score_max", "score_mean"]
        assert (r["score_news"], r["score_pep"]) == (round(float(n), 6), round(float(p), 6))
        assert r["score_max"] == max(r["score_news"], r["score_pep"])
        assert r["score_mean"] == round((r["score_news"] + r["score_pep"]) / 2, 6)
    assert sum(r["score_news"] > 0.5 for r in written[:120]) > 100 and all(r["score_pep"] > 0.5 for r in written[120:])
    rejected = [json.loads(line) for line in (out / "rejected.jsonl").read_text().splitlines()]
    assert [(r["source"], r["line"]) for r in rejected] == [("a.jsonl", 51), ("b.jsonl", 51)]
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["input_docs"], stats["scored_docs"], stats["rejected"]) == (len(good) + 2, len(good), 2)
    for name in ("score_news", "score_pep", "score_max", "score_mean"):
        values = np.array([r[name] for r in written])
        s = stats["scores"][name]
        assert s["docs"] == len(good) and sum(b["docs"] for b in s["histogram"]) == len(good)
        assert abs(s["mean"] - values.mean()) < 1e-6
        assert (s["min"], s["max"]) == (round(values.min(), 3), round(values.max(), 3))
        steps = np.sort(np.round(values, 3))
        for key, q in s["quantiles"].items():  # nearest rank over the values at 3 decimals
            assert q == steps[max(1, int(np.ceil(int(key[1:]) / 100 * len(steps)))) - 1], (name, key)
        for b in s["histogram"]:
            assert b["docs"] == sum(b["from"] <= v <= b["to"] for v in steps)
    assert "score_news" in capsys.readouterr().out


def test_the_same_bytes_for_one_and_two_workers(tmp_path, corpus, fasttext_models):
    inputs, _ = corpus
    for workers in ("1", "2"):
        assert main(argv(inputs, tmp_path / workers, fasttext_models, workers)) == 0
    assert snapshot(tmp_path / "1") == snapshot(tmp_path / "2")


def test_a_stopped_run_resumes_into_the_same_bytes(tmp_path, corpus, fasttext_models, monkeypatch):
    inputs, _ = corpus
    clean, out = tmp_path / "clean", tmp_path / "stopped"
    assert main(argv(inputs, clean, fasttext_models, "1")) == 0
    read = []
    real_read_task = score.read_task

    def stopping_at_the_third(task, *args):
        read.append(Path(task.file.path).name)
        if len(read) == 3:
            raise KeyboardInterrupt  # Ctrl-C during the third job (one worker: the jobs run in this process)
        return real_read_task(task, *args)

    monkeypatch.setattr(score, "read_task", stopping_at_the_third)
    assert main(argv(inputs, out, fasttext_models, "1")) != 0
    assert not (out / "stats.json").exists() and sorted(read) == ["a.jsonl", "b.jsonl", "c.jsonl"]
    third = read[-1]
    read.clear()
    monkeypatch.setattr(
        score, "read_task", lambda task, *args: read.append(Path(task.file.path).name) or real_read_task(task, *args)
    )
    assert main(argv(inputs, out, fasttext_models, "1")) == 0
    assert read == [third]  # the finished jobs were kept
    assert snapshot(out) == snapshot(clean)


def test_a_hugging_face_regression_head_writes_its_int_score(tmp_path, corpus, bert_models, fasttext_models):
    inputs, good = corpus
    out = tmp_path / "out"
    given = ["score", str(inputs), "-o", str(out), "--classifier", str(bert_models["regression"]), "--name", "edu"]
    assert (
        main([*given, "--classifier", str(fasttext_models["softmax-bigrams.bin"]), "--label", "pep", "--workers", "1"])
        == 0
    )
    written = kept_records(out)
    assert len(written) == len(good)
    for r in written:
        assert list(r)[3:] == ["score_edu", "int_score_edu", "score_softmax_bigrams"]
        assert r["int_score_edu"] == int_score(r["score_edu"])
    stats = json.loads((out / "stats.json").read_text())
    assert set(stats["scores"]) == {"score_edu", "int_score_edu", "score_softmax_bigrams"}


@pytest.mark.parametrize(
    "change, message",
    [
        (
            ["--classifier", "{train}"],
            "{train}: not a classifier (neither a fastText .bin/.ftz nor a Hugging Face model folder)",
        ),
        (["--classifier", "{model}", "--label", "blog"], "{model}: no label 'blog' (the model's labels: news, pep)"),
        (["--classifier", "{model}"], "{model}: name the label to score (the model's labels: news, pep)"),
        (
            ["--classifier", "{model}", "--label", "news", "--text-field", "content"],
            "{inputs}: all 152 records were rejected, most often missing text field 'content'",
        ),
        (
            ["--classifier", "{model}", "--label", "news", "--combine", "max"],
            "score: --combine needs two classifiers or more",
        ),
    ],
)
def test_bad_input_is_one_line(tmp_path, corpus, fasttext_models, capsys, change, message):
    inputs, _ = corpus
    train = tmp_path / "train.txt"
    train.write_text("__label__news some text\n")
    model = str(fasttext_models["softmax-bigrams.bin"])
    out = tmp_path / "out"
    given = [c.format(train=train, model=model) for c in change]
    assert main(["score", str(inputs), "-o", str(out), *given, "--workers", "1"]) != 0
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith(f"ptk: error: {message.format(train=train, model=model, inputs=inputs)}") and "\n" not in err
    ), err
