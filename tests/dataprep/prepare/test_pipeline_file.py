"""The pipeline file: its stages in order with their settings; every mistake one line naming file, stage and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from pretrainkit.cli import main
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, read_filters
from pretrainkit.dataprep.prepare.pipeline_file import read_pipeline
from pretrainkit.errors import UserError


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return path


def test_stages_in_order_with_their_settings_and_paths_relative_to_the_file(tmp_path):
    (tmp_path / "evals").mkdir()
    (tmp_path / "evals" / "qa.jsonl").write_text('{"id": "q1", "text": "what is the capital of france"}\n')
    path = _file(
        tmp_path,
        """
stages:
  - extract
  - filter: {languages: [en, de]}
  - paragraphs: {min_length: 50}
  - dedup: {threshold: 0.7, near: false}
  - decontaminate: {eval: [evals/qa.jsonl], ngram: 8}
  - tokenize: {tokenizer: tok.json, shard_size: 2M, format: webdataset}
""",
    )
    stages = read_pipeline(path)
    names = ["extract", "filter", "paragraphs", "dedup", "decontaminate", "tokenize"]
    assert [s.name for s in stages] == names
    assert [s.folder for s in stages] == [*names[:-1], "shards"]
    steps = stages[1].options.steps
    assert [s.name for s in steps] == [s.name for s in read_filters(DEFAULT_FILTERS)]  # FineWeb's, by default
    assert next(s for s in steps if s.name == "language").settings.languages == ["de", "en"]  # as --languages: sorted
    assert stages[2].options.min_length == 50
    assert (stages[3].options.threshold, stages[3].options.near) == (0.7, False)
    assert stages[4].options.eval_files == (str(tmp_path / "evals" / "qa.jsonl"),)
    assert stages[4].options.ngram == 8
    tokenize = stages[5].options
    assert tokenize.tokenizer == str(tmp_path / "tok.json")
    assert (tokenize.options.shard_tokens, tokenize.options.format) == (2_000_000, "webdataset")


def test_the_filter_languages_pass_to_a_later_paragraphs_stage_without_its_own(tmp_path):
    (tmp_path / "language.yaml").write_text("filters:\n  - language: {languages: [fr, de]}\n")
    given = {
        "filter: {languages: [en]}\n  - paragraphs": ["en"],
        "filter: {filters: language.yaml}\n  - paragraphs": ["de", "fr"],  # the filters file's language step
        "filter: {languages: [en]}\n  - paragraphs: {languages: [fr, en]}": ["en", "fr"],  # its own, sorted
        "filter\n  - paragraphs": None,  # a filter keeping every language: every document relabelled, none removed
        "paragraphs\n  - filter: {languages: [en]}": None,  # a filter after it
    }
    for stages, languages in given.items():
        pipeline = read_pipeline(_file(tmp_path, f"stages:\n  - {stages}\n"))
        assert next(s for s in pipeline if s.name == "paragraphs").options.languages == languages, stages


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("stages: []\n", "stages: must be a non-empty list of stages"),
        ("stage: [dedup]\n", "a pipeline file is a mapping with the key 'stages'"),
        ("stages: [dedup]\nworkers: 2\n", "unknown key 'workers' (known: stages)"),
        ("stages: [dedupe]\n", "stages[0]: unknown stage 'dedupe' (known: extract, filter"),
        ("stages: [dedup, dedup]\n", "stages[1]: stage 'dedup' given twice (also stages[0])"),
        ("stages: [dedup, extract]\n", "stages[1]: 'extract' must be the first stage"),
        ("stages: [{tokenize: {tokenizer: t.json}}, dedup]\n", "stages[0]: 'tokenize' must be the last stage"),
        ("stages: [{dedup: {treshold: 0.8}}]\n", "stages[0].dedup: unknown key 'treshold' (known: threshold,"),
        ("stages: [{dedup: {threshold: high}}]\n", "stages[0].dedup.threshold: must be a number >= 0"),
        ("stages: [{dedup: {threshold: 1.5}}]\n", "stages[0].dedup.threshold: must be a number in (0, 1], got 1.5"),
        ("stages: [{dedup: {num_perm: 99999999999999999999}}]\n", "stages[0].dedup.num_perm: must be an integer in ["),
        ("stages: [{dedup: {ngram: 65}}]\n", "stages[0].dedup.ngram: must be an integer in [1, 64], got 65"),
        (
            "stages: [{paragraphs: {min_length: 99999999999999999999}}]\n",
            "stages[0].paragraphs.min_length: must be an integer in [0, 1000000000], got 99999999999999999999",
        ),
        (
            "stages: [{decontaminate: {eval: [e.jsonl], ngram: 99999999999999999999}}]\n",
            "stages[0].decontaminate.ngram: must be an integer in [1, 1000], got 99999999999999999999",
        ),
        (
            "stages: [{tokenize: {tokenizer: t.json, shard_size: 99999999999999999999}}]\n",
            "stages[0].tokenize.shard_size: must be an integer in [1, 1000000000000], got 99999999999999999999",
        ),
        (
            "stages: [{tokenize: {tokenizer: t.json, batch_size: 100T}}]\n",
            "stages[0].tokenize.batch_size: must be in [1, 1000000000000], got '100T'",
        ),
        ("stages: [{dedup: [0.8]}]\n", "stages[0].dedup: settings must be a mapping"),
        ("stages: [{paragraphs: {min_length: -1}}]\n", "stages[0].paragraphs.min_length: must be an integer >= 0"),
        ("stages: [decontaminate]\n", "stages[0].decontaminate: eval: the evaluation set files are needed"),
        ("stages: [tokenize]\n", "stages[0].tokenize: tokenizer: the tokenizer"),
        ("stages: [{tokenize: {tokenizer: t.json, shard_size: lots}}]\n", "stages[0].tokenize.shard_size:"),
        ("stages: [{filter: {filters: nowhere.yaml}}]\n", "stages[0].filter: "),
        ("stages: [dedup]\nstages: [filter]\n", "duplicate key 'stages'"),
    ],
)
def test_a_mistake_is_one_line_naming_the_file_and_the_key(tmp_path, text, message):
    path = _file(tmp_path, text)
    with pytest.raises(UserError) as e:
        read_pipeline(path)
    line = str(e.value)
    assert "\n" not in line and line.startswith(str(path)), line
    assert message in line, line


def test_an_extract_pipeline_refuses_other_record_fields(tmp_path):
    with pytest.raises(UserError, match="an 'extract' stage writes records with 'text' and 'id'"):
        read_pipeline(_file(tmp_path, "stages: [extract, dedup]\n"), text_field="body")


def test_the_command_refuses_stage_options_beside_a_pipeline_file(tmp_path, capsys):
    path = _file(tmp_path, "stages: [dedup]\n")
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": 1, "text": "one two three"}\n')
    code = main(["prepare", str(corpus), "-o", str(tmp_path / "o"), "--pipeline", str(path), "--threshold", "0.5"])
    assert code == 2
    assert "--threshold: with --pipeline, the stages' settings come from the pipeline file" in capsys.readouterr().err
    assert not (tmp_path / "o").exists()
    assert main(["prepare", str(corpus), "-o", str(tmp_path / "o")]) == 2
    assert "--tokenizer is needed (or a --pipeline FILE" in capsys.readouterr().err
