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
- a record's block ends where a record can end: its Content-Length bytes, then blank lines, then the
  stream's end, a gzip member's start or `WARC/`; a block never runs into a later gzip member that
  starts a record. A Content-Length that says otherwise (too long: it would swallow the records
  after it; too short) gives a `wrong Content-Length` row at the record's offset. In an uncompressed
  file the block's end is looked at before the block is read: a lie costs a bounded read, not one
  of the rest of the file (2,000 records each claiming it read 1.7 GB of an 860 KB file);
- a record without a WARC version line, without headers, without a valid Content-Length (ASCII
  digits) or with a wrong one gives one row at its offset, and reading goes on at the next record:
  in a `.warc.gz` the next gzip member (a member read into holds no later record), in an
  uncompressed file the first `\r\n\r\nWARC/` after the record's first byte (a payload holding
  those bytes, an archived WARC, would be read as records);
- an empty file gives one row, at offset 0.

Blank lines between records are passed over a buffer at a time (50 MB of line feeds took 51 s a line
at a time).
"""

from __future__ import annotations

import os
import re
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
HEAD_BYTES = 64  # of a gzip member, inflated: enough to see blank lines, then whether a record starts there
RECORD_START = b"\r\n\r\nWARC/"  # in an uncompressed file, where reading goes on after a broken record
_CONTENT_LENGTH = re.compile(r"[0-9]{1,20}")  # ASCII digits (str.isdigit() takes '²'); 20 pass any file's size
_NOT_BLANK = re.compile(rb"[^ \t\n\r\x0b\x0c]")  # a byte bytes.strip() keeps


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


class _WrongLength(Exception):
    """A record's Content-Length does not end it where a record can end (the message is the whole reason)."""


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
        self.size = None if self.gzip else os.fstat(fh.fileno()).st_size
        self.resume_at: int | None = None  # uncompressed: the file offset where reading goes on after a broken record

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

    def read(self, n: int) -> bytes:
        """The next `n` bytes, fewer at the end of the stream."""
        while len(self.buf) < n and self._fill():
            pass
        data = bytes(self.buf[:n])
        self._drop(len(data))
        return data

    def _drop(self, n: int) -> None:
        """Pass over the next `n` bytes, all in the buffer."""
        del self.buf[:n]
        self.pos += n

    def peek(self, n: int) -> bytes:
        """The next `n` bytes (fewer at the end of the stream), left to be read."""
        while len(self.buf) < n and self._fill():
            pass
        return bytes(self.buf[:n])

    def bytes_left(self) -> int | None:
        """How many bytes the stream has left: known in an uncompressed file only."""
        return None if self.size is None else self.size - self.offset_of(self.pos)

    def skip_blank_lines(self) -> None:
        """Pass over the lines that are blank (whitespace only), a buffer at a time. The blanks that begin
        the next line with a byte that is not blank stay, and so do a stream's last blanks (no line feed)."""
        while True:
            found = _NOT_BLANK.search(self.buf)
            if found:
                self._drop(self.buf.rfind(b"\n", 0, found.start()) + 1)
                return
            self._drop(self.buf.rfind(b"\n") + 1)
            if len(self.buf) > MAX_HEADER_LINE or not self._fill():
                return

    def at_end(self) -> bool:
        """Whether nothing but blanks is left (after `skip_blank_lines`)."""
        return (self.ended or not self.peek(1)) and not _NOT_BLANK.search(self.buf)

    def at_record_end(self) -> bool:
        """Whether a record's block may end here: blank lines, then the stream's end, a gzip member's start
        or `WARC/`. The blank lines are passed over."""
        self.skip_blank_lines()
        if self.peek(len(b"WARC/")) == b"WARC/" or self._member_after(self.pos - 1) == self.pos:
            return True
        return self.at_end()

    def read_block(self, n: int, hold: bool) -> tuple[bytes | None, int, bool]:
        """The next `n` bytes (None when not `hold`: passed over a buffer at a time), how many there were,
        and whether they stopped short at a gzip member that starts a WARC record (a block never runs
        into one). Fewer at the end of the stream, too."""
        begin, end = self.pos, self.pos + n
        held = bytearray()
        later = len(self.members)  # the first member that starts after `begin`, once there is one
        while later and self.members[later - 1][0] > begin:
            later -= 1
        into_next = False
        while self.pos < end and (self.buf or self._fill()):
            while later < len(self.members) and self.members[later][0] < end:
                if self._starts_record(self.members[later][0]):
                    end, into_next = self.members[later][0], True
                    break
                later += 1
            take = min(end - self.pos, len(self.buf))
            if hold:
                held += self.buf[:take]
            self._drop(take)
        return (bytes(held) if hold else None), self.pos - begin, into_next

    def _starts_record(self, at: int) -> bool:
        """Whether the stream's bytes from position `at` (not read yet) begin a WARC record, blank lines aside."""
        while len(self.buf) - (at - self.pos) < HEAD_BYTES and self._fill():
            pass
        head = self.buf[at - self.pos : at - self.pos + HEAD_BYTES]
        return head.lstrip(b"\r\n").startswith(b"WARC/")

    def _member_after(self, after: int) -> int | None:
        """The stream position of the first gzip member that starts after `after`, among those begun."""
        found = None
        for start, _ in reversed(self.members):
            if start <= after:
                break
            found = start
        return found

    def skip_to_next_member(self, after: int) -> bool:
        """Pass over the rest of the gzip member holding stream position `after` (and of any member read
        into already); False when none follows."""
        while (start := self._member_after(max(after, self.pos - 1))) is None:
            self._drop(len(self.buf))
            if not self._fill():
                return False
        self._drop(start - self.pos)
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
            position = stream.resume_at  # uncompressed: the next record after a broken one
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
            head = zlib.decompressobj(zlib.MAX_WBITS | 16).decompress(fh.read(PROBE_BYTES), HEAD_BYTES)
        except zlib.error:
            head = b""
        if head.lstrip(b"\r\n").startswith(b"WARC/"):
            return at
        at += 1
    return None


