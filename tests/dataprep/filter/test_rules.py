"""Every filter rule at its threshold's edge, on crafted documents: just on the kept side of the
threshold the document stays, just past it the rule removes it, naming itself and the value."""

from __future__ import annotations

import dataclasses

import pytest

from pretrainkit.dataprep.filter.c4 import C4, C4Settings
from pretrainkit.dataprep.filter.fineweb import FineWebQuality, FineWebSettings
from pretrainkit.dataprep.filter.gopher import (
    GopherQuality,
    GopherQualitySettings,
    GopherRepetition,
    GopherRepetitionSettings,
)
from pretrainkit.dataprep.filter.length import MinLength, MinLengthSettings
from pretrainkit.dataprep.filter.rules import Doc, Removal


def only(settings_class, **chosen):
    """The settings with every rule off but `chosen` (the others' thresholds None, switches False)."""
    off = {}
    for f in dataclasses.fields(settings_class):
        if f.name in chosen:
            continue
        if f.type.endswith("| None"):
            off[f.name] = None
        elif f.type == "bool":
            off[f.name] = False
        elif f.type.startswith("dict"):
            off[f.name] = {}
    return settings_class(**off, **chosen)


def verdict(step, text: str):
    removal = step.check(Doc(text))
    return None if removal is None else (removal.filter, removal.value)


def words(n: int, length: int = 5) -> list[str]:
    """n distinct words of `length` letters."""
    out = []
    for i in range(n):
        w, k = "", i
        for _ in range(length):
            w += "abcdefghijklmnopqrstuvwxyz"[k % 26]
            k //= 26
        out.append(w)
    return out


# ---- Gopher quality (Rae et al. 2021, Appendix A) ----


def gq(**chosen) -> GopherQuality:
    return GopherQuality(only(GopherQualitySettings, **chosen))


def test_word_count_between_50_and_100000():
    step = gq(min_words=50, max_words=100_000)
    assert verdict(step, " ".join(words(50))) is None
    assert verdict(step, " ".join(words(49))) == ("gopher_quality.min_words", 49)
    assert verdict(step, "word " * 100_000) is None
    assert verdict(step, "word " * 100_001) == ("gopher_quality.max_words", 100_001)


def test_words_are_runs_of_letters_and_digits_punctuation_is_no_word():
    step = gq(min_words=4)
    assert verdict(step, "don't stop: well-known U.S. 3.14 -- !!! ...") is None  # don't, stop, well-known, U.S, 3.14
    assert verdict(step, "don't -- !!! ... ??? stop ### well-known") == ("gopher_quality.min_words", 3)


def test_mean_word_length_between_3_and_10():
    step = gq(min_mean_word_length=3, max_mean_word_length=10)
    assert verdict(step, " ".join(words(100, 3))) is None
    assert verdict(step, " ".join(words(99, 3) + ["ab"])) == ("gopher_quality.min_mean_word_length", 2.99)
    assert verdict(step, " ".join(words(100, 10))) is None
    assert verdict(step, " ".join(words(99, 10) + ["a" * 11])) == ("gopher_quality.max_mean_word_length", 10.01)


@pytest.mark.parametrize("symbol", ["#", "...", "…"])
def test_hash_or_ellipsis_to_word_ratio_at_most_0_1(symbol):
    step = gq(max_symbol_word_ratio=0.1)
    base = " ".join(words(100))
    assert verdict(step, base + (" " + symbol) * 10) is None
    assert verdict(step, base + (" " + symbol) * 11) == ("gopher_quality.max_symbol_word_ratio", 0.11)


def test_at_most_90_percent_of_lines_start_with_a_bullet():
    step = gq(max_bullet_lines_ratio=0.9)
    plain = [f"line {w}" for w in words(100)]
    ninety = "\n".join([f"• {x}" for x in plain[:45]] + [f"  - {x}" for x in plain[45:90]] + plain[90:])
    assert verdict(step, ninety) is None
    more = "\n".join([f"• {x}" for x in plain[:91]] + plain[91:])
    assert verdict(step, more) == ("gopher_quality.max_bullet_lines_ratio", 0.91)


