"""The scripts written without spaces between words, and how much of a word one of their characters is.

    UNSPACED_SCRIPTS          # (name, units per character, code point ranges), for `ngrams`' class table
    WORD_UNITS                # what a word of a spaced script weighs: 12 units

In Chinese, Japanese, Thai, Lao, Khmer and Myanmar text nothing marks where a word ends, so each
character of these scripts is a token of its own, and an n-gram is measured in units of weight
instead of in tokens: a word of a spaced script (Latin, Cyrillic, Greek, Hangul, Devanagari, ...)
weighs WORD_UNITS, a character of an unspaced script the units below, chosen so that a character
weighs what it holds of an English word's content. Measured on parallel text nobody here wrote
(`docs/decontaminate.md`: the numbers): the Debian Reference in English, Japanese and both Chinese
scripts (79,573 English words) and the message catalogues of this machine's packages (each English
message against its translation), counting English words against the characters of the translation
that replace them:
- Chinese: 1.75-1.79 Han characters per English word (both sources, both scripts) -> 7 units
  (12 / 7 = 1.71 characters a word: a 13-word n-gram is 23 characters);
- Japanese: 2.94-3.13 characters per word, about a quarter of them Han: with Han at 7, kana at 3 units
  (4 a word) puts both sources within 5% of their English word counts (a 13-word n-gram is about
  40 characters of Japanese prose);
- Thai 5.64, Myanmar 5.98 code points per word (vowel signs and tone marks are code points of their
  own) -> 2 units (6 a word: 78 code points); Lao, Khmer and the Tai scripts are written the same
  way (abugidas without spaces between words) and weigh the same.

The ranges are Unicode's Scripts.txt (18.0) blocks of these scripts, with the Common and
Inherited characters that only kana use (the prolonged sound mark ー, the voicing marks, the
iteration marks); a character of the ranges that is punctuation, a symbol or unassigned is not a
token (`ngrams` deletes categories P and S before these classes).
"""

from __future__ import annotations

WORD_UNITS = 12

HAN_RANGES = (
    (0x3005, 0x3005),  # 々, the ideographic iteration mark
    (0x3007, 0x3007),  # 〇
    (0x3021, 0x3029),  # Hangzhou numerals
    (0x3038, 0x303B),
    (0x3400, 0x4DBF),  # extension A
    (0x4E00, 0x9FFF),  # CJK unified ideographs
    (0xF900, 0xFAFF),  # compatibility ideographs (NFKC maps most to the unified ones)
    (0x16FE2, 0x16FE3),
    (0x16FF0, 0x16FF1),
    (0x20000, 0x323AF),  # extensions B to H, compatibility supplement
)
KANA_RANGES = (
    (0x3031, 0x3035),  # vertical kana repeat marks
    (0x303C, 0x303C),  # 〼, the masu mark
    (0x3041, 0x309F),  # hiragana, with the voicing marks
    (0x30A0, 0x30FF),  # katakana, with ー
    (0x31F0, 0x31FF),  # katakana phonetic extensions
    (0xFF66, 0xFF9F),  # half-width katakana (NFKC makes them full-width first)
    (0x1AFF0, 0x1AFFF),
    (0x1B000, 0x1B16F),  # kana supplement and extensions, small kana
)
SOUTHEAST_ASIAN_RANGES = (
    (0x0E01, 0x0E5B),  # Thai
    (0x0E80, 0x0EFF),  # Lao
    (0x1000, 0x109F),  # Myanmar
    (0x1780, 0x17FF),  # Khmer
    (0x19E0, 0x19FF),  # Khmer symbols
    (0x1950, 0x197F),  # Tai Le
    (0x1980, 0x19DF),  # New Tai Lue
    (0x1A20, 0x1AAF),  # Tai Tham
    (0xA9E0, 0xA9FF),  # Myanmar extended B
    (0xAA60, 0xAA7F),  # Myanmar extended A
    (0xAA80, 0xAADF),  # Tai Viet
)

UNSPACED_SCRIPTS: tuple[tuple[str, int, tuple[tuple[int, int], ...]], ...] = (
    ("han", 7, HAN_RANGES),
    ("kana", 3, KANA_RANGES),
    ("southeast asian", 2, SOUTHEAST_ASIAN_RANGES),
)