def next_record_at(fh: BinaryIO, start: int) -> int | None:
    """The offset of the first `WARC/` at or after `start` that follows a blank line (`RECORD_START`), in an
    uncompressed file."""
    at, size = start, PROBE_BYTES  # the next record is most often near: read little, then more
    while True:
        fh.seek(at)
        block = fh.read(size + len(RECORD_START) - 1)
        found = block.find(RECORD_START)
        if found >= 0:
            return at + found + len(RECORD_START) - len(b"WARC/")
        if len(block) < size + len(RECORD_START) - 1:
            return None
        at, size = at + size, min(2 * size, SCAN_BYTES)


def _after_blanks(fh: BinaryIO, at: int) -> bytes:
    """The first 20 bytes after the blank bytes from file offset `at` (b"" at the file's end), in an
    uncompressed file; its position is left where it was."""
    back = fh.tell()
    try:
        while True:
            fh.seek(at)
            chunk = fh.read(PROBE_BYTES)
            found = _NOT_BLANK.search(chunk)
            if found:
                fh.seek(at + found.start())
                return fh.read(20)
            if len(chunk) < PROBE_BYTES:
                return b""
            at += len(chunk)
    finally:
        fh.seek(back)


def _records(stream: _Stream, end: int | None, empty_file: bool) -> Iterator[WarcRecord | Unreadable]:
    """The records of one stretch of the file read as one stream, up to the first whose member starts at
    `end` (in an uncompressed file, up to a broken record: `stream.resume_at` says where the next is)."""
    if not stream.gzip:  # named .warc.gz but not compressed: no later part finds a member, so this part is all
        end = None
    rest = (
        REST_LOST if end is None else f"; the file cannot be read from here to the first record at or after byte {end}"
    )
    seen = False
    while True:
        stream.skip_blank_lines()  # those that end each record
        if stream.at_end():
            if stream.error:
                yield Unreadable(stream.offset_of(stream.pos), f"{stream.error}{_lost(stream, rest)}")
            elif not seen and empty_file:
                yield Unreadable(0, "empty file: no WARC records")
            return
        seen = True
        begins = stream.pos
        offset = stream.offset_of(begins)
        if end is not None and offset >= end:  # the next part's
            return
        try:
            record = _record(stream, offset)
        except _Framing as e:
            reason = f"not a WARC record: {e}"
        except _WrongLength as e:
            reason = str(e)
        else:
            if isinstance(record, Unreadable):  # cut short: nothing follows it
                yield Unreadable(record.offset, f"{record.reason}{_lost(stream, rest)}")
                return
            yield record
            continue
        if stream.error:  # what looks like a broken record is one cut short
            yield Unreadable(offset, f"record cut short: {stream.error}{_lost(stream, rest)}")
            return
        if not _resume(stream, begins):
            yield Unreadable(offset, f"{reason}{rest}")
            return
        yield Unreadable(offset, reason)
        if stream.resume_at is not None:
            return


