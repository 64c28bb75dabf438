"""A filter step that changes the text after the language step (C4's dropped lines, PII redaction)
leaves no stale label: the document is identified again on the text kept, and the language step's
rule holds for it. On real text: the Debian Administrator's Handbook in English and French."""

from __future__ import annotations

import json
from pathlib import Path

from fixtures.translated_pages import page
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.filter.c4 import C4Settings
from pretrainkit.dataprep.filter.language import identify
from pretrainkit.dataprep.filter.language_filter import LanguageSettings
from pretrainkit.dataprep.filter.pii import PIISettings
from pretrainkit.dataprep.filter.pipeline import FilterOptions, run_filter
from pretrainkit.dataprep.filter.steps import StepSpec

from .test_language_step import kept

# An English cookie banner over a French page: C4 drops its lines (policy phrases, "javascript").
BANNER = [
    "This website uses cookies to give you the best experience; see our cookie policy and terms of use.",
    "Please enable JavaScript in your browser to see the navigation menu and the search box of this site.",
    "By continuing to browse the site you agree to our use of cookies and to the privacy policy of this site.",
]


def _run(tmp_path: Path, records: list[dict], languages: list[str] | None) -> tuple[dict, Path]:
    corpus = tmp_path / "in.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    steps = (
        StepSpec("language", LanguageSettings(languages=languages)),
        StepSpec("c4", C4Settings(require_terminal_punctuation=False, min_sentences=None)),
        StepSpec("pii", PIISettings()),
    )
    out = tmp_path / ("out" if languages is None else "out-" + "-".join(languages))
    with LocalRunner(1) as runner:
        return run_filter([str(corpus)], out, FilterOptions(steps), runner), out


def _french_page_under_a_banner() -> dict:
    french = [p for p in page("fr") if p not in page("en")]
    text = "\n".join(BANNER + french)
    assert identify(text)[0] == "en"  # the label the banner earns the page before C4 drops it
    return {"id": "banner", "text": text}


def test_a_page_that_c4_leaves_french_is_removed_under_english(tmp_path: Path):
    english = {"id": "english", "text": "\n".join(page("en"))}  # kept: a run that keeps nothing fails
    stats, out = _run(tmp_path, [_french_page_under_a_banner(), english], ["en"])
    assert [r["id"] for r in kept(out)] == ["english"]
    [row] = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert (row["id"], row["filter"], row["value"], row["threshold"], row["lang"]) == (
        "banner",
        "language.languages",
        "fr",
        ["en"],
        "fr",
    )
    removed_bytes = stats["input_text_bytes"] - len(english["text"].encode())
    assert stats["removed_by_filter"] == {"language.languages": {"docs": 1, "bytes": removed_bytes}}


def test_without_languages_it_is_relabelled(tmp_path: Path):
    stats, out = _run(tmp_path, [_french_page_under_a_banner()], None)
    [record] = kept(out)
    assert not any(line in record["text"] for line in BANNER)
    assert (record["lang"], record["lang_score"]) == identify(record["text"]) and record["lang"] == "fr"
    assert stats["languages"] == {"fr": 1}


def test_a_change_that_leaves_the_language_keeps_the_document(tmp_path: Path):
    english = page("en")
    records = [
        {"id": "unchanged", "text": "\n".join(english)},
        {"id": "c4", "text": "\n".join([BANNER[1], *english])},
        {
            "id": "pii",
            "text": "\n".join([*english[:2], "Write to debian-l10n-english@lists.debian.org.", *english[2:]]),
        },
    ]
    stats, out = _run(tmp_path, records, ["en"])
    result = kept(out)
    assert [r["id"] for r in result] == ["unchanged", "c4", "pii"] and stats["removed_docs"] == 0
    assert result[1]["text"] == result[0]["text"] and "email@example.com" in result[2]["text"]
    for record in result:  # each labelled on its text as kept
        assert (record["lang"], record["lang_score"]) == identify(record["text"]) and record["lang"] == "en"
