"""The default filters keep about as much of a text in every language as of its English original
(issue 50: within 15 points of English's keep rate), on translations nobody here wrote: this
machine's translated man pages (`fixtures.language_documents.parallel_man_pages`), each against its
English page, through `ptk filter`'s run with the language step labelling them."""

from __future__ import annotations

import json
from collections import defaultdict

import pytest

from fixtures import language_documents as ld
from fixtures.stage_parts import kept_records
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.filter.pipeline import FilterOptions, run_filter
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, read_filters

SHARE = 0.75  # of an English page's runs of prose that its translation holds translated
MIN_PAGES = 10  # a language is compared on this many pages or more (with fewer, one page is 10 points)
MOST_POINTS = 15  # a language's keep rate is this close to English's on the same pages


def test_every_language_keeps_about_what_english_keeps_of_the_same_pages(tmp_path):
    missing = ld.missing_sources()
    if missing:
        pytest.fail(f"the translated man pages this test reads are absent: {', '.join(missing)}")
    pairs = ld.parallel_man_pages(SHARE)
    records = {}
    for translated, english in pairs:
        records[f"{translated.script}:{translated.source}"] = translated.text
        records[f"en:{english.source}"] = english.text
    corpus = tmp_path / "pages.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in records.items()))
    with LocalRunner(1) as runner:
        run_filter([str(corpus)], tmp_path / "out", FilterOptions(tuple(read_filters(DEFAULT_FILTERS))), runner)
    kept = {r["id"] for r in kept_records(tmp_path / "out")}
    counts: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])  # pages, kept, English pages kept
    for translated, english in pairs:
        c = counts[translated.lang]
        c[0] += 1
        c[1] += f"{translated.script}:{translated.source}" in kept
        c[2] += f"en:{english.source}" in kept
    compared = {lang: c for lang, c in sorted(counts.items()) if c[0] >= MIN_PAGES}
    print("\nlanguage  pages  kept   English kept  difference (points)")
    for lang, (pages, k, e) in compared.items():
        print(f"{lang:8}  {pages:5}  {k / pages:6.1%} {e / pages:6.1%}  {100 * (k - e) / pages:+6.1f}")
    assert len(compared) >= 10 and "ja" in compared
    far = {
        lang: round(100 * (k - e) / n, 1) for lang, (n, k, e) in compared.items() if abs(k - e) / n * 100 > MOST_POINTS
    }
    assert not far, far
