"""Dedup's scan stage: each read task's documents hashed into the run's index part.

    scan_jobs, scans = scan(tasks, work, Scanning(num_perm=128, ngram=5, ...), runner)

One job per read task (`ScanJob`) writes, under the work directory, the task's index part
(`parts/part-NNNNN.*`, `pretrainkit.dataprep.dedup.index`), the records that are not their input
line verbatim with a flag per document saying which are (for the write stage), and the rejected
rows; its part's `.json`, written last, marks the job done, so a rerun after a kill skips it.

The scan hashes a batch of documents at once: their texts and id lines joined, one compiled call
for the exact hashes (`digests`) and the shingle sets and signatures
(`minhash`); a signature is only ever used for its band hashes, so only those are written. The
finished index keeps none: a signature is a function of the shingle set, so an `--against` run
hashes the old documents' sets again, with its own `--num-perm` and LSH bands (any threshold), and
the index costs a third less disk.

Memory while scanning is one batch (~256 KB of text), whatever the size of the input. A
document over `LARGE_TEXT_CHARS` is a batch of its own: its record is written (and freed) first,
then its text is normalized and hashed a piece at a time (`normalized_pieces`), so beyond the
text itself a worker holds the shingle set (twice, while merging) and one piece.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import unicodedata
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.dedup.index import ARRAY_SUFFIXES
from pretrainkit.dataprep.dedup.minhash import MinHasher, band_hashes, near_normal_bytes
from pretrainkit.dataprep.dedup.rows import head_fragment
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.kernels.digests import blake2b_128
from pretrainkit.dataprep.kernels.ids import id_lines
from pretrainkit.dataprep.kernels.pieces import joined
from pretrainkit.dataprep.readers import Document, ReadTask, read_task
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.stage_layout import part_name

BATCH_BYTES = 256 << 10  # small batches keep the vectorized hashing inside the CPU caches
BATCH_DOCS = 4096
LARGE_TEXT_CHARS = 1 << 20


@dataclass(frozen=True)
class Scanning:
    """What every scan job of a run hashes, and how."""

    num_perm: int
    ngram: int
    text_field: str
    id_field: str
    bands: int  # LSH bands x rows of `.bands`; 0 bands: no near-dedup, no signatures
    rows: int


@dataclass(frozen=True)
class ScanJob:
    index: int  # of the read task, and of its part
    task: ReadTask
    work_dir: str
    settings: Scanning

    @property
    def parts_dir(self) -> str:
        return f"{self.work_dir}/parts"

    @property
    def rejected_path(self) -> str:
        return f"{self.work_dir}/rejected-{self.index:05d}.jsonl"

    @property
    def records_path(self) -> str:
        """For the write stage: the records that are not their input line verbatim, one line each."""
        return f"{self.work_dir}/records-{self.index:05d}.jsonl"

    @property
    def verbatim_path(self) -> str:
        """uint8 per document: 1 where the write stage copies the record from its input line."""
        return f"{self.work_dir}/records-{self.index:05d}.verbatim"


def scan(tasks: list[ReadTask], work: Path, settings: Scanning, runner: JobRunner) -> tuple[list[ScanJob], list[dict]]:
    """Scan every task (a job each, weighted by its bytes); returns the jobs and each part's counts
    (`docs`, `rejected`, `no_words`, `bytes`, `source`)."""
    jobs = [ScanJob(index=i, task=t, work_dir=str(work), settings=settings) for i, t in enumerate(tasks)]
    return jobs, runner.run(scan_part, jobs, "scan", weights=[t.nbytes for t in tasks], unit="B")


def exact_input(text: str) -> bytes:
    """The NFC-normalized, trimmed text as UTF-8: what the exact hash digests."""
    return unicodedata.normalize("NFC", text).strip().encode("utf-8")


def hash_inputs(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(exact-hash input, its offsets, near-dup bytes, their offsets) of a batch, joined: uint8 and
    int64 arrays. ASCII text, the common case, is encoded once and needs no normalization (NFC
    leaves it unchanged): both inputs are then the same bytes, trimmed by the digest."""
    ascii = [t.encode("ascii") if t.isascii() else None for t in texts]
    if None not in ascii:
        buf, offsets = joined(ascii)
        return buf, offsets, buf, offsets
    exact = [b if b is not None else exact_input(t) for b, t in zip(ascii, texts)]
    near = [b if b is not None else near_normal_bytes(t) for b, t in zip(ascii, texts)]
    return (*joined(exact), *joined(near))


_PIECE_CUT = re.compile("[ \n]")


def normalized_pieces(text: str, piece_chars: int, exact) -> Iterator[bytes]:
    """As `hash_inputs` for one text, a piece at a time: the near-dup bytes of pieces of about `piece_chars`
    cut before an ASCII space or newline (a character no NFC/NFKD composition or lowercasing context
    looks across, so the pieces normalize as the whole does, and no word spans two), while `exact`
    (a BLAKE2b-128) takes in the exact hash's input; its digest is the exact hash once every piece
    has been taken."""
    pending, started = "", False  # whitespace held back until text follows it (strip() of the whole)
    start = 0
    while start < len(text):
        cut = _PIECE_CUT.search(text, start + piece_chars) if len(text) - start > piece_chars else None
        piece = text[start : cut.start() if cut else len(text)]
        start += len(piece)
        yield near_normal_bytes(piece)
        nfc = unicodedata.normalize("NFC", piece)
        if not started:
            nfc = nfc.lstrip()
            started = bool(nfc)
        body = nfc.rstrip()
        if body:
            exact.update(pending.encode("utf-8"))
            exact.update(body.encode("utf-8"))
            pending = nfc[len(body) :]
        else:
            pending += nfc


