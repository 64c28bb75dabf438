"""Language codes: only those the language model outputs are kept, read from its file; any other
(`xx`, `eng`, `und`, `en,zz`, `languages: [zz]`) once removed every document with exit 0 (issue 49
item 15, issue 50 part 3) and is refused in one line naming the nearest codes, before anything is
read or written; docs/filter.md lists every code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pretrainkit.cli import main
from pretrainkit.dataprep.classifiers.fasttext_model import model_labels
from pretrainkit.dataprep.filter.language import identify_many, model_path
from pretrainkit.dataprep.filter.language_codes import checked_codes, model_codes, nearest
from pretrainkit.dataprep.filter.steps import read_filters
from pretrainkit.dataprep.prepare.pipeline_file import read_pipeline
from pretrainkit.errors import UserError

ROOT = Path(__file__).resolve().parents[3]


def test_the_codes_are_the_models_labels_and_the_docs_list_them_all() -> None:
    codes = model_codes()
    assert len(codes) == 176 and {"en", "de", "no", "nn", "zh", "ceb", "sh"} <= set(codes)
    assert "und" not in codes and "nb" not in codes
    assert all(label.startswith("__label__") for label in model_labels(model_path()))
    assert {lang for lang, _ in identify_many(["Das ist ein deutscher Satz.", "This is English."])} <= set(codes)
    docs = (ROOT / "docs" / "filter.md").read_text()
    section = docs[docs.index("## Language codes") :]
    listed = re.search(r"```\n(.*?)```", section, re.S).group(1).split()
    assert listed == list(codes)


@pytest.mark.parametrize(
    ("code", "first"),
    [("eng", "en"), ("deu", "de"), ("ger", "de"), ("nb", "no"), ("fre", "fr"), ("jp", "ja"), ("zz", "zh")],
)
def test_the_nearest_code_comes_first(code, first) -> None:
    assert nearest(code)[0] == first and set(nearest(code)) <= set(model_codes())


@pytest.mark.parametrize(
    ("given", "refused", "hint"),
    [
        ("xx", "xx", "nearest: none"),
        ("eng", "eng", "nearest: en;"),
        ("und", "und", "'und' labels text without a letter, not a language"),
        ("en,zz", "zz", "nearest: zh, "),
        ("nb,nn", "nb", "nearest: no, "),
    ],
)
def test_an_unknown_code_is_one_line_naming_the_nearest_and_writes_nothing(
    tmp_path: Path, capsys, given, refused, hint
) -> None:
    corpus = tmp_path / "in.jsonl"
    corpus.write_text('{"text": "An English sentence, kept by en."}\n')
    with pytest.raises(SystemExit) as e:
        main(["filter", str(corpus), "-o", str(tmp_path / "out"), "--languages", given])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(
        f"ptk filter: error: argument --languages: language code '{refused}': the language model never outputs it ("
    ), err
    assert hint in err and "all 176: docs/filter.md, Language codes" in err, err
    assert not (tmp_path / "out").exists()


def test_known_codes_are_taken_sorted_once() -> None:
    assert checked_codes(["en", "ceb", "sh", "en"]) == ["ceb", "en", "sh"]


@pytest.mark.parametrize(
    ("read", "text", "where", "refused"),
    [
        (read_filters, "filters:\n  - language: {languages: [en, zz]}\n", "filters[0].language.languages", "zz"),
        (read_pipeline, "stages:\n  - filter: {languages: [eng]}\n", "stages[0].filter.languages", "eng"),
        (read_pipeline, "stages:\n  - paragraphs: {languages: [nb]}\n", "stages[0].paragraphs.languages", "nb"),
    ],
    ids=["filters-file", "pipeline-file", "pipeline-paragraphs"],
)
def test_a_files_unknown_code_is_one_line_naming_its_key(tmp_path: Path, read, text, where, refused) -> None:
    path = tmp_path / "file.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as e:
        read(path)
    assert str(e.value).startswith(
        f"{path}: {where}: language code '{refused}': the language model never outputs it (nearest: "
    )
