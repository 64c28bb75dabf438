"""The language codes a user may keep: those the language model outputs, and for any other code the
nearest of them.

    codes = model_codes()                   # ('af', 'als', 'am', ..., 'zh'): lid.176's 176 labels
    checked_codes(["en", "de"])             # ['de', 'en']
    checked_codes(["eng"])                  # UserError: language code 'eng': the language model never
                                            # outputs it (nearest: en); ...
    p.add_argument("--languages", type=language_list, help=LANGUAGES_HELP)   # en,de -> ['de', 'en']

A code the model never outputs (`eng`, `nb`, `xx`, `und`) would remove every document and exit 0
(issue 49 item 15): it is refused in one line with the nearest codes it does output. The codes are
read from the shipped model file itself (its dictionary's labels, `fasttext_model.model_labels`),
so they are what `identify` can answer, never a list typed by hand. The nearest: a three-letter ISO
639-2/639-3 code of a language the model names by its ISO 639-1 code (`eng` -> `en`, `deu` and
`ger` -> `de`), the Norwegian written forms (`nb` -> `no`), the withdrawn ISO 639-1 codes (`iw` ->
`he`), a country's code (`jp` -> `ja`), then the codes spelled most alike (difflib).
"""

from __future__ import annotations

import argparse
import difflib
import functools
from collections.abc import Iterable

from pretrainkit.dataprep.classifiers.fasttext_model import model_labels
from pretrainkit.dataprep.filter.language import LABEL_PREFIX, UNDETERMINED, model_path
from pretrainkit.errors import UserError, quoted

CODES_DOC = "docs/filter.md, Language codes"  # where every code is listed
LANGUAGES_HELP = (
    "codes the language model outputs, ISO 639-1 where the language has one (its 3-letter code otherwise: ceb, "
    f"yue); a code it never outputs is refused with the nearest it does (all of them: {CODES_DOC})"
)
NEAREST = 3  # codes suggested at most

# Codes for a language the model names otherwise: ISO 639-2 (bibliographic and terminological) and
# 639-3 codes of the languages with an ISO 639-1 code most often asked for, the Norwegian written
# forms, the ISO 639-1 codes since withdrawn, and country codes taken for language codes (cz, jp).
# A target the model lacks is never suggested.
OTHER_NAMES = {
    "ara": "ar", "ben": "bn", "bul": "bg", "cat": "ca", "ces": "cs", "cze": "cs", "chi": "zh", "zho": "zh",
    "cmn": "zh", "dan": "da", "deu": "de", "ger": "de", "ell": "el", "gre": "el", "eng": "en", "est": "et",
    "fas": "fa", "per": "fa", "fin": "fi", "fra": "fr", "fre": "fr", "heb": "he", "hin": "hi", "hrv": "hr",
    "hun": "hu", "ind": "id", "ita": "it", "jpn": "ja", "kor": "ko", "lav": "lv", "lit": "lt", "msa": "ms",
    "may": "ms", "nld": "nl", "dut": "nl", "nor": "no", "nob": "no", "nno": "nn", "nb": "no", "pol": "pl",
    "por": "pt", "ron": "ro", "rum": "ro", "rus": "ru", "slk": "sk", "slo": "sk", "slv": "sl", "spa": "es",
    "srp": "sr", "swe": "sv", "tha": "th", "tur": "tr", "ukr": "uk", "urd": "ur", "vie": "vi", "iw": "he",
    "in": "id", "ji": "yi", "jw": "jv", "mo": "ro",
    "cn": "zh", "cz": "cs", "dk": "da", "gr": "el", "jp": "ja", "kr": "ko", "se": "sv", "ua": "uk",
}  # fmt: skip


@functools.cache
def model_codes() -> tuple[str, ...]:
    """Every code the language model outputs, sorted (a UserError where its package is not installed)."""
    return tuple(sorted(label.removeprefix(LABEL_PREFIX) for label in model_labels(model_path())))


def nearest(code: str) -> list[str]:
    """The codes the model outputs that `code` most likely means, best first (at most NEAREST)."""
    codes = model_codes()
    named = OTHER_NAMES.get(code.lower())
    alike = difflib.get_close_matches(code.lower(), codes, n=NEAREST, cutoff=0.5)
    return list(dict.fromkeys(([named] if named in codes else []) + alike))[:NEAREST]


def checked_codes(codes: Iterable[str]) -> list[str]:
    """`codes`, sorted and each once, or a UserError in one line for the first the model never outputs."""
    known = set(model_codes())
    for code in codes:
        if code not in known:
            if code == UNDETERMINED[0]:  # what `identify` answers for text without a letter
                hint = f"{quoted(code)} labels text without a letter, not a language"
            else:
                hint = f"nearest: {', '.join(nearest(code)) or 'none'}"
            raise UserError(
                f"language code {quoted(code)}: the language model never outputs it ({hint}; "
                f"all {len(known)}: {CODES_DOC})"
            )
    return sorted(set(codes))


def language_list(value: str) -> list[str]:
    """A `--languages` value (`en,de`) as checked codes; a bad one is argparse's one-line error."""
    codes = [c.strip() for c in value.split(",") if c.strip()]
    # ISO 639-1, or the model's three-letter code for a language without one (ceb)
    bad = [c for c in codes if not (len(c) in (2, 3) and c.isascii() and c.isalpha() and c.islower())]
    if not codes or bad:
        raise argparse.ArgumentTypeError(f"expected ISO 639-1 codes separated by commas (e.g. en,de), got {value!r}")
    try:
        return checked_codes(codes)
    except UserError as e:  # a code the model never outputs, said as argparse says a bad value
        raise argparse.ArgumentTypeError(str(e)) from None
