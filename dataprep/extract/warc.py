"""WARC records read from a `.warc` or `.warc.gz` file, each with the file offset where it starts;
what cannot be read is said, never skipped in silence.

    for item in read_warc("CC-MAIN-...-00000.warc.gz"):
        ...  # WarcRecord(offset, headers, block) or Unreadable(offset, reason)
    read_warc(path, start, end)   # the records whose gzip member starts in [start, end): a part of a big file

Compression is told by the file's first bytes (gzip's magic), not its name. A gzipped WARC is read
as one stream across its gzip members; a record's offset is that of the member its first byte is in
(Common Crawl writes one member per record, so it is the record's own offset, the one its index
gives). Nothing is held beyond one record's block, and no block longer than `MAX_BLOCK_BYTES`
(Common Crawl cuts its payloads at 1 MiB; another crawl may hold videos).

A part of a `.warc.gz` (`start`, `end`) begins at the first gzip member at or after `start` that
holds the start of a WARC record (gzip's magic, then data that inflates to `WARC/`), and holds every
record whose member starts before `end`, the last one read on past `end`; so parts cut anywhere
give, one after the other, the records of the whole file.

Why not fastwarc or warcio: a WARC.gz cut at each byte inside a record, they raised an error for 20
(fastwarc 2.0.1) and 232 (warcio 1.8.1) of 1,191 cuts, and for the others ended the file without a
word, the cut record handed out short or left out (docs/extract.md). Here:
- a file that ends inside a record (its headers, its block, or its gzip member) gives an
  `Unreadable` row at that record's offset saying so, after every record before it;
- corrupt gzip data gives one at the member's offset, and reading goes on at the next member that
  holds a record's start (the row says where);
- a record without a WARC version line, without headers or without a valid Content-Length gives
  one at its offset, and reading goes on at the next gzip member (in an uncompressed file no
  next record can be found: the rest of the file is given up, and the row says so);
- an empty file gives one row, at offset 0.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO

GZIP_MAGIC = b"\x1f\x8b"
READ_BYTES = 1 << 16  # compressed bytes read at a time
MAX_HEADER_LINE = 1 << 16  # a longer WARC header line is no header
REST_LOST = "; the rest of the file cannot be read"
GZIP_MEMBER = b"\x1f\x8b\x08"  # gzip's magic and its one compression method (deflate)
SCAN_BYTES = 1 << 20  # read at a time when looking for a member's start
PROBE_BYTES = 4096  # of a member, inflated to see whether it starts a record
MAX_BLOCK_BYTES = 64 << 20  # a longer block (a video, an archive: no web page) is passed over, not held


@dataclass
class WarcRecord:
    offset: int
    headers: dict[str, str]  # names lower-cased; a repeated name keeps its first value
    block: bytes | None  # None: longer than MAX_BLOCK_BYTES, passed over unread


@dataclass
class Unreadable:
    offset: int
    reason: str


class _Framing(Exception):
    """The bytes at a record's start are no WARC record."""


