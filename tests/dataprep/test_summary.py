"""`keep_rates`: each language's documents kept of those found in it, the most common first."""

from __future__ import annotations

from pretrainkit.dataprep.summary import keep_rates


def test_keep_rates_most_found_first_with_a_count_of_the_rest() -> None:
    found = {"en": 1000, "de": 40, "fr": 40, "ja": 3}
    kept = {"en": 812, "fr": 10, "xx": 2}  # xx: a text that changed language on the way
    assert keep_rates(found, kept, shown_languages=3) == (
        "en 812 of 1,000 (81.2%), fr 10 of 40 (25.0%), de 0 of 40 (0.0%), 2 more"
    )
    assert keep_rates(found, kept).endswith("ja 0 of 3 (0.0%), xx 2 of 0")
