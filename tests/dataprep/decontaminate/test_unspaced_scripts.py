"""`ptk decontaminate` on Japanese, Chinese and Thai text nobody here wrote (`texts/`, docs/tests.md):
an evaluation paragraph of the Debian Administrator's Handbook (Japanese, Chinese) or of apt's Thai
messages is found in a document that quotes it, also with its full-width and half-width forms swapped,
its punctuation removed or spaces put between its characters; 23 of its Chinese characters in a row
are found and 22 are not (the 13-word rule's strength); no other paragraph of the same chapters, of
the Debian Reference on the same topic or of apt's other messages is taken for it; items too short
are counted as such, and a 33-character Chinese sentence is not."""

from __future__ import annotations

import json
import re
import unicodedata
from pathlib import Path

import pytest

from pretrainkit.cli import main
from pretrainkit.dataprep.decontaminate.ngrams import code_point_classes, gram_hashes, normalized_words

TEXTS = Path(__file__).parent / "texts"


def lines(name: str) -> list[str]:
    return (TEXTS / name).read_text(encoding="utf-8").splitlines()


HANDBOOK_JA = lines("debian-handbook-apt.ja.txt")
HANDBOOK_ZH = lines("debian-handbook-apt.zh-cn.txt")
REFERENCE_JA = lines("debian-reference-ch02.ja.txt")
REFERENCE_ZH = lines("debian-reference-ch02.zh-cn.txt")
APT_TH = lines("apt.th.txt")

ITEMS = {
    "ja": HANDBOOK_JA[0],  # the .gz paragraph: 236 characters, Latin words among them
    "ja-short": HANDBOOK_JA[1],  # 1 番目のフィールドはソースタイプです。
    "zh": HANDBOOK_ZH[2],  # the sources.list paragraph
    "zh-sentence": HANDBOOK_ZH[0].split("。")[0] + "。",  # Debian and 33 Han characters
    "zh-short": HANDBOOK_ZH[1].split("。")[0] + "。",  # 源这个词可能会引起歧义。
    "th": APT_TH[2],  # "Some packages could not be installed. ..."
}

# half-width katakana for full-width (NFKC maps them back), voiced ones as base + voicing mark
_HALF_KANA = {unicodedata.normalize("NFKC", chr(c)): chr(c) for c in range(0xFF66, 0xFF9E)}
_HALF_KANA |= {"\u3099": "\uff9e", "\u309a": "\uff9f"}
_TO_ASCII = {"、": ",", "。": ".", "，": ",", "：": ":", "“": '"', "”": '"', "（": "(", "）": ")", "！": "!"}


def widths_swapped(text: str) -> str:
    """The text as another encoder or typist writes it: ASCII letters and digits full-width,
    katakana half-width, full-width punctuation ASCII and ASCII parentheses full-width."""
    out = []
    for c in unicodedata.normalize("NFD", text):
        if c.isascii() and c.isalnum():
            out.append(chr(ord(c) + 0xFEE0))
        elif c in "()":
            out.append(chr(ord(c) + 0xFEE0))
        else:
            out.append(_TO_ASCII.get(c) or _HALF_KANA.get(c) or c)
    return unicodedata.normalize("NFC", "".join(out))


def spaced(text: str) -> str:
    """A space between every two characters that are not ASCII (words of Latin letters stay whole)."""
    return re.sub(r"(?<=[^\x00-\x7f\s])(?=[^\x00-\x7f\s])", " ", text)


def unpunctuated(text: str) -> str:
    return "".join(c for c in text if unicodedata.category(c)[0] not in "PS")


def han_run(text: str, length: int) -> str:
    """The first `length` Han characters in a row of the text's normalized tokens."""
    run = re.search(rf"[\u4e00-\u9fff]{{{length}}}", "".join(t.decode() for t in normalized_words(text)))
    return run.group()


def corpus() -> list[tuple[str, str]]:
    """Every paragraph of the five texts as a document, and documents that quote the items."""
    docs = [
        (f"{name}:{i}", line)
        for name in sorted(p.name for p in TEXTS.glob("*.txt"))
        for i, line in enumerate(lines(name), 1)
    ]
    ja, zh, th = ITEMS["ja"], ITEMS["zh"], ITEMS["th"]
    docs += [
        ("ja-quoted", f"{REFERENCE_JA[0]}\n「{ja}」と書かれています。\n{REFERENCE_JA[1]}"),
        ("ja-widths", REFERENCE_JA[2] + widths_swapped(ja)),
        ("ja-spaced", spaced(ja)),
        ("ja-unpunctuated", REFERENCE_JA[3] + unpunctuated(ja)),
        ("zh-quoted", f"{REFERENCE_ZH[0]}\n手册中写道：“{zh}”\n{REFERENCE_ZH[1]}"),
        ("zh-widths", widths_swapped(zh) + REFERENCE_ZH[2]),
        ("zh-spaced", REFERENCE_ZH[3] + spaced(zh)),
        ("zh-23-characters", REFERENCE_ZH[4] + han_run(zh, 23) + REFERENCE_ZH[5]),
        ("zh-22-characters", REFERENCE_ZH[4] + han_run(zh, 22) + REFERENCE_ZH[5]),
        ("th-quoted", f"{APT_TH[0]} {th} {APT_TH[1]}"),
        ("th-spaced", spaced(th)),
    ]
    return docs