class _Stream:
    """The file's bytes, gunzipped when compressed, read forward; knows where each gzip member began."""

    def __init__(self, fh: BinaryIO, start: int = 0):
        fh.seek(start)
        self.fh = fh
        self.buf = bytearray()
        self.pos = 0  # stream position of buf[0]
        head = fh.read(len(GZIP_MAGIC))
        self.gzip = head == GZIP_MAGIC
        self.pending = head  # file bytes not yet decompressed
        self.file_pos = start  # file offset of pending[0]
        self.members: list[tuple[int, int]] = [(0, start)]  # (stream position, file offset) of each member start
        self.corrupt_at: int | None = None  # the file offset of a member whose data is corrupt
        self.inflater = zlib.decompressobj(zlib.MAX_WBITS | 16) if self.gzip else None
        self.ended = False
        self.error: str | None = None  # why the stream ended early, when it did

    def _fill(self) -> bool:
        """More bytes into the buffer; False at the end of the stream (an early end sets `error`)."""
        if self.ended:
            return False
        chunk = self.pending or self.fh.read(READ_BYTES)
        self.pending = b""
        if not chunk:
            self.ended = True
            if self.gzip and not self.inflater.eof:  # a member begun is never empty: it got bytes
                self.error = "the file ends inside a gzip member"
            return False
        if not self.gzip:
            self.buf += chunk
            self.file_pos += len(chunk)
            return True
        try:
            self.buf += self.inflater.decompress(chunk)
        except zlib.error as e:
            self.ended, self.error = True, f"corrupt gzip data ({e})"
            self.corrupt_at = self.members[-1][1]
            return False
        if self.inflater.eof:
            used = len(chunk) - len(self.inflater.unused_data)
            self.file_pos += used
            self.pending = self.inflater.unused_data
            if not self.pending:
                self.pending = self.fh.read(READ_BYTES)
            if self.pending:  # another member follows
                self.members.append((self.pos + len(self.buf), self.file_pos))
                self.inflater = zlib.decompressobj(zlib.MAX_WBITS | 16)
        else:
            self.file_pos += len(chunk)
        return True

    def offset_of(self, stream_pos: int) -> int:
        """The file offset of the record starting at `stream_pos` (its gzip member's, when compressed)."""
        if not self.gzip:
            return self.members[0][1] + stream_pos
        return next(offset for start, offset in reversed(self.members) if start <= stream_pos)

    def readline(self) -> bytes | None:
        """The next line with its line feed (None at the end of the stream); `_Framing` past MAX_HEADER_LINE."""
        searched = 0
        while (end := self.buf.find(b"\n", searched)) < 0:
            searched = len(self.buf)
            if searched > MAX_HEADER_LINE:
                raise _Framing("a WARC header line longer than 64 KiB")
            if not self._fill():
                return self.read(len(self.buf)) or None
        return self.read(end + 1)

    def discard(self, n: int) -> int:
        """Pass over the next `n` bytes, a buffer at a time; returns how many there were."""
        left = n
        while left and (self.buf or self._fill()):
            left -= len(self.read(min(left, len(self.buf))))
        return n - left

    def read(self, n: int) -> bytes:
        """The next `n` bytes, fewer at the end of the stream."""
        while len(self.buf) < n and self._fill():
            pass
        data = bytes(self.buf[:n])
        del self.buf[:n]
        self.pos += len(data)
        return data

    def skip_to_next_member(self, after: int) -> bool:
        """Pass over the rest of the gzip member holding stream position `after`; False when none follows."""
        while not any(start > after for start, _ in self.members):
            self.read(len(self.buf))
            if not self._fill():
                return False
        self.read(next(start for start, _ in self.members if start > after) - self.pos)
        return True


def read_warc(path: str, start: int = 0, end: int | None = None) -> Iterator[WarcRecord | Unreadable]:
    """Every record of the file (of its part from `start` to `end`) in order, and an `Unreadable` row
    for whatever could not be read."""
    with open(path, "rb") as fh:
        position = start if start == 0 else member_at_or_after(fh, start, end)
        first = True
        while position is not None:
            stream = _Stream(fh, position)
            yield from _records(stream, end, empty_file=first and start == 0)
            first = False
            position = None
            if stream.corrupt_at is not None:  # inflate again from the next member that starts a record
                position = member_at_or_after(fh, stream.corrupt_at + 1, end)


def member_at_or_after(fh: BinaryIO, start: int, end: int | None) -> int | None:
    """The offset of the first gzip member in [start, end) whose data inflates to a WARC record's start."""
    at = start
    while end is None or at < end:
        fh.seek(at)
        block = fh.read(SCAN_BYTES + len(GZIP_MEMBER) - 1)
        found = block.find(GZIP_MEMBER)
        if found < 0:
            if len(block) < SCAN_BYTES + len(GZIP_MEMBER) - 1:
                return None
            at += SCAN_BYTES
            continue
        at += found
        if end is not None and at >= end:
            return None
        fh.seek(at)
        try:
            head = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(fh.read(PROBE_BYTES), 64)
        except zlib.error:
            head = b""
        if head.lstrip(b"\r\n").startswith(b"WARC/"):
            return at
        at += 1
    return None


