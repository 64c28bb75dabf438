"""The language step in a run: every kept record labelled `lang` and `lang_score`; `--languages`
keeps those languages only, and a removed row says the language found. On real text: Reuters
articles (English) and the German and French man pages on this machine."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pytest

from pretrainkit.cli import main

MAN = Path("/usr/share/man")


def man_page_texts(lang: str, count: int) -> list[str]:
    """The prose of the first `count` man pages of section 1 in `lang`: roff requests and escapes dropped."""
    pages = sorted((MAN / lang / "man1").glob("*.1.gz"))
    assert len(pages) >= count, f"{MAN / lang / 'man1'}: the test needs {count} man pages there"
    texts = []
    for page in pages[:count]:
        roff = gzip.decompress(page.read_bytes()).decode("utf-8", "replace")
        lines = [line for line in roff.splitlines() if not line.startswith((".", "'"))]
        texts.append(re.sub(r"\\(\(..|f.|[-&e0 ]|.)", "", "\n".join(lines)))
    return texts


@pytest.fixture(scope="module")
def mixed_corpus(tmp_path_factory, reuters_docs) -> tuple[Path, dict[str, int]]:
    root = tmp_path_factory.mktemp("languages")
    records = [{"id": f"en-{i}", "text": t} for i, (_, t) in enumerate(reuters_docs[:200])]
    for lang in ("de", "fr"):
        records += [{"id": f"{lang}-{i}", "text": t} for i, t in enumerate(man_page_texts(lang, 30))]
    path = root / "mixed.jsonl"
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return path, {"en": 200, "de": 30, "fr": 30}


def only_language(tmp_path: Path) -> Path:
    path = tmp_path / "language.yaml"
    path.write_text("filters:\n  - language\n")
    return path


def kept(out: Path) -> list[dict]:
    import zstandard

    rows = []
    for part in sorted(out.glob("part-*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes())
        rows += [json.loads(line) for line in data.splitlines()]
    return rows


def test_every_kept_record_gets_its_language_and_score(tmp_path, mixed_corpus):
    path, sizes = mixed_corpus
    out = tmp_path / "out"
    assert main(["filter", str(path), "-o", str(out), "--filters", str(only_language(tmp_path))]) == 0
    records = kept(out)
    assert len(records) == sum(sizes.values())  # no languages chosen: all kept, labelled
    assert all(isinstance(r["lang"], str) and 0.0 <= r["lang_score"] <= 1.0 for r in records)
    found = {r["id"]: r["lang"] for r in records}
    for lang, size in sizes.items():  # the model's accuracy is its own module's test; here: labels are real
        assert sum(found[f"{lang}-{i}"] == lang for i in range(size)) >= 0.8 * size, lang
    stats = json.loads((out / "stats.json").read_text())
    assert sum(stats["languages"].values()) == len(records)


def test_languages_keeps_those_and_removed_rows_say_the_language_found(tmp_path, mixed_corpus, capsys):
    path, sizes = mixed_corpus
    out = tmp_path / "out"
    argv = ["filter", str(path), "-o", str(out), "--filters", str(only_language(tmp_path)), "--languages", "en"]
    assert main(argv) == 0
    summary = capsys.readouterr().out
    records = kept(out)
    removed = [json.loads(line) for line in (out / "removed.jsonl").read_text().splitlines()]
    assert len(records) + len(removed) == sum(sizes.values())
    assert records and all(r["lang"] == "en" for r in records)
    assert {r["filter"] for r in removed} == {"language.languages"}
    assert all(r["value"] == r["lang"] != "en" and r["threshold"] == ["en"] and "lang_score" in r for r in removed)
    assert {"de", "fr"} <= {r["lang"] for r in removed}
    stats = json.loads((out / "stats.json").read_text())
    assert stats["languages"] == {"en": len(records)}
    assert stats["removed_by_step"]["language"]["docs"] == len(removed)
    found = stats["identified_languages"]  # kept or removed: what each language's keep rate is of
    assert sum(found.values()) == sum(sizes.values()) and found["en"] == len(records)
    assert all(found[r["lang"]] >= sum(x["lang"] == r["lang"] for x in removed) for r in removed)
    rate = f"en {len(records):,} of {len(records):,} (100.0%)"
    assert re.search(rf"^  kept by language +{re.escape(rate)}, (de|fr) 0 of \d+ \(0\.0%\)", summary, re.M), summary


def test_a_bad_languages_value_is_one_line(tmp_path, mixed_corpus, capsys):
    path, _ = mixed_corpus
    with pytest.raises(SystemExit) as e:
        main(["filter", str(path), "-o", str(tmp_path / "out"), "--languages", "English"])
    assert e.value.code == 2
    assert "argument --languages: expected ISO 639-1 codes" in capsys.readouterr().err
