"""Shard files from tokenized documents: where batches and shards end, and writing one shard.

    plan = ShardPlan(shard_tokens=32_000_000, batch_tokens=16384)
    for lengths in length_chunks:             # token count of every document, in order, in pieces
        plan.add(lengths)
    for k, (first, end) in enumerate(plan.finish()):   # documents [first, end) make shard k
        entries.append(write_shard(out_dir, k, "arrow", np.uint16, 16384, lengths_of_k, read_docs_of_k))

    writer = ShardWriter(out_dir, "arrow", np.uint16)    # or stream them: shards are written as they close
    for doc_id, tokens in docs:
        writer.add(doc_id, tokens)
    entries = writer.close()

    ss = write_shards([[5, 6, 7], [8, 9]], out_dir, vocab_size=512, eos_id=0)   # tests: one call

A batch ends with the first document that brings it to `batch_tokens` tokens, a shard with the
first batch that brings it to `shard_tokens`; the last batch and shard hold what is left. So the
boundaries depend only on the documents' token counts and the two sizes: the same documents give
the same bytes, and every shard can be written by its own job, in any order. Each shard is written
under a temporary name and renamed when complete, an Arrow shard then its record-batch sidecar
(`shards/batch_ranges.py`); `prepare_output_dir` deletes a directory's
manifest before any shard is rewritten, so an interrupted rewrite never leaves an old manifest
describing new shards.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np

from pretrainkit import __version__
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, output_directory, remove_temporaries, sha256_file, write_bytes_atomic
from pretrainkit.shards.arrow_format import ArrowShardWriter
from pretrainkit.shards.batch_ranges import BatchRanges, sidecar_name
from pretrainkit.shards.formats import (
    DEFAULT_BATCH_TOKENS,
    DEFAULT_SHARD_TOKENS,
    FORMATS,
    MANIFEST_NAME,
    SHARD_FILE_RE,
    DocBatch,
    shard_file_name,
    token_dtype,
)
from pretrainkit.shards.manifest import ShardEntry, TokenizerInfo, build_manifest, write_manifest
from pretrainkit.shards.webdataset_format import WebDatasetShardWriter

# (first, end) -> the ids and the tokens, back to back, of those documents of a shard
ReadDocs = Callable[[int, int], tuple[list[str], np.ndarray]]
# (first, end) -> the urls of those documents of a shard (None for a document without one)
ReadUrls = Callable[[int, int], list[str | None]]


def prepare_output_dir(out_dir: Path) -> None:
    """Make `out_dir` and clear what an interrupted run may have left: its manifest and temporaries."""
    output_directory(out_dir)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    remove_temporaries(out_dir)


def remove_stale_shards(out_dir: Path, entries: Sequence[ShardEntry]) -> None:
    """Delete shard files (and record-batch sidecars) of earlier runs that the entries do not name."""
    written = {e.file for e in entries} | {sidecar_name(e.file) for e in entries if e.batches}
    for p in out_dir.iterdir():
        if SHARD_FILE_RE.match(p.name) and p.name not in written:
            p.unlink()


def batch_ends(lengths: np.ndarray, batch_tokens: int) -> list[int]:
    """End (exclusive) of every batch that reaches `batch_tokens`, for documents starting a batch;
    the documents after the last end are an unfinished batch."""
    cum = np.concatenate(([0], np.cumsum(lengths, dtype=np.int64)))
    ends: list[int] = []
    start = 0
    while start < len(lengths):
        end = int(np.searchsorted(cum, cum[start] + batch_tokens, side="left"))
        if end > len(lengths):
            break
        ends.append(end)
        start = end
    return ends


class ShardPlan:
    """The shard boundaries of a stream of documents, from their token counts fed in pieces
    (memory: the unfinished batch, not the stream)."""

    def __init__(self, shard_tokens: int = DEFAULT_SHARD_TOKENS, batch_tokens: int = DEFAULT_BATCH_TOKENS):
        if shard_tokens < 1 or batch_tokens < 1:
            raise UserError("shard and batch sizes must be at least 1 token")
        self.shard_tokens, self.batch_tokens = shard_tokens, batch_tokens
        self.shards: list[tuple[int, int]] = []
        self.tokens: list[int] = []  # per shard
        self._docs = self._shard_start = self._shard_fill = 0
        self._open = np.empty(0, np.int64)  # token counts of the unfinished batch

    def add(self, lengths: np.ndarray) -> None:
        run = np.concatenate([self._open, np.asarray(lengths, dtype=np.int64)])
        first = self._docs - len(self._open)  # stream position of run[0]
        cum = np.concatenate(([0], np.cumsum(run)))
        start = 0
        for end in batch_ends(run, self.batch_tokens):
            self._shard_fill += int(cum[end] - cum[start])
            if self._shard_fill >= self.shard_tokens:
                self.shards.append((self._shard_start, first + end))
                self.tokens.append(self._shard_fill)
                self._shard_start, self._shard_fill = first + end, 0
            start = end
        self._open = run[start:]
        self._docs += len(lengths)

    def finish(self) -> list[tuple[int, int]]:
        """(first document, end document) of every shard."""
        if self._docs > self._shard_start:
            self.shards.append((self._shard_start, self._docs))
            self.tokens.append(self._shard_fill + int(self._open.sum()))
            self._shard_start, self._shard_fill, self._open = self._docs, 0, np.empty(0, np.int64)
        return self.shards


def write_shard(
    out_dir: str | Path,
    index: int,
    fmt: str,
    dtype: np.dtype,
    batch_tokens: int,
    lengths: np.ndarray,
    read_docs: ReadDocs,
    read_urls: ReadUrls | None = None,
) -> ShardEntry:
    """Write shard `index` of a set: documents with these token counts, read one batch at a time; with
    `read_urls`, their urls too (a set whose documents have addresses: every shard of it)."""
    if fmt not in FORMATS:
        raise UserError(f"unknown shard format {fmt!r} (expected {', '.join(FORMATS)})")
    dtype = np.dtype(dtype)
    path = Path(out_dir) / shard_file_name(index, fmt)
    ends = batch_ends(lengths, batch_tokens)
    if not ends or ends[-1] < len(lengths):
        ends.append(len(lengths))
    with atomic_write(path, "wb") as sink:
        urls = read_urls is not None
        writer = ArrowShardWriter(sink, dtype, urls) if fmt == "arrow" else WebDatasetShardWriter(sink, index)
        start = 0
        for end in ends:
            ids, tokens = read_docs(start, end)
            batch_lengths = np.asarray(lengths[start:end], dtype=np.uint32)
            batch_urls = read_urls(start, end) if read_urls is not None else None
            writer.write(DocBatch(ids, batch_lengths, tokens.astype(dtype, copy=False), batch_urls))
            start = end
        writer.close()
    batches = None
    if fmt == "arrow":
        offsets, sizes = zip(*writer.ranges)
        ranges, digest = BatchRanges.of_file(
            path, list(offsets), list(sizes), np.asarray(lengths, np.uint32), np.diff([0, *ends]).tolist()
        )
        sidecar = ranges.encode()
        write_bytes_atomic(path.with_name(sidecar_name(path.name)), sidecar)
        batches = {"bytes": len(sidecar), "sha256": hashlib.sha256(sidecar).hexdigest()}
    else:
        digest = sha256_file(path)
    return ShardEntry(
        path.name, len(lengths), int(np.sum(lengths, dtype=np.int64)), path.stat().st_size, digest, batches
    )


class ShardWriter:
    """A stream of documents in, shard files out as the plan closes them (holding one shard's documents).

    writer = ShardWriter(out_dir, "arrow", np.uint16)
    for doc_id, tokens in docs:
        writer.add(doc_id, tokens)
    entries = writer.close()          # then write the manifest (last) with `pretrainkit.shards.manifest`
    """

    PLAN_EVERY = 4096  # documents fed to the plan at a time

    def __init__(
        self,
        out_dir: str | Path,
        fmt: str,
        dtype: np.dtype,
        shard_tokens: int = DEFAULT_SHARD_TOKENS,
        batch_tokens: int = DEFAULT_BATCH_TOKENS,
    ):
        if fmt not in FORMATS:
            raise UserError(f"unknown shard format {fmt!r} (expected {', '.join(FORMATS)})")
        self.out_dir, self.fmt, self.dtype, self.batch_tokens = Path(out_dir), fmt, np.dtype(dtype), batch_tokens
        self._plan = ShardPlan(shard_tokens, batch_tokens)
        prepare_output_dir(self.out_dir)
        self.entries: list[ShardEntry] = []
        self._ids: list[str] = []
        self._tokens: list[np.ndarray] = []
        self._first = 0  # stream position of the first buffered document
        self._planned = 0  # buffered documents already fed to the plan

    def add(self, doc_id: str, tokens: np.ndarray) -> None:
        self._ids.append(doc_id)
        self._tokens.append(np.asarray(tokens))
        if len(self._tokens) - self._planned >= self.PLAN_EVERY:
            self._advance()

    def close(self) -> list[ShardEntry]:
        """Write what is buffered, and delete shard files of earlier runs that this one did not write."""
        self._advance(finish=True)
        remove_stale_shards(self.out_dir, self.entries)
        return self.entries

    def _advance(self, finish: bool = False) -> None:
        self._plan.add(np.fromiter(map(len, self._tokens[self._planned :]), dtype=np.int64))
        self._planned = len(self._tokens)
        shards = self._plan.finish() if finish else self._plan.shards
        for first, end in shards[len(self.entries) :]:
            ids, tokens = self._ids[: end - first], self._tokens[: end - first]
            lengths = np.fromiter(map(len, tokens), dtype=np.int64, count=len(tokens))
            offsets = np.concatenate(([0], np.cumsum(lengths)))
            flat = np.concatenate(tokens) if tokens else np.empty(0, self.dtype)
            self.entries.append(
                write_shard(
                    self.out_dir,
                    len(self.entries),
                    self.fmt,
                    self.dtype,
                    self.batch_tokens,
                    lengths,
                    lambda a, b, ids=ids, flat=flat, offsets=offsets: (ids[a:b], flat[offsets[a] : offsets[b]]),
                )
            )
            del self._ids[: end - first], self._tokens[: end - first]
            self._first, self._planned = end, self._planned - (end - first)


def write_shards(
    docs: Iterable[Sequence[int] | np.ndarray],
    out_dir: str | Path,
    *,
    vocab_size: int,
    eos_id: int,
    tokenizer_sha256: str = "0" * 64,
    eos_token: str = "<|endoftext|>",
    vocab_fingerprint: str | None = None,
    ids: Sequence[str] | None = None,
    fmt: str = "arrow",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    provenance: dict | None = None,
):
    """Write token arrays as a complete shard set (shards + manifest); returns its ShardSet."""
    from pretrainkit.shards.reader import ShardSet

    out_dir = Path(out_dir)
    dtype = token_dtype(vocab_size)
    writer = ShardWriter(out_dir, fmt, dtype, shard_tokens, batch_tokens)
    for i, tokens in enumerate(docs):
        tokens = np.asarray(tokens)
        if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab_size):
            raise ValueError(f"document {i}: token ids must lie in [0, {vocab_size})")
        writer.add(ids[i] if ids is not None else str(i), tokens.astype(dtype))
    entries = writer.close()
    tokenizer = TokenizerInfo(tokenizer_sha256, vocab_size, eos_id, eos_token, vocab_fingerprint)
    provenance = {"pretrainkit_version": __version__, **(provenance or {})}
    write_manifest(out_dir, build_manifest(fmt, dtype.name, tokenizer, entries, provenance))
    return ShardSet.open(out_dir)
