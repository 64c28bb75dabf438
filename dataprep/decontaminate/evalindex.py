"""The evaluation sets' n-grams, as a sorted table of 64-bit hashes with the words that confirm a hit.

    build_index(["mmlu.jsonl"], EvalOptions(...)).write(work / "eval")      # once, in the main process
    index = EvalIndex.open(work / "eval")                                    # in every worker (mapped)
    match = index.confirm(doc_words, position, gram_hash)                    # (item, its n-gram) or None

Files (raw little-endian arrays, memory-mapped by the workers, so the pages are shared between
the processes of a machine): `hashes.u64`, every n-gram of every item sorted by hash (stable: of
equal hashes, the earlier item first); `refs.u32`, per entry its item and token position; `words.bin`,
each item's normalized tokens (`ngrams`: words, and the characters of unspaced scripts) joined by
spaces, at `words.i64` offsets; `items.json`, each item's
eval id and file; `index.json`, the per-file counts, written last (the index is whole when it is
there). Memory: 16 bytes per evaluation n-gram and the items' normalized text, independent of the
corpus; 100 million n-grams (about 100 million words of evaluation text at --ngram 13) is 1.6 GB.

A hit is confirmed by comparing tokens, so a 64-bit collision (an n-gram of the corpus whose hash is
some evaluation n-gram's) is never reported: the confirmed match is the first entry of that hash
whose tokens are the document's n-gram. An item that weighs fewer words than the n-gram (Chinese
characters counting as their share of a word, `ngrams`) has no n-gram: it
is counted (`items_shorter_than_ngram`) and cannot match, since a short item (an answer, a number)
found anywhere in web text says nothing of contamination.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.decontaminate.evalsets import read_eval_file
from pretrainkit.dataprep.decontaminate.ngrams import gram_at, gram_hashes, hash_filter, normalized_words
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.progress import progress_bar
from pretrainkit.remote.staging import shown

INDEX_MARKER = "index.json"


@dataclass(frozen=True)
class EvalOptions:
    fields: tuple[str, ...] = ("text",)
    id_field: str = "id"
    ngram: int = 13


@dataclass(frozen=True)
class EvalTables:
    """The index in memory, as `build_index` reads it, before `write` puts it in its files."""

    hashes: np.ndarray
    refs: np.ndarray
    words: bytes
    offsets: np.ndarray
    items: list[tuple[str, str]]
    per_file: dict[str, dict]  # per evaluation file: items, items_shorter_than_ngram, ngrams

    def write(self, directory: Path) -> None:
        """The index's files in `directory`, `index.json` last; kept as they are when it is there."""
        if (directory / INDEX_MARKER).is_file():
            return
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in (
            ("hashes.u64", self.hashes.astype("<u8").tobytes()),
            ("refs.u32", self.refs.astype("<u4").tobytes()),
            ("words.bin", self.words),
            ("words.i64", self.offsets.astype("<i8").tobytes()),
            ("items.json", json.dumps(self.items, ensure_ascii=False).encode()),
        ):
            with atomic_write(directory / name, durable=False) as f:
                f.write(data)
        write_text_atomic(directory / INDEX_MARKER, json.dumps(self.per_file))


def build_index(eval_files: list[str], options: EvalOptions) -> EvalTables:
    """Read every evaluation file (all of it before anything is written: a bad item is an error
    before the run has begun)."""
    hashes: list[np.ndarray] = []
    refs: list[np.ndarray] = []
    words: list[bytes] = []
    items: list[tuple[str, str]] = []
    per_file: dict[str, dict] = {}
    with progress_bar(desc="eval sets", unit="item") as bar:
        for path in eval_files:
            name = shown(path)  # as given: a fetched file by its URL
            per_file[name] = _read_into(path, name, options, (hashes, refs, words, items))
            bar.update(per_file[name]["items"])
    table = np.concatenate(hashes)
    order = np.argsort(table, kind="stable")
    offsets = np.zeros(len(words) + 1, np.int64)
    np.cumsum([len(w) for w in words], out=offsets[1:])
    return EvalTables(table[order], np.concatenate(refs)[order], b"".join(words), offsets, items, per_file)


def _read_into(path: str, name: str, options: EvalOptions, tables: tuple[list, list, list, list]) -> dict:
    """One evaluation file's items appended to the lists of `build_index` (named `name`); returns its counts."""
    hashes, refs, words, items = tables
    counts = {"items": 0, "items_shorter_than_ngram": 0, "ngrams": 0}
    for item in read_eval_file(path, options.fields, options.id_field):
        counts["items"] += 1
        grams = gram_hashes(item.text, options.ngram)
        if not len(grams):
            counts["items_shorter_than_ngram"] += 1
            continue
        at = len(items)
        items.append((item.eval_id, name))
        words.append(b" ".join(normalized_words(item.text)))
        hashes.append(grams)
        refs.append(np.stack([np.full(len(grams), at, np.uint32), np.arange(len(grams), dtype=np.uint32)], 1))
        counts["ngrams"] += len(grams)
    if not counts["items"]:
        raise UserError(f"{path}: no evaluation items in the file")
    if not counts["ngrams"]:
        raise UserError(
            f"{path}: all {counts['items']:,} evaluation items have fewer than --ngram {options.ngram} words; "
            "nothing to test against (a smaller --ngram?)"
        )
    return counts


@dataclass(frozen=True)
class Match:
    eval_id: str
    eval_file: str
    ngram: list[str]  # the shared n-gram, normalized tokens


class EvalIndex:
    def __init__(self, directory: Path):
        self.hashes = _mapped(directory / "hashes.u64", "<u8")
        self.filter = hash_filter(self.hashes)
        self.refs = _mapped(directory / "refs.u32", "<u4").reshape(-1, 2)
        self.words = _mapped(directory / "words.bin", np.uint8)
        self.offsets = np.fromfile(directory / "words.i64", "<i8")
        self.items = json.loads((directory / "items.json").read_text())

    @classmethod
    def open(cls, directory: str) -> EvalIndex:
        """The index, opened once per process (a worker runs many jobs over the same one); an index
        built again in the same place (another run in this process) is opened afresh."""
        marker = os.stat(Path(directory) / INDEX_MARKER)
        return _opened(directory, marker.st_ino, marker.st_mtime_ns)

    def item_words(self, item: int) -> list[bytes]:
        return self.words[self.offsets[item] : self.offsets[item + 1]].tobytes().split(b" ")

    def confirm(self, words: list[bytes], position: int, n: int, gram_hash: np.uint64) -> Match | None:
        """The first evaluation n-gram of this hash whose tokens are the n-gram of `words` (tokens)
        at `position` (`ngrams.gram_at`: `n` words long, or its weight in characters)."""
        ngram = gram_at(words, position, n)
        lo = int(np.searchsorted(self.hashes, gram_hash, side="left"))
        hi = int(np.searchsorted(self.hashes, gram_hash, side="right"))
        for item, at in self.refs[lo:hi].tolist():
            if self.item_words(item)[at : at + len(ngram)] == ngram:
                eval_id, eval_file = self.items[item]
                return Match(eval_id, eval_file, [w.decode("utf-8", "surrogatepass") for w in ngram])
        return None


@lru_cache(maxsize=2)
def _opened(directory: str, inode: int, mtime_ns: int) -> EvalIndex:
    return EvalIndex(Path(directory))


def _mapped(path: Path, dtype) -> np.ndarray:
    return np.memmap(path, dtype=dtype, mode="r")
