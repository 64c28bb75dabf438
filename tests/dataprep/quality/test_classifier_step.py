"""The filters file's `classifier` step (`dataprep.filter.classifier`) in `ptk filter` and `ptk
prepare`: every kept document has its score, every document scored below `min_score` is a removed
row like any filter's, with its score and the threshold; the settings are checked as the file is read
(a regression head's threshold is no fraction), and a bad one is one line naming the file and key."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from fixtures.corpora import pep_documents, reuters_documents, write_jsonl
from fixtures.stage_parts import kept_records
from pretrainkit.cli import main
from pretrainkit.dataprep.classifiers.score_fasttext import FastTextClassifier
from pretrainkit.dataprep.filter.steps import read_filters


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[Path, list[tuple[str, str]]]:
    """News and PEPs the models were not trained on, in two files."""
    root = tmp_path_factory.mktemp("classifier-step") / "in"
    docs = reuters_documents(4)[900:960] + pep_documents()[300:330]
    write_jsonl(docs[0::2], root / "a.jsonl")
    write_jsonl(docs[1::2], root / "b.jsonl")
    return root, docs[0::2] + docs[1::2]


def test_documents_scored_below_min_score_are_removed_rows(tmp_path, corpus, fasttext_models):
    inputs, docs = corpus
    shutil.copy(fasttext_models["softmax-bigrams.bin"], tmp_path / "news.bin")
    filters = tmp_path / "filters.yaml"  # the model's path is the file's folder's
    filters.write_text("filters:\n  - classifier: {model: news.bin, label: news, name: news, min_score: 0.5}\n")
    out = tmp_path / "out"
    assert main(["filter", str(inputs), "-o", str(out), "--filters", str(filters), "--workers", "2"]) == 0
    model = FastTextClassifier.load(fasttext_models["softmax-bigrams.bin"])
    scores = {i: round(float(p), 6) for (i, _), p in zip(docs, model.probabilities([t for _, t in docs], 0))}
    records = kept_records(out)
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert sorted(r["id"] for r in records) == sorted(i for i, s in scores.items() if s >= 0.5)
    assert all(r["score_news"] == scores[r["id"]] for r in records)
    assert sorted(r["id"] for r in removed) == sorted(i for i, s in scores.items() if s < 0.5)
    for r in removed:
        assert (r["filter"], r["value"], r["threshold"]) == ("classifier.min_score", scores[r["id"]], 0.5)
    assert 10 < len(removed) < len(docs) - 40  # the PEPs, and few news
    stats = json.loads((out / "stats.json").read_text())
    assert stats["removed_by_step"]["classifier"]["docs"] == len(removed)


def test_a_prepare_pipeline_runs_the_step_in_its_filter_stage(tmp_path, corpus, fasttext_models):
    inputs, docs = corpus
    filters = tmp_path / "filters.yaml"
    model = fasttext_models["softmax-bigrams.bin"]
    filters.write_text(f"filters:\n  - classifier: {{model: {model}, label: pep, min_score: 0.5}}\n")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(f"stages:\n  - filter: {{filters: {filters}}}\n")
    direct, prepared = tmp_path / "direct", tmp_path / "prepared"
    assert main(["filter", str(inputs), "-o", str(direct), "--filters", str(filters), "--workers", "1"]) == 0
    assert main(["prepare", str(inputs), "-o", str(prepared), "--pipeline", str(pipeline), "--workers", "1"]) == 0
    assert kept_records(prepared / "filter") == kept_records(direct) and 20 < len(kept_records(direct)) < len(docs) - 40
    assert (prepared / "filter" / "removed.jsonl").read_bytes() == (direct / "removed.jsonl").read_bytes()


def test_a_regression_heads_threshold_is_no_fraction(tmp_path, bert_models):
    filters = tmp_path / "filters.yaml"
    filters.write_text(f"filters:\n  - classifier: {{model: {bert_models['regression']}, min_score: 3}}\n")
    (step,) = read_filters(filters)
    assert (step.settings.min_score, step.settings.label) == (3.0, None)


@pytest.mark.parametrize(
    "settings, message",
    [
        ("{label: news}", "filters[0].classifier: model: must be set"),
        ("{model: missing.bin, label: news}", "filters[0].classifier.model: {folder}/missing.bin: no such classifier"),
        (
            "{model: {model}, label: blog}",
            "filters[0].classifier.model: {model}: no label 'blog' (the model's labels: news, pep)",
        ),
        ("{model: {model}}", "filters[0].classifier.model: {model}: name the label to score"),
        ("{model: {model}, label: news, min_score: -1}", "filters[0].classifier.min_score: must be a number >= 0"),
        ("{model: {model}, label: news, min_scor: 1}", "filters[0].classifier: unknown key 'min_scor'"),
    ],
)
def test_bad_settings_are_one_line_naming_the_file_and_key(tmp_path, fasttext_models, capsys, settings, message):
    model = str(fasttext_models["softmax-bigrams.bin"])
    filters = tmp_path / "filters.yaml"
    filters.write_text("filters:\n  - classifier: " + settings.replace("{model}", model) + "\n")
    (tmp_path / "in.jsonl").write_text('{"text": "a document"}\n')
    assert main(["filter", str(tmp_path / "in.jsonl"), "-o", str(tmp_path / "out"), "--filters", str(filters)]) == 2
    err = capsys.readouterr().err.strip()
    expected = f"ptk: error: {filters}: " + message.replace("{model}", model).replace("{folder}", str(tmp_path))
    assert err.startswith(expected) and "\n" not in err, err
    assert not (tmp_path / "out").exists()
