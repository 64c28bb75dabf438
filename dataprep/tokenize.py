"""Tokenize raw corpora into a shard set: read in input order, encode in parallel, write in order.

    options = TokenizeOptions(format="arrow", shard_tokens=32 << 20)
    manifest = tokenize_corpus(["corpus/"], Path("shards"), "tokenizer.json", options, workers=4)

    ss = write_text_shards(["first doc", "second doc"], out_dir, "tokenizer.json")   # tests: one call

The main process reads records in input order and sends batches of texts to an encoding thread
(`--workers 1`) or to `workers` processes (`Tokenizer.encode_batch_fast`); results come back in
submission order and one `ShardWriter` writes them, so shards and manifest are byte-identical
for any worker count. Every input record is either in the shards or a row of
`OUT/rejected.jsonl`; the manifest's `provenance.records` adds up. Killed at any moment, the
same command run again produces the same bytes.
"""

from __future__ import annotations

import itertools
import json
import multiprocessing
import os
from collections import Counter, deque
from concurrent.futures import Executor, Future, ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator

import numpy as np
from tokenizers import Tokenizer
from pretrainkit.progress import progress_bar

from dataprep.readers import (
    Document,
    InputFile,
    Rejected,
    discover_inputs,
    nothing_usable,
    plan_read_tasks,
    read_task,
    reason_kind,
    refuse_inputs_inside,
)
from dataprep.tokenizer import LoadedTokenizer, load_tokenizer, read_tokenizer_file
from pretrainkit import __version__
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, output_directory, sha256_file, writing_into
from shards.formats import DEFAULT_BATCH_TOKENS, DEFAULT_SHARD_TOKENS, FORMATS, token_dtype
from shards.manifest import build_manifest, write_manifest
from shards.writer import ShardWriter, write_shards

REJECTED_NAME = "rejected.jsonl"
ENCODE_CHARS = 1 << 20  # text per encode job: large enough to amortize the hand-off to a worker


@dataclass(frozen=True)
class TokenizeOptions:
    """Everything that changes the shards' bytes (recorded in the manifest's provenance)."""

    format: str = "arrow"
    shard_tokens: int = DEFAULT_SHARD_TOKENS
    batch_tokens: int = DEFAULT_BATCH_TOKENS
    text_field: str = "text"
    id_field: str = "id"
    eos_token: str | None = None

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise UserError(f"--format must be one of {', '.join(FORMATS)}, got {self.format!r}")
        if self.shard_tokens < 1:
            raise UserError(f"--shard-size must be at least 1 token, got {self.shard_tokens}")
        if self.batch_tokens < 1:
            raise UserError(f"--batch-size must be at least 1 token, got {self.batch_tokens}")


def tokenize_corpus(
    inputs: list[str],
    out_dir: str | Path,
    tokenizer_path: str,
    options: TokenizeOptions,
    workers: int = 1,
    provenance: dict | None = None,
    progress: bool = True,
) -> dict:
    """Write `out_dir` (shards, rejected.jsonl, then manifest.json); return the manifest."""
    out_dir = Path(out_dir)
    with writing_into(out_dir):
        return _tokenize(inputs, out_dir, tokenizer_path, options, workers, provenance, progress)


def _tokenize(inputs: list[str], out_dir: Path, tokenizer_path: str, options: TokenizeOptions, workers: int,
              provenance: dict | None, progress: bool) -> dict:
    tok = load_tokenizer(tokenizer_path, options.eos_token)
    files = discover_inputs(inputs)
    refuse_inputs_inside(files, out_dir)
    output_directory(out_dir)
    dtype = token_dtype(tok.vocab_size)
    inputs_meta = input_hashes(files)
    writer = ShardWriter(out_dir, options.format, dtype, options.shard_tokens, options.batch_tokens)
    docs = 0
    reasons: Counter = Counter()
    try:
        with atomic_write(out_dir / REJECTED_NAME, "w", encoding="utf-8") as rej, progress_bar(
            desc="tokenize", unit="doc", disable=not progress
        ) as bar:
            for items, lengths, flat in _encoded(files, options, tok, dtype, workers):
                offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
                np.cumsum(lengths, out=offsets[1:])
                k = 0
                for item in items:
                    if isinstance(item, Document):
                        tokens = flat[offsets[k] : offsets[k + 1]]
                        k += 1
                        if len(tokens):
                            writer.add(item.id, tokens)
                            docs += 1
                            continue
                        item = Rejected(item.source, item.line, "text encodes to no tokens", item.id)
                    rej.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
                    reasons[reason_kind(item.reason)] += 1
                bar.update(len(items))
        if docs == 0:  # a shard set of no tokens is no use to anyone: no manifest
            raise nothing_usable(inputs, reasons, out_dir / REJECTED_NAME)
        entries = writer.close()
    except BaseException:
        writer.abort()
        raise
    rejected = sum(reasons.values())
    provenance = {
        "pretrainkit_version": __version__,
        "inputs": inputs_meta,
        "options": asdict(options),
        "records": {"input": docs + rejected, "tokenized": docs, "rejected": rejected},
        **(provenance or {}),
    }
    manifest = build_manifest(options.format, dtype.name, tok.info, entries, provenance)
    write_manifest(out_dir, manifest)
    return manifest


