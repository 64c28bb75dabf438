"""duplicates.jsonl rows: one per removed document, described in bulk and assembled by a compiled loop.

    dups = Duplicates(keys, dup_of, kinds, sims, matched, matched_sims)
    write_duplicates(path, dups, parts, offsets, chunk_rows)

Each row is the bytes `json.dumps(row, ensure_ascii=False)` gives for
{"id", "source", "line", "duplicate_of", "duplicate_of_source", "duplicate_of_line", "kind",
"similarity", "matched", "matched_source", "matched_line", "matched_similarity", "url", "text_head"}
(url where the record has one): the ids come as `.ids` holds them (their JSON strings in UTF-8,
`kernels.ids.id_line`), the url and text head as the scan wrote them (`.heads`, `head_fragment`),
each part's source is encoded once, each distinct similarity is Python's repr of round(s, 4) (what
json.dumps writes for a float), and the lines are written in decimal. A chunk of rows at a time,
the ids, id positions, lines and heads of the keys it names are read by `index.read_extents`, and
one compiled loop copies the pieces of every row into the output: Python does nothing per row, and
memory holds one chunk's descriptions and rows, not every duplicate's.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path

import numba
import numpy as np
import orjson

from pretrainkit.dataprep import readers
from pretrainkit.dataprep.dedup.index import IndexPart, read_extents
from pretrainkit.dataprep.dedup.pairs import distinct
from pretrainkit.dataprep.kernels.pieces import joined
from pretrainkit.files import atomic_write

_FIELDS = (
    b'{"id": ',
    b', "source": ',
    b', "line": ',
    b', "duplicate_of": ',
    b', "duplicate_of_source": ',
    b', "duplicate_of_line": ',
    b', "kind": ',
    b', "similarity": ',
    b', "matched": ',
    b', "matched_source": ',
    b', "matched_line": ',
    b', "matched_similarity": ',
    b"}\n",
)
_KINDS = (b'"exact"', b'"near"')  # index = the kind number


@dataclass(frozen=True)
class Duplicates:
    """Removed documents, one entry each (global keys)."""

    keys: np.ndarray
    dup_of: np.ndarray  # the document kept in its stead: the first occurrence, or the cluster's smallest key
    kinds: np.ndarray  # 0 exact, 1 near
    sims: np.ndarray  # Jaccard similarity to `dup_of`
    matched: (
        np.ndarray
    )  # the document whose match removed it: `dup_of` for an exact one, a linked document for a near one
    matched_sims: np.ndarray  # Jaccard similarity to `matched` (at least the threshold)

    def __getitem__(self, at) -> Duplicates:
        return Duplicates(*(getattr(self, f.name)[at] for f in fields(self)))


def head_fragment(document: readers.Document) -> bytes:
    """`, "url": ..., "text_head": ...` of a document (`readers.described`), as json.dumps writes them in
    its row: the scan keeps it per document (`.heads`), the row of a removed one ends with it. orjson
    writes a string as json.dumps(ensure_ascii=False) does, the same escapes, ~10x faster: the scan
    pays this for every document, removed or not."""
    return b"".join(
        b', "%s": %s' % (key.encode(), orjson.dumps(value)) for key, value in readers.described(document).items()
    )


def write_duplicates(
    path: Path, dups: Duplicates, parts: list[IndexPart], offsets: np.ndarray, chunk_rows: int
) -> None:
    """The rows of `dups`, in key order, `chunk_rows` rows at a time."""
    dups = dups[np.argsort(dups.keys, kind="stable")]
    with atomic_write(path, durable=False) as f:
        for lo in range(0, len(dups.keys), chunk_rows):
            f.write(_rows(dups[lo : lo + chunk_rows], parts, offsets).tobytes())


def _rows(dups: Duplicates, parts: list[IndexPart], offsets: np.ndarray) -> np.ndarray:
    keys, dup_of, kinds, matched = dups.keys, dups.dup_of, dups.kinds, dups.matched
    described = distinct(np.concatenate([keys, dup_of, matched]))
    part_of = np.searchsorted(offsets, described, side="right") - 1
    local = described - offsets[part_of]
    id_pos = read_extents([f"{p.base}.idpos" for p in parts], part_of, 8 * local, np.full(len(local), 16)).view("<u8")
    id_start, id_size = (
        id_pos[0::2].astype(np.int64),
        np.diff(id_pos.reshape(-1, 2), axis=1).ravel().astype(np.int64) - 1,
    )
    ids = read_extents([f"{p.base}.ids" for p in parts], part_of, id_start, id_size)  # without their newlines
    lines = read_extents([f"{p.base}.lines" for p in parts], part_of, 8 * local, np.full(len(local), 8)).view("<u8")
    # the removed documents' heads: new documents all, in a run's own parts (an --against index keeps none)
    key_part = np.searchsorted(offsets, keys, side="right") - 1
    key_local = keys - offsets[key_part]
    head_pos = read_extents([f"{p.base}.headpos" for p in parts], key_part, 8 * key_local, np.full(len(keys), 16)).view(
        "<u8"
    )
    head_start, head_size = (
        head_pos[0::2].astype(np.int64),
        np.diff(head_pos.reshape(-1, 2), axis=1).ravel().astype(np.int64),
    )
    heads = read_extents([f"{p.base}.heads" for p in parts], key_part, head_start, head_size)
    sim_values, sim_of = np.unique(np.concatenate([dups.sims, dups.matched_sims]), return_inverse=True)
    used_parts = distinct(part_of)

    pieces = _Pieces()
    field = pieces.add_bytes(list(_FIELDS))
    kind = pieces.add_bytes(list(_KINDS))
    similarity = pieces.add_bytes([repr(round(s, 4)).encode() for s in sim_values.tolist()])
    source = pieces.add_bytes([json.dumps(parts[p].source, ensure_ascii=False).encode() for p in used_parts.tolist()])
    source = source[np.searchsorted(used_parts, part_of)]
    doc_id = pieces.add(ids, np.concatenate(([0], np.cumsum(id_size))))
    line = pieces.add(*_decimals(lines.astype(np.int64)))
    head = pieces.add(heads, np.concatenate(([0], np.cumsum(head_size))))
    k, d, m, n = (
        np.searchsorted(described, keys),
        np.searchsorted(described, dup_of),
        np.searchsorted(described, matched),
        len(keys),
    )
    sim_of = sim_of.ravel()
    row = np.stack(
        [
            np.full(n, field[0]),
            doc_id[k],
            np.full(n, field[1]),
            source[k],
            np.full(n, field[2]),
            line[k],
            np.full(n, field[3]),
            doc_id[d],
            np.full(n, field[4]),
            source[d],
            np.full(n, field[5]),
            line[d],
            np.full(n, field[6]),
            kind[kinds.astype(np.int64)],
            np.full(n, field[7]),
            similarity[sim_of[:n]],
            np.full(n, field[8]),
            doc_id[m],
            np.full(n, field[9]),
            source[m],
            np.full(n, field[10]),
            line[m],
            np.full(n, field[11]),
            similarity[sim_of[n:]],
            head,  # the removed document's url and text head, last: the longest
            np.full(n, field[12]),
        ],
        axis=1,
    )
    return pieces.join(row.ravel())


class _Pieces:
    """Pieces of text in one buffer, added a group at a time (its bytes and the bounds of its
    pieces), then joined in any sequence of piece numbers."""

    def __init__(self) -> None:
        self.buffers: list[np.ndarray] = []
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        self.count = self.size = 0

    def add(self, buffer: np.ndarray, bounds: np.ndarray) -> np.ndarray:
        """The numbers of the group's pieces, buffer[bounds[i]:bounds[i + 1]]."""
        self.buffers.append(buffer)
        self.starts.append(self.size + bounds[:-1])
        self.ends.append(self.size + bounds[1:])
        self.size += len(buffer)
        self.count += len(bounds) - 1
        return np.arange(self.count - len(bounds) + 1, self.count)

    def add_bytes(self, texts: list[bytes]) -> np.ndarray:
        return self.add(*joined(texts))

    def join(self, sequence: np.ndarray) -> np.ndarray:
        return _concatenate(
            np.concatenate(self.buffers), np.concatenate(self.starts), np.concatenate(self.ends), sequence
        )


@numba.njit(cache=True)
def _concatenate(text: np.ndarray, start: np.ndarray, end: np.ndarray, pieces: np.ndarray) -> np.ndarray:
    """text[start[p]:end[p]] for each p of `pieces`, one after another."""
    size = 0
    for p in pieces:
        size += end[p] - start[p]
    out = np.empty(size, np.uint8)
    at = 0
    for p in pieces:
        for i in range(start[p], end[p]):  # a byte loop: most pieces are a few bytes, shorter than a slice costs
            out[at] = text[i]
            at += 1
    return out


@numba.njit(cache=True)
def _decimals(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(text, bounds): the decimal digits of each int64 value >= 0, value i at text[bounds[i]:bounds[i + 1]]."""
    bounds = np.zeros(len(values) + 1, np.int64)
    for i in range(len(values)):
        v, n = values[i], 1
        while v >= 10:
            v //= 10
            n += 1
        bounds[i + 1] = bounds[i] + n
    text = np.empty(bounds[-1], np.uint8)
    for i in range(len(values)):
        v, at = values[i], bounds[i + 1]
        while True:
            at -= 1
            text[at] = 48 + v % 10
            v //= 10
            if v == 0:
                break
    return text, bounds
