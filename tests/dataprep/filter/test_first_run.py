"""A machine's first `ptk filter` says that it compiles the filters' kernels (they take ~20 s, which
would otherwise pass in silence); a second run, with the kernels in the cache, says nothing of it."""

from __future__ import annotations

from fixtures.first_run import run_twice_from_an_empty_cache

MESSAGE = "filter: compiling kernels (first run only"


def test_a_first_run_says_it_compiles_a_second_run_is_silent(tmp_path, reuters_docs):
    from fixtures.corpora import write_jsonl

    src = write_jsonl(reuters_docs[:50], tmp_path / "in" / "r.jsonl")
    filters = tmp_path / "filters.yaml"
    filters.write_text("filters:\n  - min_length: {min_words: 20}\n")  # one small kernel: the words
    runs = run_twice_from_an_empty_cache(["filter", str(src), "--filters", str(filters), "--workers", "1"], tmp_path)
    assert MESSAGE in runs[0].stderr and MESSAGE not in runs[1].stderr
    assert (tmp_path / "out0" / "stats.json").read_bytes() == (tmp_path / "out1" / "stats.json").read_bytes()