def scan_part(job: ScanJob) -> dict:
    """Read one task and write its index part and rejected rows; returns the part's counts."""
    meta_path = Path(job.parts_dir) / f"{part_name(job.index)}.json"
    if meta_path.exists():  # finished by an earlier, interrupted run
        return json.loads(meta_path.read_text())
    settings = job.settings
    hasher = MinHasher(settings.num_perm, settings.ngram)
    near = settings.bands > 0
    base = Path(job.parts_dir) / part_name(job.index)
    docs = rejected = no_words = 0
    with contextlib.ExitStack() as stack:
        # Not fsynced: a rerun rewrites any part whose .json (written last) is missing.
        suffixes = ARRAY_SUFFIXES + ((".bands",) if near else ())
        out = {s: stack.enter_context(atomic_write(f"{base}{s}", "wb", durable=False)) for s in suffixes}
        rej = stack.enter_context(atomic_write(job.rejected_path, "w", durable=False, encoding="utf-8"))
        records = stack.enter_context(atomic_write(job.records_path, "wb", durable=False))
        verbatim = stack.enter_context(atomic_write(job.verbatim_path, "wb", durable=False))
        batch = _Batch()
        id_end = head_end = 0
        out[".idpos"].write(np.zeros(1, np.uint64).tobytes())
        out[".headpos"].write(np.zeros(1, np.uint64).tobytes())

        def flush() -> None:
            nonlocal id_end, head_end, no_words
            if batch.records:
                records.write(b"\n".join(batch.records))  # no copy of a batch of one large document
                records.write(b"\n")
            verbatim.write(np.array(batch.verbatim, dtype=np.uint8))
            batch.records.clear()  # written: a large document's line is freed before its text is hashed
            if len(batch.texts) == 1 and len(batch.texts[0]) > LARGE_TEXT_CHARS:
                digest = hashlib.blake2b(digest_size=16)
                sb = hasher.large_document(
                    normalized_pieces(batch.texts[0], LARGE_TEXT_CHARS, digest), with_signatures=near
                )
                out[".exact"].write(digest.digest())
            else:
                exact_buf, exact_offsets, near_buf, near_offsets = hash_inputs(batch.texts)
                out[".exact"].write(blake2b_128(exact_buf, exact_offsets, strip=True))
                sb = hasher.of_joined(near_buf, near_offsets, with_signatures=near)
            if near:
                out[".bands"].write(band_hashes(sb.signatures, settings.bands, settings.rows))
            out[".counts"].write(sb.shingle_counts)  # arrays are written as they lie in memory: no copies
            no_words += int(np.count_nonzero(sb.shingle_counts == 0))
            out[".shingles"].write(sb.shingles)
            lines, offsets = id_lines(batch.ids)
            out[".ids"].write(lines)
            out[".idpos"].write((offsets[1:] + id_end).astype(np.uint64))
            id_end += int(offsets[-1])
            heads, offsets = joined(batch.heads)
            out[".heads"].write(heads)
            out[".headpos"].write((offsets[1:] + head_end).astype(np.uint64))
            head_end += int(offsets[-1])
            out[".lines"].write(np.array(batch.lines, dtype=np.uint64))
            batch.clear()

        for item in read_task(job.task, settings.text_field, settings.id_field):
            if type(item) is Document:
                if len(item.text) >= BATCH_BYTES and batch.texts:  # a large document is hashed alone, in pieces
                    flush()
                batch.add(item)
                docs += 1
                if batch.text_chars >= BATCH_BYTES or len(batch.texts) >= BATCH_DOCS:
                    flush()
            else:
                rej.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
                rejected += 1
        if batch.texts:
            flush()
    meta = {
        "docs": docs,
        "rejected": rejected,
        "no_words": no_words,
        "bytes": job.task.nbytes,
        "source": job.task.file.rel,
    }
    write_text_atomic(meta_path, json.dumps(meta))
    return meta


class _Batch:
    """The documents of a batch as columns: the Documents themselves die young, so the garbage
    collector never has a batch's worth of objects to look through again and again."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.texts: list[str] = []
        self.lines: list[int] = []
        self.records: list[bytes] = []  # of the documents that are not verbatim
        self.verbatim: list[bool] = []
        self.heads: list[bytes] = []  # `rows.head_fragment` of each document: its duplicates.jsonl row shows it
        self.text_chars = 0

    def add(self, doc: Document) -> None:
        self.ids.append(doc.id)
        self.texts.append(doc.text)
        self.lines.append(doc.line)
        self.verbatim.append(doc.verbatim)
        self.heads.append(head_fragment(doc))
        if not doc.verbatim:  # a verbatim record is read again from the input: the copy is not written
            self.records.append(doc.record)
        doc.record = b""  # the batch holds the only reference: a large line is freed once written
        self.text_chars += len(doc.text)

    def clear(self) -> None:
        self.__init__()