def test_at_most_30_percent_of_lines_end_with_an_ellipsis():
    step = gq(max_ellipsis_lines_ratio=0.3)
    plain = [f"line {w}" for w in words(10)]
    assert verdict(step, "\n".join([x + "..." for x in plain[:2]] + [plain[2] + "…"] + plain[3:])) is None
    assert verdict(step, "\n".join([x + "..." for x in plain[:4]] + plain[4:])) == (
        "gopher_quality.max_ellipsis_lines_ratio",
        0.4,
    )


def test_at_least_80_percent_of_words_have_a_letter():
    step = gq(min_alpha_words_ratio=0.8)
    assert verdict(step, " ".join(words(80) + [str(i) for i in range(20)])) is None
    assert verdict(step, " ".join(words(79) + [str(i) for i in range(21)])) == (
        "gopher_quality.min_alpha_words_ratio",
        0.79,
    )
    assert verdict(step, " ".join(words(80) + ["3.14", "2_000"] * 10)) is None  # "a1"-like words have a letter


def test_at_least_two_distinct_stop_words_in_any_letter_case():
    step = gq(min_stop_words=2)
    assert verdict(step, "The cat AND the dog") is None
    assert verdict(step, "the the THE cat") == ("gopher_quality.min_stop_words", 1)
    assert verdict(step, "theory within bethe") == ("gopher_quality.min_stop_words", 0)  # whole words only


# ---- Gopher repetition (Rae et al. 2021, Table A1) ----


def gr(**chosen) -> GopherRepetition:
    return GopherRepetition(only(GopherRepetitionSettings, **chosen))


@pytest.mark.parametrize("unit,sep", [("line", "\n"), ("paragraph", "\n\n")])
def test_duplicate_line_and_paragraph_fraction_at_most_0_3(unit, sep):
    step = gr(**{f"max_dup_{unit}_fraction": 0.3})
    distinct = [f"{w} here" for w in words(10)]
    assert verdict(step, sep.join(["same text"] * 4 + distinct[:6])) is None  # 3 repeats of 10
    assert verdict(step, sep.join(["same text"] * 5 + distinct[:5])) == (
        f"gopher_repetition.max_dup_{unit}_fraction",
        0.4,
    )


@pytest.mark.parametrize("unit,sep", [("line", "\n"), ("paragraph", "\n\n")])
def test_duplicate_line_and_paragraph_characters_at_most_0_2(unit, sep):
    step = gr(**{f"max_dup_{unit}_char_fraction": 0.2})
    repeat = "x" * 20

    def text(filler: int) -> str:
        return sep.join([repeat, repeat, "y" * filler])

    keep = text(100 - 40 - 2 * len(sep))  # 20 repeated characters of 100
    assert len(keep) == 100 and verdict(step, keep) is None
    assert verdict(step, text(100 - 40 - 2 * len(sep) - 1)) == (
        f"gopher_repetition.max_dup_{unit}_char_fraction",
        0.202,
    )


