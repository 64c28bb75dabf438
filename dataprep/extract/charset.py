"""A page's bytes as text: which encoding, and how many bytes were not valid in it.

    text, invalid = decode_html(body, "iso-8859-1")   # the HTTP Content-Type's charset, or None

The encoding is, in order: a byte-order mark, the charset the HTTP header declares, the page's own
`<meta charset>` (or `http-equiv` Content-Type) within its first `META_SCAN_BYTES`, else a
detection: UTF-8 when the bytes are valid UTF-8, else uchardet's guess (resiliparse). As the WHATWG
encoding standard's sniffing says: a `<meta>` that declares UTF-16 (LE or BE) means UTF-8 (a page
whose bytes spell the tag in ASCII is no UTF-16), while an HTTP header's UTF-16 is taken as declared. Labels are
mapped as browsers map them (WHATWG: `iso-8859-1` and `us-ascii` mean windows-1252); a label no one
knows is passed over for the next source. Bytes invalid in the chosen encoding never fail a page:
each invalid sequence becomes U+FFFD and is counted.
"""

from __future__ import annotations

import codecs
import re

from resiliparse.parse.encoding import detect_encoding, map_encoding_to_html5

META_SCAN_BYTES = 4096  # where browsers look for a <meta> charset (the spec says 1024; pages overrun it)
_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([a-zA-Z0-9_.:-]+)""", re.IGNORECASE)
_BOMS = ((codecs.BOM_UTF8, "utf-8"), (codecs.BOM_UTF16_LE, "utf-16-le"), (codecs.BOM_UTF16_BE, "utf-16-be"))
_UTF8_LABELS = {"utf-8", "utf8", "unicode-1-1-utf-8", "unicode11utf8", "unicode20utf8", "x-unicode20utf8"}


def decode_html(data: bytes, declared: str | None) -> tuple[str, int]:
    """The page's text (a BOM removed) and the number of invalid byte sequences replaced in it."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode(data[len(bom) :], encoding)
    encoding = _known(declared) or _meta_encoding(data) or detected_encoding(data)
    return _decode(data, encoding)


def _meta_encoding(data: bytes) -> str | None:
    """The encoding the page's `<meta>` declares, UTF-16 read as UTF-8 (WHATWG's "prescan a byte stream")."""
    encoding = _known(meta_charset(data))
    return "utf-8" if encoding in ("utf-16-le", "utf-16-be") else encoding


def meta_charset(data: bytes) -> str | None:
    """The charset a `<meta>` tag near the start of the page names, if any."""
    found = _META_CHARSET.search(data, 0, META_SCAN_BYTES)
    return found.group(1).decode("ascii") if found else None


def detected_encoding(data: bytes) -> str:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return map_encoding_to_html5(detect_encoding(data))
    return "utf-8"


def _known(label: str | None) -> str | None:
    """The Python codec a charset label means, as browsers read it; None for no label or an unknown one."""
    if not label:
        return None
    label = label.strip().strip("\"'").lower()
    mapped = map_encoding_to_html5(label)  # which answers utf-8 for a label it does not know
    if mapped == "utf-8" and label not in _UTF8_LABELS:
        return None
    return mapped


def _decode(data: bytes, encoding: str) -> tuple[str, int]:
    try:
        return data.decode(encoding), 0
    except UnicodeDecodeError:
        text = data.decode(encoding, errors="replace")
        # one U+FFFD per invalid sequence; the page's own U+FFFD characters survive "ignore" too
        return text, text.count("\ufffd") - data.decode(encoding, errors="ignore").count("\ufffd")
