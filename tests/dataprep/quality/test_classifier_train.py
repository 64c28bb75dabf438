"""`ptk classifier train` against fastText itself, on Reuters-21578's own topic labels (articles about
acquisitions, `acq`, against all others): the .bin it writes is read by fastText's `load_model` and
predicts there as here; its held-out AUC is within 0.01 of fastText's `train_supervised` with the same
settings on the same documents; one worker gives the same bytes for a seed; bad input is one line."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import fasttext  # fasttext-predict: fastText's own C++ loader and predict
import numpy as np
import pytest

from fixtures import corpora
from fixtures.fasttext_reference import reference_scores
from pretrainkit import cli
from pretrainkit.dataprep.classifiers.auc import roc_auc
from pretrainkit.dataprep.quality.train import TrainOptions, fasttext_line, read_labelled, train_classifier

# Small enough to train in about a second, large enough for AUCs that differ by little between runs.
OPTIONS = TrainOptions(bucket=200_000, dim=50)
TOPIC = "acq"


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[str], np.ndarray]:
    """The training JSONL (the first 4 files' articles, labelled acq or other) and the held-out texts
    (the next 2 files') with whether each is about acq."""
    corpora.need_data(corpora.DATA)
    articles = corpora.reuters_articles(files=6)
    held_out = [a for a in articles if int(a[0].split("-")[1]) > 4000]
    path = tmp_path_factory.mktemp("classifier") / "train.jsonl"
    with open(path, "w", encoding="utf-8") as f:
        for doc_id, text, topics in articles[: len(articles) - len(held_out)]:
            label = TOPIC if TOPIC in topics else "other"
            f.write(json.dumps({"id": doc_id, "text": text, "topic": label}) + "\n")
    return path, [a[1] for a in held_out], np.array([TOPIC in a[2] for a in held_out])


@pytest.fixture(scope="module")
def trained(corpus):
    examples = read_labelled([str(corpus[0])], "text", "topic")
    return examples, train_classifier(examples, OPTIONS)


def test_the_model_file_predicts_in_fasttext_as_here(trained, corpus, tmp_path):
    _, model = trained
    model.write(tmp_path / "model.bin")
    loaded = fasttext.load_model(str(tmp_path / "model.bin"))
    texts = corpus[1][:400] + ["", "__label__acq only a label", "stops </s> here", "café\nnext line\x00and NUL"]
    ours = model.probabilities(texts)
    for text, row in zip(texts, ours):
        labels, probs = loaded.predict(fasttext_line(text).decode(), k=-1)
        theirs = dict(zip(labels, probs))
        assert sorted(theirs) == sorted(model.labels)
        # fastText's predict gives exp(log(p + 1e-5)) of the probability p
        assert [theirs[label] for label in model.labels] == pytest.approx(row + 1e-5, abs=2e-6), text[:80]


def test_held_out_auc_within_001_of_fasttext(trained, corpus, tmp_path):
    examples, model = trained
    _, texts, positive = corpus
    ours = roc_auc(positive, model.probabilities(texts)[:, model.labels.index(f"__label__{TOPIC}")])
    _, scores = reference_scores(examples, OPTIONS, texts, f"__label__{TOPIC}", tmp_path)
    theirs = roc_auc(positive, scores)
    assert theirs > 0.85 and abs(ours - theirs) <= 0.01, (ours, theirs)


def train_command(*args: str) -> int:
    return cli.main(["classifier", "train", *args, "--bucket", "50000", "--dim", "20"])


def test_one_worker_writes_the_same_bytes_for_a_seed(corpus, tmp_path, capsys):
    for name, seed in (("a.bin", "3"), ("b.bin", "3"), ("c.bin", "4")):
        assert train_command(str(corpus[0]), "-o", str(tmp_path / name), "--label-field", "topic", "--seed", seed) == 0
    assert (tmp_path / "a.bin").read_bytes() == (tmp_path / "b.bin").read_bytes()
    assert (tmp_path / "a.bin").read_bytes() != (tmp_path / "c.bin").read_bytes()
    assert "trained on" in capsys.readouterr().out


def test_two_workers_train_as_well(corpus, tmp_path):
    """Hogwild: not repeatable, but as good a model (the held-out AUC of one worker's, within 0.01)."""
    aucs = []
    for workers in ("1", "2"):
        out = tmp_path / f"{workers}.bin"
        assert train_command(str(corpus[0]), "-o", str(out), "--label-field", "topic", "--workers", workers) == 0
        loaded = fasttext.load_model(str(out))
        scores = [dict(zip(*loaded.predict(fasttext_line(t).decode(), k=-1)))[f"__label__{TOPIC}"] for t in corpus[1]]
        aucs.append(roc_auc(corpus[2], scores))
    assert aucs[0] > 0.85 and abs(aucs[0] - aucs[1]) <= 0.01, aucs


def test_positive_and_negative_label_two_sets_of_inputs(corpus, tmp_path):
    positive, negative = tmp_path / "pos.jsonl", tmp_path / "neg.jsonl.gz"
    corpora.write_jsonl([(f"p{i}", t) for i, t in enumerate(corpus[1][:100])], positive)
    with gzip.open(negative, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps({"text": f"other words {i} here"}) + "\n" for i in range(50))
    out = tmp_path / "m.bin"
    assert train_command("--positive", str(positive), "--negative", str(negative), "-o", str(out)) == 0
    loaded = fasttext.load_model(str(out))
    assert loaded.predict(fasttext_line(corpus[1][0]).decode())[0] == ("__label__positive",)
    assert loaded.predict("other words 7 here")[0] == ("__label__negative",)


RECORDS = [{"text": "a b c", "topic": "x"}, {"text": "d e f", "topic": "y"}]


@pytest.mark.parametrize(
    "lines, message",
    [
        ([*RECORDS, {"text": "g h"}], "data.jsonl: record 3: no label field 'topic'"),
        (
            [*RECORDS, {"text": "g h", "topic": 3}],
            "data.jsonl: record 3: label field 'topic' is a number, not a string",
        ),
        ([*RECORDS, {"text": "g h", "topic": "two words"}], "data.jsonl: record 3: label 'two words' is not one word"),
        ([RECORDS[0], RECORDS[0]], "data.jsonl: only the label 'x'; a classifier needs records of two labels or more"),
        ([{"topic": "x"}, "{not json"], "data.jsonl: all 2 records were rejected, most often missing text field"),
    ],
)
def test_bad_input_is_one_line_naming_file_and_record(tmp_path, capsys, lines, message):
    data = tmp_path / "data.jsonl"
    data.write_text("".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines))
    assert train_command(str(data), "-o", str(tmp_path / "m.bin"), "--label-field", "topic") == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1, err
    assert not (tmp_path / "m.bin").exists()


def test_records_the_readers_reject_are_skipped_and_counted(tmp_path, capsys):
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS) + '{"topic": "x"}\n{not json\n')
    assert train_command(str(data), "-o", str(tmp_path / "m.bin"), "--label-field", "topic") == 0
    assert "(2 rejected records skipped)" in capsys.readouterr().out
    assert fasttext.load_model(str(tmp_path / "m.bin")).predict("a b c")[0] == ("__label__x",)


def test_unreadable_inputs_are_one_line(tmp_path, capsys):
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"not gzip at all")
    assert train_command(str(broken), "-o", str(tmp_path / "m.bin"), "--label-field", "topic") == 2
    assert "broken.jsonl.gz" in capsys.readouterr().err
    assert train_command(str(tmp_path / "absent.jsonl"), "-o", str(tmp_path / "m.bin"), "--label-field", "t") == 2
    assert "absent.jsonl" in capsys.readouterr().err
    assert train_command("--positive", str(broken), "-o", str(tmp_path / "m.bin")) == 2
    assert "--positive and --negative go together" in capsys.readouterr().err