@pytest.mark.parametrize("n,most", [(2, 0.20), (3, 0.18), (4, 0.16)])
def test_top_ngram_characters(n, most):
    step = gr(max_top_ngram_char_fraction={n: most})
    gram = " ".join(words(n, 2))  # n words of 2 letters: 3n - 1 characters
    occurrences = 5
    text_chars = (3 * n - 1) * occurrences / most  # where the fraction is `most` exactly

    def text(total: int) -> str:
        body = " ".join([gram] * occurrences) + " "
        return body + "z" * (total - len(body))

    assert verdict(step, text(int(-(-text_chars // 1)))) is None
    removal = verdict(step, text(int(text_chars) - 1))
    assert removal[0] == f"gopher_repetition.max_top_ngram_char_fraction.{n}" and removal[1] > most


def test_a_top_ngram_seen_once_is_no_repetition():
    assert verdict(gr(max_top_ngram_char_fraction={2: 0.2}), "just two") is None


@pytest.mark.parametrize("n,most", [(5, 0.15), (6, 0.14), (7, 0.13), (8, 0.12), (9, 0.11), (10, 0.10)])
def test_duplicate_ngram_characters(n, most):
    step = gr(max_dup_ngram_char_fraction={n: most})
    run = " ".join(words(n, 2))  # repeated once: its 2n characters (spaces not counted) are duplicate

    def text(total: int) -> str:
        body = run + " " + run + " "
        return body + "z" * (total - len(body))

    least = 2 * n / most  # the text length at which the fraction is `most`
    assert verdict(step, text(int(-(-least // 1)))) is None
    removal = verdict(step, text(int(least) - 1 if least == int(least) else int(least)))
    assert removal[0] == f"gopher_repetition.max_dup_ngram_char_fraction.{n}" and removal[1] > most


def test_a_repeated_run_counts_its_words_once():
    # "a b c d e" four times: the repeats after the first are 3 x 5 words; overlapping 5-grams inside them
    # are not counted again (datatrove's scan): 15 words of 2 letters = 30 of the 59 + filler characters
    step = gr(max_dup_ngram_char_fraction={5: 0.5})
    run = " ".join(words(5, 2))
    body = " ".join([run] * 4)
    assert len(body) == 59
    assert verdict(step, body + " " + "z" * 0) is None  # 30 / 60 = 0.5
    assert verdict(step, body) == ("gopher_repetition.max_dup_ngram_char_fraction.5", 0.5085)


# ---- C4 (Raffel et al. 2020, Section 2.2) ----


def c4(**chosen) -> C4:
    return C4(only(C4Settings, **chosen))


def cleaned(step, text: str) -> str | tuple:
    doc = Doc(text)
    removal = step.check(doc)
    return doc.text if removal is None else (removal.filter, removal.value)


def test_c4_keeps_lines_ending_in_a_terminal_mark():
    step = c4(require_terminal_punctuation=True)
    text = 'Ends with a period.\nNo mark here\nA question?\nShout!\nHe said "yes"\nAn ellipsis...\nA quote said "so."'
    # an end quotation mark is one of C4's marks ("a period, exclamation mark, question mark, or end quotation mark")
    assert cleaned(step, text) == 'Ends with a period.\nA question?\nShout!\nHe said "yes"\nA quote said "so."'


def test_c4_keeps_lines_of_three_words_or_more():
    assert cleaned(c4(min_words_per_line=3), "Two words.\nThree words here.\n  one  ") == "Three words here."


def test_c4_drops_lines_with_a_word_over_1000_characters():
    text = f"short line here.\nword {'a' * 1000} ok.\nword {'b' * 1001} long."
    assert cleaned(c4(max_word_length=1000), text) == f"short line here.\nword {'a' * 1000} ok."


def test_c4_cuts_citation_marks():
    assert cleaned(c4(remove_citations=True), "A fact[1] stated[edit] here[citation needed].") == "A fact stated here."


def test_c4_drops_javascript_and_policy_lines():
    text = (
        "Please enable JavaScript to view.\nReal content stays.\nRead our Privacy Policy now.\nThis site uses cookies."
    )
    assert cleaned(c4(drop_javascript_lines=True, drop_policy_lines=True), text) == "Real content stays."


def test_c4_removes_pages_with_lorem_ipsum_or_a_curly_bracket():
    assert cleaned(c4(lorem_ipsum=True), "Fine line.\nLorem ipsum dolor sit amet.") == ("c4.lorem_ipsum", "lorem ipsum")
    assert cleaned(c4(curly_bracket=True), "Fine line.\nint main() { return 0; }") == ("c4.curly_bracket", "{")


def test_c4_removes_pages_of_fewer_than_5_sentences():
    step = c4(min_sentences=5)
    assert cleaned(step, "One. Two. Three.\nFour!\nFive?") == "One. Two. Three.\nFour!\nFive?"
    assert cleaned(step, "One. Two. Three.\nFour!") == ("c4.min_sentences", 4)


def test_c4_as_fineweb_ran_it_keeps_lines_without_a_mark():
    step = C4(C4Settings(require_terminal_punctuation=False))
    text = "A heading without a mark\n" + " ".join(f"Sentence number {w}." for w in words(5))
    assert cleaned(step, text) == text


# ---- FineWeb (Penedo et al. 2024, Section 3) ----


def fw(**chosen) -> FineWebQuality:
    return FineWebQuality(only(FineWebSettings, **chosen))


def test_fineweb_at_least_12_percent_of_lines_end_in_punctuation():
    step = fw(min_line_punct_ratio=0.12)
    plain = [f"line {w}" for w in words(100)]
    assert verdict(step, "\n".join([x + "." for x in plain[:12]] + plain[12:])) is None
    assert verdict(step, "\n".join([x + "!" for x in plain[:11]] + plain[11:] + ["", "  "])) == (
        "fineweb_quality.min_line_punct_ratio",
        0.11,
    )


def test_fineweb_at_most_67_percent_of_lines_of_30_characters_or_fewer():
    step = fw(max_short_line_ratio=0.67, short_line_length=30)
    short, long = "s" * 30, "l" * 31
    assert verdict(step, "\n".join([short] * 67 + [long] * 33)) is None
    assert verdict(step, "\n".join([short] * 68 + [long] * 32)) == ("fineweb_quality.max_short_line_ratio", 0.68)


def test_fineweb_duplicated_line_characters_at_most_0_1():
    step = fw(max_dup_line_char_fraction=0.1)
    repeat = "r" * 10

    def text(filler: int) -> str:
        return "\n".join([repeat, repeat, "f" * filler])

    assert verdict(step, text(80)) is None  # 10 duplicated of 100 characters (line feeds not counted)
    assert verdict(step, text(79)) == ("fineweb_quality.max_dup_line_char_fraction", 0.101)


# ---- minimum length ----


def test_min_length_in_characters_and_words():
    assert verdict(MinLength(MinLengthSettings(min_chars=10)), "  0123456789 ") is None
    assert verdict(MinLength(MinLengthSettings(min_chars=10)), "012345678") == ("min_length.min_chars", 9)
    step = MinLength(MinLengthSettings(min_chars=None, min_words=3))
    assert verdict(step, "one two three") is None
    assert verdict(step, "one two, !") == ("min_length.min_words", 2)


def test_the_compiled_word_scan_finds_what_its_regular_expression_does(reuters_docs, license_docs):
    import re

    from pretrainkit.dataprep.filter.kernels import scan_words

    pattern = re.compile(r"\w+(?:['’.\-]\w+)*")
    texts = [t for _, t in reuters_docs[:300] + license_docs[:50]] + ["naïve café Ünïcode – ½ ² x_y İstanbul ΣΊΣΥΦΟΣ"]
    for text in texts:
        found = pattern.findall(text)
        w = scan_words(text)
        assert list(w.lengths) == [len(x) for x in found]
        assert list(w.alpha) == [any(c.isalpha() for c in x) for x in found]
        lower = {}  # equal lower-case words hash equal, and unequal ones apart
        for word, h in zip(found, w.lower_hashes.tolist()):
            assert lower.setdefault(h, word.lower()) == word.lower()


# ---- what the steps share ----


def test_a_doc_keeps_its_code_points_and_words_until_its_text_changes():
    from pretrainkit.dataprep.filter.kernels import code_points

    doc = Doc("one two three")
    words = doc.words()
    assert words.count == 3 and doc.words() is words
    doc.text = doc.text  # a step that changed nothing may assign the text it read
    assert doc.words() is words
    doc.text = "four five"  # PII's way: the new text alone
    assert doc.code_points().tolist() == [ord(c) for c in "four five"] and doc.words().count == 2
    kept = code_points("six seven eight")
    doc.set_text("six seven eight", kept)  # C4's way: with the code points it made
    assert doc.code_points() is kept and doc.words().count == 3
    assert MinLength(MinLengthSettings(min_chars=None, min_words=4)).check(doc) == Removal("min_length.min_words", 3, 4)
