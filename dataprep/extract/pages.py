"""Which WARC records are web pages, and the HTML of each: the rest skipped, by a reason that is counted.

    found = page_of(record)   # Page(id, url, date, html, charset), Skipped(reason) or Broken(reason)

A page is a `response` record holding an HTTP response (`Content-Type: application/http`) with a
2xx status whose payload is HTML: the HTTP Content-Type says text/html or application/xhtml+xml;
without one, the WARC's identified payload type does, or the payload starts like HTML. Every other
record is `Skipped` for its kind (`request record`, `metadata record`, `warcinfo record`,
`revisit record`, ...), its status class (`redirect (3xx)`, `client error (4xx)`, `server error
(5xx)`, `informational (1xx)`), its type (`not HTML`) or its size (`block over 64 MiB`). A
response whose HTTP part cannot be read, or whose payload cannot be decoded (chunked framing, gzip
or deflate content encoding, which some crawlers store as sent; Common Crawl stores payloads
decoded) is `Broken`: a rejected row. So is one that decodes to more than `MAX_DECODED_BYTES` (a
3.4 KB gzip bomb inflated to 512 MB): it is inflated no further than that.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass

from pretrainkit.dataprep.extract.warc import MAX_BLOCK_BYTES, WarcRecord

HTML_TYPES = ("text/html", "application/xhtml+xml")
STATUS_CLASSES = {1: "informational (1xx)", 3: "redirect (3xx)", 4: "client error (4xx)", 5: "server error (5xx)"}
_STATUS_LINE = re.compile(rb"HTTP/\d(?:\.\d)? +(\d{3})")
_LOOKS_HTML = re.compile(rb"\s*(?:<!--.*?-->\s*)*<(?:!doctype\s+html|html|head|body)", re.IGNORECASE | re.DOTALL)
SNIFF_BYTES = 1024
MAX_DECODED_BYTES = MAX_BLOCK_BYTES  # a payload's gzip or deflate inflates to no more than a block may hold
_CHUNK_SIZE = re.compile(rb"[0-9a-fA-F]+")


@dataclass(frozen=True)
class Page:
    id: str
    url: str | None
    date: str | None
    html: bytes
    charset: str | None  # as the HTTP Content-Type declares it


@dataclass(frozen=True)
class Skipped:
    reason: str


@dataclass(frozen=True)
class Broken:
    reason: str


class _TooLarge(Exception):
    """A content encoding that inflates past MAX_DECODED_BYTES (the message names it)."""


def page_of(record: WarcRecord) -> Page | Skipped | Broken:
    headers = record.headers
    kind = headers.get("warc-type", "").lower() or "untyped"
    if kind != "response":
        return Skipped(f"{kind} record")
    if not headers.get("content-type", "").lower().startswith("application/http"):
        return Skipped("not an HTTP response")
    if record.block is None:
        return Skipped(f"block over {MAX_BLOCK_BYTES >> 20} MiB")
    head, sep, payload = record.block.partition(b"\r\n\r\n")
    if not sep:
        head, sep, payload = record.block.partition(b"\n\n")
    status = _STATUS_LINE.match(head)
    if not sep or not status:
        return Broken(f"malformed HTTP response (it begins {record.block[:30]!r})")
    code = int(status.group(1))
    if code // 100 != 2:
        return Skipped(STATUS_CLASSES.get(code // 100, "not an HTTP status (not 1xx-5xx)"))
    http = _http_headers(head)
    mime, charset = _content_type(http.get("content-type", ""))
    if not mime:
        mime = headers.get("warc-identified-payload-type", "").lower()
    if mime and mime not in HTML_TYPES:
        return Skipped("not HTML")
    try:
        html = _decoded(payload, http)
    except _TooLarge as e:
        return Broken(f"payload over {MAX_DECODED_BYTES >> 20} MiB once decoded ({e})")
    except (ValueError, zlib.error) as e:
        return Broken(f"payload cannot be decoded: {e}")
    if not mime and not _LOOKS_HTML.match(html, 0, SNIFF_BYTES):
        return Skipped("not HTML")
    record_id = headers.get("warc-record-id") or f"offset {record.offset}"
    return Page(record_id, headers.get("warc-target-uri"), headers.get("warc-date"), html, charset)


def _http_headers(head: bytes) -> dict[str, str]:
    """Header names lower-cased; the first of a repeated one kept."""
    fields: dict[str, str] = {}
    for line in head.decode("latin-1").splitlines()[1:]:
        name, colon, value = line.partition(":")
        if colon:
            fields.setdefault(name.strip().lower(), value.strip())
    return fields


def _content_type(value: str) -> tuple[str, str | None]:
    """(mime type lower-cased, charset or None) of a Content-Type value."""
    mime, _, params = value.partition(";")
    found = re.search(r"charset\s*=\s*[\"']?([^\"';\s]+)", params, re.IGNORECASE)
    return mime.strip().lower(), found.group(1) if found else None


def _decoded(payload: bytes, http: dict[str, str]) -> bytes:
    """The payload without its transfer framing and content encoding, as a browser would get it."""
    if "chunked" in http.get("transfer-encoding", "").lower():
        payload = _unchunked(payload)
    encoding = http.get("content-encoding", "identity").lower()
    if encoding in ("gzip", "x-gzip"):
        return _inflated(payload, zlib.MAX_WBITS | 16, encoding)
    if encoding == "deflate":
        return _inflated(payload, zlib.MAX_WBITS, encoding)
    if encoding not in ("identity", ""):
        raise ValueError(f"unsupported content encoding {encoding!r}")
    return payload


def _inflated(payload: bytes, wbits: int, encoding: str) -> bytes:
    """What zlib.decompress gives, inflated no further than MAX_DECODED_BYTES (`_TooLarge` past it)."""
    inflater = zlib.decompressobj(wbits)
    data = inflater.decompress(payload, MAX_DECODED_BYTES + 1)
    if len(data) > MAX_DECODED_BYTES:
        raise _TooLarge(f"{encoding} content encoding")
    if not inflater.eof:
        raise zlib.error("Error -5 while decompressing data: incomplete or truncated stream")
    return data


def _unchunked(payload: bytes) -> bytes:
    parts, at = [], 0
    while True:
        end = payload.find(b"\r\n", at)
        if end < 0:
            raise ValueError("chunked payload ends inside a chunk size line")
        digits = payload[at:end].split(b";")[0].strip()
        if not _CHUNK_SIZE.fullmatch(digits):  # int() takes "-6", and a negative size read on for ever
            raise ValueError(f"chunk size {digits[:20]!r} is not a hex number")
        size = int(digits, 16)
        if size == 0:
            return b"".join(parts)
        parts.append(payload[end + 2 : end + 2 + size])
        if len(parts[-1]) < size:
            raise ValueError("chunked payload ends inside a chunk")
        at = end + 2 + size + 2