CONTAMINATED = {
    "apt.th.txt:3": "th",
    "debian-handbook-apt.ja.txt:1": "ja",
    "debian-handbook-apt.zh-cn.txt:1": "zh-sentence",
    "debian-handbook-apt.zh-cn.txt:3": "zh",
    "ja-quoted": "ja",
    "ja-widths": "ja",
    "ja-spaced": "ja",
    "ja-unpunctuated": "ja",
    "zh-quoted": "zh",
    "zh-widths": "zh",
    "zh-spaced": "zh",
    "zh-23-characters": "zh",
    "th-quoted": "th",
    "th-spaced": "th",
}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("unspaced")
    docs = corpus()
    with open(root / "corpus.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in docs)
    with open(root / "evals.jsonl", "w", encoding="utf-8") as f:
        f.writelines(json.dumps({"id": i, "text": t}, ensure_ascii=False) + "\n" for i, t in ITEMS.items())
    return root, docs


def test_quoted_items_are_found_in_every_form_and_nothing_else_is(run, capsys):
    root, docs = run
    out = root / "out"
    assert main(["decontaminate", str(root / "corpus.jsonl"), "--eval", str(root / "evals.jsonl"), "-o", str(out)]) == 0
    rows = [json.loads(line) for line in (out / "contaminated.jsonl").read_text(encoding="utf-8").splitlines()]
    assert {r["id"]: r["eval_id"] for r in rows} == CONTAMINATED
    # the row's n-gram reads as written: no space between two Chinese or Japanese characters
    by_id = {r["id"]: r for r in rows}
    assert by_id["zh-23-characters"]["ngram"] == han_run(ITEMS["zh"], 23)
    assert by_id["ja-quoted"]["ngram"].startswith("gz 拡張子は gzip ユーティリティで圧縮されたファイル")
    assert by_id["th-quoted"]["ngram"].replace(" ", "") in unpunctuated(ITEMS["th"]).replace(" ", "")
    stats = json.loads((out / "stats.json").read_text())
    assert (stats["input_docs"], stats["contaminated_docs"]) == (len(docs), len(CONTAMINATED))
    # the two short items (20 and 11 characters) and nothing else; every other item has n-grams
    counts = stats["eval_files"][str(root / "evals.jsonl")]
    assert counts == {
        "items": 6,
        "items_shorter_than_ngram": 2,
        "ngrams": sum(len(gram_hashes(t, 13)) for t in ITEMS.values()),
        "contaminated_docs": len(CONTAMINATED),
    }
    assert f"eval {root / 'evals.jsonl'}: 6 items (2 shorter than 13 words, never matched)" in capsys.readouterr().out
    # documents too short to hold a 13-word n-gram: the short Japanese item's paragraph, the 51-character
    # Japanese sentence (12 words' weight) and apt's four Thai messages of 78 to 89 characters
    assert stats["docs_shorter_than_ngram"] == 6


def test_the_ngram_is_as_long_as_thirteen_words_of_each_script():
    """23 Chinese characters, about 40 of Japanese, 78 Thai code points: the lengths the measured
    characters per English word give 13 words (scripts.py); fewer make no n-gram."""
    zh = han_run(ITEMS["zh"], 23)
    assert len(gram_hashes(zh, 13)) == 1 and len(gram_hashes(zh[:22], 13)) == 0
    thai = "".join(c for c in unicodedata.normalize("NFKC", ITEMS["th"]) if unicodedata.category(c)[0] in "LM")
    assert len(gram_hashes(thai[:78], 13)) == 1 and len(gram_hashes(thai[:77], 13)) == 0
    kana = "パッケージ" * 11  # 55 kana: 52 make an n-gram
    assert len(gram_hashes(kana[:52], 13)) == 1 and len(gram_hashes(kana[:51], 13)) == 0
    # a Latin word weighs a word in any script's company: 12 words and 3 kana are not enough, 12 and 2 Han are
    words = "the syntax of the last field depends on the structure of the"
    assert len(gram_hashes(words + " パッケ", 13)) == 0
    assert len(gram_hashes(words + " 软件", 13)) == 1


def test_width_punctuation_and_spacing_make_the_same_tokens():
    for item in (ITEMS["ja"], ITEMS["zh"], ITEMS["th"]):
        tokens = normalized_words(item)
        assert normalized_words(widths_swapped(item)) == tokens
        assert normalized_words(spaced(item)) == tokens
        assert normalized_words(unpunctuated(item)) == tokens
    # a Latin word against Japanese with and without a space is the same tokens
    assert (
        normalized_words("Debianシステム")
        == normalized_words("Debian システム")
        == [b"debian", *(c.encode() for c in "システム")]
    )


def test_the_unspaced_classes_are_unicodes_scripts():
    """Every letter, mark or digit of the unspaced scripts in Unicode's Scripts.txt (fontTools' copy)
    is a token of its own, and no other is but the kana marks of the Common and Inherited scripts."""
    from fontTools.unicodedata import script

    classes = code_point_classes()
    unspaced = {"Hani", "Hira", "Kana", "Thai", "Laoo", "Khmr", "Mymr", "Tale", "Talu", "Lana", "Tavt"}
    kana_marks = {0x3031, 0x3032, 0x3033, 0x3034, 0x3035, 0x303C, 0x3099, 0x309A, 0x30FC, 0xFF70, 0xFF9E, 0xFF9F}
    for cp in range(0x40000):
        c = chr(cp)
        if unicodedata.category(c)[0] not in "LMN":
            continue
        expected = script(c) in unspaced or cp in kana_marks
        assert (classes[cp] >= 3) == expected, f"U+{cp:04X} {unicodedata.name(c, '')} ({script(c)})"
