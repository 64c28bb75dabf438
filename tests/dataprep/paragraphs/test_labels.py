"""Paragraph dedup leaves no stale language label: a translated page that loses its untranslated
English paragraphs is identified again on what is left, relabelled, or removed under --languages."""

from __future__ import annotations

import json
from pathlib import Path

import zstandard

from fixtures.translated_pages import page, translated_page_records
from pretrainkit.cli import main
from pretrainkit.dataprep.filter.language import identify

from .test_paragraphs import kept_records, rows, run


def _write(records: list[dict], path: Path) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    return path


def _labelled(tmp_path: Path) -> Path:
    """The three pages as `ptk filter` labels them (each page's own text is English at its head)."""
    records = translated_page_records()
    for r in records:
        r["lang"], r["lang_score"] = identify(r["text"])
    assert [r["lang"] for r in records] == ["en", "en", "en"]  # the translations too: the stale label to come
    return _write(records, tmp_path / "pages.jsonl")


def _kept_lines(out: Path) -> list[bytes]:
    raw = b"".join(zstandard.ZstdDecompressor().decompressobj().decompress(p.read_bytes()) for p in out.glob("part-*"))
    return raw.splitlines()


def test_a_page_left_in_another_language_is_removed_under_languages(tmp_path: Path):
    corpus = _labelled(tmp_path)
    stats = run([corpus], tmp_path / "out", languages=["en"])
    assert _kept_lines(tmp_path / "out") == corpus.read_bytes().splitlines()[:1]  # the English page, its bytes
    removed = rows(tmp_path / "out" / "removed.jsonl")
    assert [(r["id"], r["filter"], r["value"], r["threshold"], r["lang"]) for r in removed] == [
        ("fr", "paragraphs.languages", "fr", ["en"], "fr"),
        ("de", "paragraphs.languages", "de", ["en"], "de"),
    ]
    assert stats["removed_by_reason"]["paragraphs.languages"]["docs"] == stats["removed_docs"] == 2
    assert stats["removed_by_reason"]["paragraphs.min_length"]["docs"] == 0
    assert stats["options"]["languages"] == ["en"] and stats["kept_docs"] == 1


def test_without_languages_a_changed_page_is_relabelled(tmp_path: Path):
    corpus = _labelled(tmp_path)
    records = [json.loads(line) for line in corpus.read_text().splitlines()]
    del records[2]["lang"], records[2]["lang_score"]  # a record without labels
    _write(records, corpus)
    stats = run([corpus], tmp_path / "out")
    kept = kept_records(tmp_path / "out")
    assert [(r["id"], r.get("lang")) for r in kept] == [("en", "en"), ("fr", "fr"), ("de", None)]
    assert "\n".join(page("en")) not in kept[1]["text"]
    assert (kept[1]["lang"], kept[1]["lang_score"]) == identify(kept[1]["text"])  # of the text kept
    assert kept[2] == {"id": "de", "text": kept[2]["text"]}  # gains no label
    assert _kept_lines(tmp_path / "out")[0] == corpus.read_bytes().splitlines()[0]  # unchanged: the same bytes
    assert stats["relabelled_docs"] == 1 and stats["removed_docs"] == 0
    assert "languages" not in stats["options"] and list(stats["removed_by_reason"]) == ["paragraphs.min_length"]


def test_the_command_takes_languages(tmp_path: Path, capsys):
    corpus = _labelled(tmp_path)
    out = tmp_path / "out"
    assert main(["dedup", "--paragraphs", str(corpus), "-o", str(out), "--languages", "en", "--workers", "1"]) == 0
    printed = capsys.readouterr().out
    assert "not in --languages en" in printed
    assert [r["id"] for r in kept_records(out)] == ["en"]
    assert main(["dedup", str(corpus), "-o", str(tmp_path / "docs"), "--languages", "en"]) == 2
    assert capsys.readouterr().err.strip() == "ptk: error: --languages needs --paragraphs (it is paragraph dedup's)"
