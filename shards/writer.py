"""`ShardWriter`: cuts an ordered stream of tokenized documents into batches and shard files.

    writer = ShardWriter(out_dir, "arrow", np.uint16)
    for doc_id, tokens in docs:
        writer.add(doc_id, tokens)
    entries = writer.close()          # then write the manifest (last) with `shards.manifest`

    ss = write_shards([[5, 6, 7], [8, 9]], out_dir, vocab_size=512, eos_id=0)   # tests: one call

Batch and shard boundaries depend only on the documents and the two sizes, so the same stream
gives the same bytes. Each shard is written under a temporary name and renamed when complete;
opening a writer first deletes the directory's manifest, so an interrupted rewrite never leaves an
old manifest describing new shards.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from pretrainkit import __version__
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, output_directory, remove_temporaries, sha256_file
from shards.arrow_format import ArrowShardWriter
from shards.formats import (
    DEFAULT_BATCH_TOKENS,
    DEFAULT_SHARD_TOKENS,
    FORMATS,
    MANIFEST_NAME,
    SHARD_NAME_RE,
    DocBatch,
    shard_file_name,
    token_dtype,
)
from shards.manifest import ShardEntry, TokenizerInfo, build_manifest, write_manifest
from shards.webdataset_format import WebDatasetShardWriter


def prepare_output_dir(out_dir: Path) -> None:
    """Make `out_dir` and clear what an interrupted run may have left: its manifest and temporaries."""
    output_directory(out_dir)
    (out_dir / MANIFEST_NAME).unlink(missing_ok=True)
    remove_temporaries(out_dir)


class ShardWriter:
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
        if shard_tokens < 1 or batch_tokens < 1:
            raise UserError("shard and batch sizes must be at least 1 token")
        self.out_dir = Path(out_dir)
        prepare_output_dir(self.out_dir)
        self.fmt, self.dtype = fmt, np.dtype(dtype)
        self.shard_tokens, self.batch_tokens = shard_tokens, batch_tokens
        self.entries: list[ShardEntry] = []
        self._ids: list[str] = []
        self._tokens: list[np.ndarray] = []
        self._batch_size = 0
        self._file: contextlib.AbstractContextManager | None = None
        self._format_writer: ArrowShardWriter | WebDatasetShardWriter | None = None
        self._shard_docs = self._shard_size = 0

    def add(self, doc_id: str, tokens: np.ndarray) -> None:
        self._ids.append(doc_id)
        self._tokens.append(tokens)
        self._batch_size += len(tokens)
        if self._batch_size >= self.batch_tokens:
            self._flush_batch()
            if self._shard_size >= self.shard_tokens:
                self._finish_shard()

    def close(self) -> list[ShardEntry]:
        """Write what is buffered, and delete shard files of earlier runs that this one did not write."""
        self._flush_batch()
        self._finish_shard()
        written = {e.file for e in self.entries}
        for p in self.out_dir.iterdir():
            if SHARD_NAME_RE.match(p.name) and p.name not in written:
                p.unlink()
        return self.entries

    def abort(self) -> None:
        if self._file is not None:
            self._file.__exit__(RuntimeError, RuntimeError("aborted"), None)
            self._file = None

    def _flush_batch(self) -> None:
        if not self._ids:
            return
        lengths = np.fromiter((len(t) for t in self._tokens), dtype=np.uint32, count=len(self._tokens))
        tokens = np.concatenate(self._tokens).astype(self.dtype, copy=False)
        if self._format_writer is None:
            name = shard_file_name(len(self.entries), self.fmt)
            self._file = atomic_write(self.out_dir / name, "wb")
            sink = self._file.__enter__()
            if self.fmt == "arrow":
                self._format_writer = ArrowShardWriter(sink, self.dtype)
            else:
                self._format_writer = WebDatasetShardWriter(sink, len(self.entries))
        self._format_writer.write(DocBatch(self._ids, lengths, tokens))
        self._shard_docs += len(self._ids)
        self._shard_size += len(tokens)
        self._ids, self._tokens, self._batch_size = [], [], 0

    def _finish_shard(self) -> None:
        if self._format_writer is None:
            return
        self._format_writer.close()
        self._file.__exit__(None, None, None)
        path = self.out_dir / shard_file_name(len(self.entries), self.fmt)
        self.entries.append(ShardEntry(path.name, self._shard_docs, self._shard_size, path.stat().st_size, sha256_file(path)))
        self._format_writer = self._file = None
        self._shard_docs = self._shard_size = 0


def write_shards(
    docs: Iterable[Sequence[int] | np.ndarray],
    out_dir: str | Path,
    *,
    vocab_size: int,
    eos_id: int,
    tokenizer_sha256: str = "0" * 64,
    eos_token: str = "<|endoftext|>",
    ids: Sequence[str] | None = None,
    fmt: str = "arrow",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    batch_tokens: int = DEFAULT_BATCH_TOKENS,
    provenance: dict | None = None,
):
    """Write token arrays as a complete shard set (shards + manifest) in one call; returns its ShardSet."""
    from shards.reader import ShardSet

    dtype = token_dtype(vocab_size)
    writer = ShardWriter(out_dir, fmt, dtype, shard_tokens, batch_tokens)
    try:
        for i, tokens in enumerate(docs):
            tokens = np.asarray(tokens)
            if len(tokens) and (tokens.min() < 0 or tokens.max() >= vocab_size):
                raise ValueError(f"document {i}: token ids must lie in [0, {vocab_size})")
            writer.add(ids[i] if ids is not None else str(i), tokens.astype(dtype))
        entries = writer.close()
    except BaseException:
        writer.abort()
        raise
    tokenizer = TokenizerInfo(tokenizer_sha256, vocab_size, eos_id, eos_token)
    provenance = {"pretrainkit_version": __version__, **(provenance or {})}
    write_manifest(out_dir, build_manifest(fmt, dtype.name, tokenizer, entries, provenance))
    return ShardSet.open(out_dir)
