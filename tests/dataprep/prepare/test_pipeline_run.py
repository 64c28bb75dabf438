"""`ptk prepare --pipeline`: a crawl through every stage is its commands run one after another, the
same bytes for any --workers, and its funnel adds up against each stage's own stats."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
import zstandard

from fixtures.language_documents import man_page_documents
from fixtures.translated_pages import translated_page_records
from fixtures.warc import write_crawl
from pretrainkit.cli import main


def _tree(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _texts(folder: Path) -> list[str]:
    texts = []
    for part in sorted(folder.glob("part-*.jsonl.zst")):
        raw = zstandard.ZstdDecompressor().stream_reader(part.read_bytes())
        texts += [json.loads(line)["text"] for line in io.TextIOWrapper(raw, encoding="utf-8")]
    return texts


@pytest.fixture(scope="module")
def crawl_run(tmp_path_factory) -> tuple[Path, Path, Path]:
    """A crawl, each command run by hand over it (`by_hand/<stage>`), and the pipeline file doing the same."""
    root = tmp_path_factory.mktemp("crawl-pipeline")
    crawl = write_crawl(root / "crawl")
    hand = root / "by_hand"
    tok = root / "tok.json"
    # resiliparse alone leaves the pages' chrome, which the paragraphs stage then removes; and the
    # pipeline file's setting must give what the command's option gives
    assert main(["extract", str(crawl), "-o", str(hand / "extract"), "--extractor", "resiliparse"]) == 0
    assert main(["tokenizer", "train", str(hand / "extract"), "-o", str(tok), "--vocab-size", "500"]) == 0
    assert main(["filter", str(hand / "extract"), "-o", str(hand / "filter"), "--languages", "en"]) == 0
    # the pipeline gives its filter stage's languages to its paragraphs stage (docs/prepare.md)
    paragraphs = ["dedup", "--paragraphs", str(hand / "filter"), "-o", str(hand / "paragraphs"), "--languages", "en"]
    assert main(paragraphs) == 0
    assert main(["dedup", str(hand / "paragraphs"), "-o", str(hand / "dedup"), "--threshold", "0.7"]) == 0
    # an evaluation item copied from one kept page, lower-cased: decontamination must find it
    words = _texts(hand / "dedup")[0].split()[40:70]
    evals = root / "evals.jsonl"
    evals.write_text(json.dumps({"id": "q1", "text": " ".join(words).lower()}) + "\n")
    assert main(["decontaminate", str(hand / "dedup"), "--eval", str(evals), "-o", str(hand / "decontaminate")]) == 0
    tokenize = ["tokenize", str(hand / "decontaminate"), "--tokenizer", str(tok), "--shard-size", "4K"]
    assert main([*tokenize, "-o", str(hand / "shards")]) == 0
    pipeline = root / "pipeline.yaml"
    pipeline.write_text(
        "stages:\n"
        "  - extract: {extractor: resiliparse}\n"
        "  - filter: {languages: [en]}\n"
        "  - paragraphs\n"
        "  - dedup: {threshold: 0.7}\n"
        "  - decontaminate: {eval: [evals.jsonl]}\n"  # relative to the pipeline file
        "  - tokenize: {tokenizer: tok.json, shard_size: 4K}\n"
    )
    return crawl, hand, pipeline


@pytest.mark.slow
def test_a_crawl_pipeline_is_its_commands_one_after_another(crawl_run, tmp_path, capsys):
    crawl, hand, pipeline = crawl_run
    out = tmp_path / "prepared"
    capsys.readouterr()
    assert main(["prepare", str(crawl), "--pipeline", str(pipeline), "-o", str(out), "--workers", "2"]) == 0
    printed = capsys.readouterr().out
    for stage in ("extract", "filter", "paragraphs", "dedup", "decontaminate"):
        assert _tree(out / stage) == _tree(hand / stage), stage
        assert f"{stage} -> {out / stage}" in printed  # each stage's own summary, as it ends
    shards, by_hand = _tree(out / "shards"), _tree(hand / "shards")
    assert {k: v for k, v in shards.items() if k != "manifest.json"} == {
        k: v for k, v in by_hand.items() if k != "manifest.json"
    }
    manifest = json.loads(shards["manifest.json"])
    assert manifest["shards"] == json.loads(by_hand["manifest.json"])["shards"]
    assert manifest["urls"] is True  # the pages' urls, kept by every stage, are in the shards (ptk trace gives them)
    provenance = manifest["provenance"]
    assert [i["path"] for i in provenance["inputs"]] == ["a.warc.gz", "b.warc", "c.html"]  # the raw crawl
    assert [next(iter(s)) for s in provenance["pipeline"]] == [
        "extract",
        "filter",
        "paragraphs",
        "dedup",
        "decontaminate",
    ]

    result = json.loads((out / "stats.json").read_text())
    stages = ("extract", "filter", "paragraphs", "dedup", "decontaminate")
    stats = {s: json.loads((out / s / "stats.json").read_text()) for s in stages}
    rows = {r["name"]: r for r in result["funnel"]}
    assert rows["input"]["docs"] == stats["extract"]["records"]
    assert rows["extract"]["docs"] == stats["extract"]["kept"] == len(_texts(out / "extract"))
    assert rows["filter"]["docs"] == stats["filter"]["kept_docs"]
    steps = [r for r in result["funnel"] if "step" in r]
    assert [r["step"] for r in steps] == [next(iter(s)) for s in stats["filter"]["filters"]]
    assert sum(r["removed_docs"] for r in steps) == stats["filter"]["removed_docs"] == rows["filter"]["removed_docs"]
    assert steps[-1]["docs"] == rows["filter"]["docs"]
    assert rows["paragraphs"]["docs"] == stats["paragraphs"]["kept_docs"]
    assert rows["paragraphs"]["bytes"] == rows["filter"]["bytes"] - sum(
        stats["paragraphs"]["removed_text_bytes"].values()
    )
    assert stats["paragraphs"]["paragraphs_removed"] > 0  # the pages' chrome that extraction left
    assert rows["dedup"]["docs"] == stats["dedup"]["kept_docs"]
    assert rows["decontaminate"]["removed_docs"] == stats["decontaminate"]["contaminated_docs"] == 1
    assert rows["tokenize"]["docs"] == rows["decontaminate"]["docs"] == manifest["provenance"]["records"]["tokenized"]
    assert rows["tokenize"]["tokens"] == manifest["totals"]["tokens"]
    assert rows["filter"]["bytes"] == sum(len(t.encode()) for t in _texts(out / "filter"))
    before, after = result["profiles"]["input"], result["profiles"]["output"]
    assert before["docs"] == rows["extract"]["docs"] and after["docs"] == rows["decontaminate"]["docs"]
    assert sum(before["length_chars"]) == before["docs"] and after["languages"] == {"en": after["docs"]}
    for line in ("gopher_repetition", "decontaminate", "tokens"):
        assert line in printed
    assert (out / "funnel.png").read_bytes().startswith(b"\x89PNG")

    # another worker count, and a rerun over the finished folder: the same bytes, the picture too
    again = tmp_path / "again"
    assert main(["prepare", str(crawl), "--pipeline", str(pipeline), "-o", str(again), "--workers", "1"]) == 0
    assert _tree(again) == _tree(out)
    assert main(["prepare", str(crawl), "--pipeline", str(pipeline), "-o", str(again), "--workers", "2"]) == 0
    assert _tree(again) == _tree(out)


@pytest.mark.slow
def test_the_language_mix_before_and_after_a_language_filter(tmp_path, capsys):
    docs = man_page_documents()[::6]  # every language of the machine's man pages
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": d.text}) + "\n" for i, d in enumerate(docs)))
    (tmp_path / "language.yaml").write_text("filters:\n  - language: {languages: [de, fr]}\n")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - filter: {filters: language.yaml}\n  - dedup\n")
    out = tmp_path / "out"
    assert main(["prepare", str(corpus), "--pipeline", str(pipeline), "-o", str(out), "--workers", "2"]) == 0
    result = json.loads((out / "stats.json").read_text())
    before, after = result["profiles"]["input"]["languages"], result["profiles"]["output"]["languages"]
    assert sum(before.values()) == len(docs) and len(before) >= 8
    kept = json.loads((out / "filter" / "stats.json").read_text())["languages"]
    assert set(after) == set(kept) == {"de", "fr"}
    assert sum(after.values()) == result["funnel"][-1]["docs"]  # of what the last stage (dedup) kept
    assert all(after[lang] <= kept[lang] <= before[lang] for lang in after)
    assert result["funnel"][0]["docs"] == len(docs)
    # the summary's keep rate of each language: what the output has of what the input had
    shown = re.findall(r"^  kept by language +(.*)$", capsys.readouterr().out, re.M)[-1]  # the filter's comes first
    top = sorted(before, key=lambda lang: (-before[lang], -after.get(lang, 0), lang))[:6]
    cells = [
        f"{lang} {after.get(lang, 0):,} of {before[lang]:,} ({100 * after.get(lang, 0) / before[lang]:.1f}%)"
        for lang in top
    ]
    assert shown == ", ".join(cells) + f", {len(before) - 6} more"


def test_a_stage_that_keeps_nothing_ends_the_run_naming_it(tmp_path, capsys):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"Short note number {i}."}) + "\n" for i in range(5)))
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - filter\n  - dedup\n")
    assert main(["prepare", str(corpus), "--pipeline", str(pipeline), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (  # the filter stage's own error: which filters removed them
        f"ptk: error: {corpus}: the filters removed all 5 documents (gopher_quality.min_words: 5; each listed in "
        f"{tmp_path / 'out' / 'filter' / 'removed.jsonl'}); nothing kept"
    )
    assert not (tmp_path / "out" / "stats.json").exists()

    # a stage that ends without an error of its own but keeps nothing: prepare names it
    pipeline.write_text(f"stages:\n  - decontaminate: {{eval: [{corpus}], ngram: 3}}\n  - dedup\n")
    assert main(["prepare", str(corpus), "--pipeline", str(pipeline), "-o", str(tmp_path / "decon")]) == 2
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"ptk: error: {tmp_path / 'decon' / 'decontaminate'}: the decontaminate stage kept no documents "
        "(its stats.json says why); nothing is left for the dedup stage"
    )


def test_a_filter_stage_is_its_command_for_languages_in_any_order(tmp_path):
    docs = man_page_documents()[::6]
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps({"id": f"d{i}", "text": d.text}) + "\n" for i, d in enumerate(docs)))
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - filter: {languages: [fr, de, fr]}\n")
    assert (
        main(["prepare", str(corpus), "--pipeline", str(pipeline), "-o", str(tmp_path / "out"), "--workers", "1"]) == 0
    )
    assert main(["filter", str(corpus), "-o", str(tmp_path / "hand"), "--languages", "de,fr", "--workers", "1"]) == 0
    assert _tree(tmp_path / "out" / "filter") == _tree(tmp_path / "hand")


def test_the_filter_languages_hold_for_the_output_after_paragraphs(tmp_path):
    """Translated pages labelled English for their untranslated paragraphs: once paragraph dedup
    removes those, what is left is French and German, and the pipeline's output keeps English only."""
    corpus = tmp_path / "pages.jsonl"
    corpus.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in translated_page_records()))
    (tmp_path / "language.yaml").write_text("filters:\n  - language\n")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text("stages:\n  - filter: {filters: language.yaml, languages: [en]}\n  - paragraphs\n")
    out = tmp_path / "out"
    assert main(["prepare", str(corpus), "--pipeline", str(pipeline), "-o", str(out), "--workers", "1"]) == 0
    assert json.loads((out / "filter" / "stats.json").read_text())["languages"] == {"en": 3}  # the stale labels
    assert _texts(out / "paragraphs") == [translated_page_records()[0]["text"]]  # the English page alone
    removed = [json.loads(line) for line in (out / "paragraphs" / "removed.jsonl").read_text().splitlines()]
    assert [(r["id"], r["filter"], r["lang"]) for r in removed] == [
        ("fr", "paragraphs.languages", "fr"),
        ("de", "paragraphs.languages", "de"),
    ]
    result = json.loads((out / "stats.json").read_text())
    assert result["profiles"]["output"]["languages"] == {"en": 1} and result["funnel"][-1]["docs"] == 1
    # the commands one after another, the paragraphs stage given the filter's languages
    hand = tmp_path / "hand"
    filtering = ["filter", str(corpus), "-o", str(hand / "filter"), "--filters", str(tmp_path / "language.yaml")]
    assert main([*filtering, "--languages", "en", "--workers", "1"]) == 0
    paragraphs = ["dedup", "--paragraphs", str(hand / "filter"), "-o", str(hand / "paragraphs"), "--languages", "en"]
    assert main([*paragraphs, "--workers", "1"]) == 0
    for stage in ("filter", "paragraphs"):
        assert _tree(out / stage) == _tree(hand / stage), stage