def _records(stream: _Stream, end: int | None, empty_file: bool) -> Iterator[WarcRecord | Unreadable]:
    """The records of one stretch of the file read as one stream, up to the first whose member starts at `end`."""
    if not stream.gzip:  # named .warc.gz but not compressed: no later part finds a member, so this part is all
        end = None
    rest = (
        REST_LOST if end is None else f"; the file cannot be read from here to the first record at or after byte {end}"
    )
    seen = False
    while True:
        line = stream.readline()
        while line is not None and not line.strip():  # the blank lines that end each record
            line = stream.readline()
        if line is None:
            if stream.error:
                yield Unreadable(stream.offset_of(stream.pos), f"{stream.error}{_lost(stream, rest)}")
            elif not seen and empty_file:
                yield Unreadable(0, "empty file: no WARC records")
            return
        seen = True
        begins = stream.pos - len(line)
        offset = stream.offset_of(begins)
        if end is not None and offset >= end:  # the next part's
            return
        try:
            record = _record(stream, line, offset)
        except _Framing as e:
            if stream.error:  # what looks like a broken record is one cut short
                yield Unreadable(offset, f"record cut short: {stream.error}{_lost(stream, rest)}")
                return
            if stream.gzip and stream.skip_to_next_member(begins):
                yield Unreadable(offset, f"not a WARC record: {e}")
                continue
            yield Unreadable(offset, f"not a WARC record: {e}{rest}")
            return
        if isinstance(record, Unreadable):  # cut short: nothing follows it
            yield Unreadable(record.offset, f"{record.reason}{_lost(stream, rest)}")
            return
        yield record


def _lost(stream: _Stream, rest: str) -> str:
    """What a row says is lost: the rest of the file, but after corrupt gzip data only up to the next member."""
    return (
        "; reading goes on at the next gzip member that starts a record, if any"
        if stream.corrupt_at is not None
        else rest
    )


def _record(stream: _Stream, line: bytes, offset: int) -> WarcRecord | Unreadable:
    """The record whose first line is `line` (the rest read from the stream)."""
    if not line.endswith(b"\n"):  # the file's last bytes: a line cut short
        return _cut(stream, offset, "inside its headers")
    if not line.startswith(b"WARC/"):
        raise _Framing(f"no WARC version line (it begins {line[:20]!r})")
    headers: dict[str, str] = {}
    while (line := stream.readline()) is not None and line.endswith(b"\n") and line.strip():
        name, colon, value = line.decode("utf-8", "replace").partition(":")
        if not colon:
            raise _Framing(f"a header line without a colon ({line[:40]!r})")
        headers.setdefault(name.strip().lower(), value.strip())
    if line is None or not line.endswith(b"\n"):
        return _cut(stream, offset, "inside its headers")
    if not headers:
        raise _Framing("a record without headers")
    length = headers.get("content-length", "")
    if not length.isdigit():
        raise _Framing(f"no valid Content-Length (got {length[:40]!r})")
    size = int(length)
    block = stream.read(size) if size <= MAX_BLOCK_BYTES else None
    got = len(block) if block is not None else stream.discard(size)
    if got < size:
        return _cut(stream, offset, f"inside its block: {got} of its {length} bytes")
    return WarcRecord(offset, headers, block)


def _cut(stream: _Stream, offset: int, where: str) -> Unreadable:
    """A record cut short (what is lost after it, the caller adds)."""
    return Unreadable(offset, f"record cut short ({where}): {stream.error or 'the file ends'}")