def input_hashes(files: list[InputFile]) -> list[dict]:
    """Provenance of inputs: path relative to its input root, size and sha256 (no absolute paths)."""
    return [{"path": f.rel, "bytes": f.size, "sha256": sha256_file(f.path)} for f in files]


def _encoded(
    files: list[InputFile], options: TokenizeOptions, tok: LoadedTokenizer, dtype: np.dtype, workers: int
) -> Iterator[tuple[list, np.ndarray, np.ndarray]]:
    """(records, token count per document, flat tokens) per batch of records, in input order."""
    submitted: deque[list] = deque()

    def texts_in_order() -> Iterator[list[str]]:
        for items in _record_batches(files, options):
            submitted.append(items)
            yield [d.text for d in items if isinstance(d, Document)]

    for lengths, flat in _encode_in_order(texts_in_order(), tok, dtype, workers):
        yield submitted.popleft(), lengths, flat


def _record_batches(files: list[InputFile], options: TokenizeOptions) -> Iterator[list]:
    items: list = []
    chars = 0
    for task in plan_read_tasks(files):
        for item in read_task(task, options.text_field, options.id_field):
            items.append(item)
            chars += len(item.text) if isinstance(item, Document) else 0
            if chars >= ENCODE_CHARS:
                yield items
                items, chars = [], 0
    if items:
        yield items


class _Encoder:
    """Texts in, (token count per text, all tokens back to back) out: compact to send between processes."""

    def __init__(self, tokenizer: Tokenizer, dtype: np.dtype):
        self.encode_batch = _fastest_encode_batch(tokenizer)
        self.dtype = dtype

    def __call__(self, texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
        ids = [e.ids for e in self.encode_batch(texts, add_special_tokens=False)]
        lengths = np.fromiter(map(len, ids), dtype=np.int64, count=len(ids))
        flat = np.fromiter(itertools.chain.from_iterable(ids), dtype=self.dtype, count=int(lengths.sum()))
        return lengths, flat


def _fastest_encode_batch(tokenizer: Tokenizer) -> Callable:
    """`encode_batch_fast` (tokenizers >= 0.20: same ids, no character offsets), else `encode_batch`."""
    return getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)


_WORKER_ENCODER: _Encoder | None = None


def _init_worker(tokenizer_path: str, dtype: np.dtype) -> None:
    global _WORKER_ENCODER
    os.environ["RAYON_NUM_THREADS"] = "1"  # the parallelism comes from the processes
    _WORKER_ENCODER = _Encoder(read_tokenizer_file(tokenizer_path), dtype)


def _encode_in_worker(texts: list[str]) -> tuple[np.ndarray, np.ndarray]:
    return _WORKER_ENCODER(texts)


def _encode_in_order(jobs: Iterable[list[str]], tok: LoadedTokenizer, dtype: np.dtype, workers: int) -> Iterator:
    """Encoded jobs in job order, at most 2 jobs per worker in flight.

    workers=1: one encoding thread (the tokenizer releases the GIL and uses all cores itself), so
    reading and writing in this thread overlap with encoding; workers>1: that many processes.
    """
    if workers <= 1:
        executor: Executor = ThreadPoolExecutor(1)
        encode: Callable = _Encoder(tok.tokenizer, dtype)
    else:
        ctx = multiprocessing.get_context("fork")
        executor = ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init_worker, initargs=(tok.path, dtype))
        encode = _encode_in_worker
    with executor:
        pending: deque[Future] = deque()
        for job in jobs:
            pending.append(executor.submit(encode, job))
            if len(pending) >= 2 * max(workers, 1):
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()


def write_text_shards(texts: Iterable[str], out_dir: str | Path, tokenizer_path: str | Path, **kwargs):
    """Encode texts with a tokenizer file and write them as a complete shard set; returns its ShardSet."""
    tok = load_tokenizer(tokenizer_path)
    docs = [e.ids for e in _fastest_encode_batch(tok.tokenizer)(list(texts), add_special_tokens=False)]
    return write_shards(
        docs, out_dir, vocab_size=tok.vocab_size, eos_id=tok.eos_id, tokenizer_sha256=tok.sha256, eos_token=tok.eos_token, **kwargs
    )