def _resume(stream: _Stream, begins: int) -> bool:
    """Go on at the next record after the broken one at stream position `begins`: the next gzip member,
    or (uncompressed) the next `RECORD_START`, which `read_warc` reads from; False when there is none."""
    if stream.gzip:
        return stream.skip_to_next_member(begins)
    stream.resume_at = next_record_at(stream.fh, stream.offset_of(begins) + 1)
    return stream.resume_at is not None


def _lost(stream: _Stream, rest: str) -> str:
    """What a row says is lost: the rest of the file, but after corrupt gzip data only up to the next member."""
    return (
        "; reading goes on at the next gzip member that starts a record, if any"
        if stream.corrupt_at is not None
        else rest
    )


def _record(stream: _Stream, offset: int) -> WarcRecord | Unreadable:
    """The record starting at the stream's position (`offset` in the file); `_Framing` or `_WrongLength`
    when it cannot be read, an `Unreadable` when the stream ends inside it."""
    line = stream.readline()
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
    if not _CONTENT_LENGTH.fullmatch(length):
        raise _Framing(f"no valid Content-Length (got {length[:40]!r})")
    size = int(length)
    wrong = f"wrong Content-Length ({length})"
    left = stream.bytes_left()
    if left is not None:  # uncompressed: the block's end is checked before the block is read (records each
        # claiming the rest of the file would read it once each)
        if size > left:  # a lie, if a record follows; else the file was cut
            if next_record_at(stream.fh, offset + 1) is not None:
                raise _WrongLength(f"{wrong}: longer than the rest of the file, which holds a later record")
            return _cut(stream, offset, f"inside its block: {left} of its {length} bytes")
        follows = _after_blanks(stream.fh, stream.offset_of(stream.pos) + size)
        if follows[:5] not in (b"", b"WARC/"):
            raise _not_ended(wrong, follows)
    block, got, into_next = stream.read_block(size, hold=size <= MAX_BLOCK_BYTES)
    if into_next:
        raise _WrongLength(f"{wrong}: its block runs into the record at byte {stream.offset_of(stream.pos)}")
    if got < size:
        return _cut(stream, offset, f"inside its block: {got} of its {length} bytes")
    if not stream.at_record_end():
        raise _not_ended(wrong, stream.peek(20))
    return WarcRecord(offset, headers, block)


def _not_ended(wrong: str, follows: bytes) -> _WrongLength:
    return _WrongLength(f"{wrong}: its block is followed by {follows!r}, not by the record's end")


def _cut(stream: _Stream, offset: int, where: str) -> Unreadable:
    """A record cut short (what is lost after it, the caller adds)."""
    return Unreadable(offset, f"record cut short ({where}): {stream.error or 'the file ends'}")
