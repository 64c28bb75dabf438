"""Tokenize raw corpora into a shard set, in two stages of independent jobs that resume after a kill.

    options = TokenizeOptions(format="arrow", shard_tokens=32 << 20)
    manifest = tokenize_corpus(["corpus/"], Path("shards"), "tokenizer.json", options, workers=4)
    manifest = tokenize_corpus([...], ..., runner=runner)     # any `pretrainkit.dataprep.executors` runner (Ray)

    ss = write_text_shards(["first doc", "second doc"], out_dir, "tokenizer.json")   # tests: one call

1. encode  (per ~4 MB of input, in input order)  read the records, encode their texts, write
           `OUT/.work/encoded-NNNNN.*`: tokens, token count per document, ids, rejected rows, and
           where a record of the job has a `url` (`ptk extract`'s pages), every document's url
           (`.urls`, null for one without); then `.json` (its counts), which marks the job finished.
2. shards  (per shard)  the token counts give every batch and shard boundary (`ShardPlan`);
           each job writes one shard from the encoded files, then `OUT/.work/shard-NNNNN.json`,
           its manifest entry, which marks the shard finished.
Then `OUT/rejected.jsonl` (the jobs' rows, in input order) and, last, `OUT/manifest.json`. Where
any job wrote urls, every shard holds a url per document and the manifest says `"urls": true`;
otherwise the shards and manifest have no trace of urls.

Boundaries depend only on the documents, so shards and manifest are byte-identical for any
executor and worker count. Every input record is either in the shards or a row of
`rejected.jsonl`; the manifest's `provenance.records` adds up. Killed at any moment, the same
command run again keeps the finished encode jobs and shards (while inputs, options and tokenizer
are unchanged), redoes the rest and writes the same bytes. Memory per job: one batch of
`ENCODE_CHARS` characters and the tokenizer's working set for it (encode: texts only, records
are not kept; a longer text is encoded a group of pieces at a time, its tokens written as they
come); the ids of one shard's documents and one record batch of tokens (shards).
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import itertools
import json
import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import ClassVar

import numpy as np
from tokenizers import Tokenizer

from pretrainkit import __version__
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.kernels.ids import id_line
from pretrainkit.dataprep.readers import (
    Document,
    InputFile,
    ReadTask,
    Rejected,
    nothing_usable,
    plan_read_tasks,
    read_task,
    reason_kind,
    refuse_overlap,
    writable_url,
)
from pretrainkit.dataprep.stage import Run, Stage, run_stage
from pretrainkit.errors import UserError
from pretrainkit.files import atomic_write, sha256_file, write_text_atomic, writing_into
from pretrainkit.output_folders import TOKENIZE, Kind, output_folder
from pretrainkit.remote.staging import shown
from pretrainkit.shards.formats import DEFAULT_BATCH_TOKENS, DEFAULT_SHARD_TOKENS, FORMATS, MANIFEST_NAME, token_dtype
from pretrainkit.shards.manifest import ShardEntry, build_manifest, write_manifest
from pretrainkit.shards.tokenizer import LoadedTokenizer, load_tokenizer
from pretrainkit.shards.writer import ShardPlan, remove_stale_shards, write_shard, write_shards
from pretrainkit.stage_layout import REJECTED_NAME

ENCODE_CHARS = 1 << 18  # text per encode_batch call: its working set (~100 bytes per token) is per call
PIECE_CHARS = 1 << 16  # a longer document is encoded in pieces of about this size
ENCODE_JOB_BYTES = 4 << 20  # input per encode job
HASH_JOB_BYTES = 64 << 20  # input per hashing job


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


@dataclass(frozen=True)
class Tokenize:
    """The tokenize stage's options: the tokenizer and what changes the shards' bytes."""

    tokenizer: str
    options: TokenizeOptions


@dataclass(frozen=True)
class TokenizeStage(Stage):
    """`provenance` is merged into the manifest's; with an "inputs" entry, the inputs are not hashed again."""

    provenance: dict | None = None
    name: ClassVar[str] = "tokenize"
    kind: ClassVar[Kind] = TOKENIZE
    record_name: ClassVar[str] = MANIFEST_NAME

    def options_json(self, options: Tokenize) -> dict:
        return {"tokenizer": shown(options.tokenizer), **asdict(options.options)}  # as given: a URL

    def with_fields(self, options: Tokenize, text_field: str, id_field: str) -> Tokenize:
        return replace(options, options=replace(options.options, text_field=text_field, id_field=id_field))

    def named_files(self, options: Tokenize) -> list[str]:
        return [options.tokenizer]

    def prepare(self, options: Tokenize) -> LoadedTokenizer:
        return load_tokenizer(options.tokenizer, options.options.eos_token)

    def checked_files(self, run: Run) -> list[str]:
        return [str(run.state.path)]

    def plan_jobs(self, run: Run) -> list[list[ReadTask]]:
        """Consecutive read tasks of about `ENCODE_JOB_BYTES`: an encode job each."""
        return _consecutive_groups(plan_read_tasks(run.files, ENCODE_JOB_BYTES), lambda t: t.nbytes, ENCODE_JOB_BYTES)

    def plan(self, run: Run) -> dict:
        return {
            "jobs": [[(t.file.path, t.start, t.end) for t in g] for g in run.jobs],
            "options": asdict(run.options.options),
            "tokenizer": run.state.sha256,
            "version": __version__,
        }

    def run_jobs(self, run: Run) -> dict:
        """The inputs' hashes (unless the provenance has them) and the encode jobs' counts."""
        tok, options = run.state, run.options.options
        inputs_meta = (self.provenance or {}).get("inputs") or input_hashes(run.files, run.runner)
        encode_jobs = [
            EncodeJob(
                i,
                tuple(g),
                str(run.work),
                str(tok.path),
                tok.sha256,
                options.eos_token,
                token_dtype(tok.vocab_size).str,
                options.text_field,
                options.id_field,
            )
            for i, g in enumerate(run.jobs)
        ]
        encoded = run.runner.run(
            encode_part, encode_jobs, "tokenize", weights=[j.nbytes for j in encode_jobs], unit="B"
        )
        return {"inputs": inputs_meta, "encoded": encoded}

    def row_pieces(self, run: Run, name: str) -> list[Path]:
        return [run.work / f"{_encoded_name(i)}.rejected" for i in range(len(run.jobs))]

    def refuse_unusable(self, run: Run, results: dict) -> None:
        """A shard set of no tokens is no use to anyone: no shards, no manifest."""
        encoded = results["encoded"]
        if sum(e["docs"] for e in encoded) == 0:
            reasons = sum((Counter(e["reasons"]) for e in encoded), Counter())
            raise nothing_usable(run.inputs, reasons, run.out_dir / REJECTED_NAME)

    def after_rows(self, run: Run, results: dict) -> dict:
        """The shard jobs, each a shard from the encoded files; what earlier runs left of other shards removed."""
        dtype = token_dtype(run.state.vocab_size)
        shard_jobs = _plan_shards(results["encoded"], run.options.options, str(run.out_dir), str(run.work), dtype)
        entries = run.runner.run(
            write_shard_part, shard_jobs, "write shards", weights=[j.tokens for j in shard_jobs], unit="tok"
        )
        remove_stale_shards(run.out_dir, entries)
        return dict(results, entries=entries)

    def stats(self, run: Run, results: dict) -> dict:
        """The manifest, its provenance naming the inputs and counting the records."""
        options, encoded = run.options.options, results["encoded"]
        docs = sum(e["docs"] for e in encoded)
        rejected = sum(sum(e["reasons"].values()) for e in encoded)
        provenance = {
            "pretrainkit_version": __version__,
            "inputs": results["inputs"],
            "options": asdict(options),
            "records": {"input": docs + rejected, "tokenized": docs, "rejected": rejected},
            **(self.provenance or {}),
        }
        dtype = token_dtype(run.state.vocab_size)
        urls = _with_urls(encoded)
        return build_manifest(options.format, dtype.name, run.state.info, results["entries"], provenance, urls)

    def publish(self, run: Run, stats: dict) -> None:
        write_manifest(run.out_dir, stats)

    def result(self, run: Run, stats: dict, results: dict) -> dict:
        return stats

    def summary(self, result: dict, out_dir: Path, seconds: float) -> str:
        t, rec = result["totals"], result["provenance"]["records"]
        per_token = t["bytes"] / t["tokens"] if t["tokens"] else 0.0
        return (
            f"{rec['input']} records: {rec['tokenized']} tokenized, "
            f"{rec['rejected']} rejected (see {out_dir / REJECTED_NAME})\n"
            f"wrote {t['tokens']} tokens in {t['shards']} {result['format']} shards, {t['bytes']} bytes "
            f"({per_token:.2f} bytes/token, dtype {result['dtype']}) to {out_dir}"
        )


def tokenize_corpus(
    inputs: list[str],
    out_dir: str | Path,
    tokenizer_path: str,
    options: TokenizeOptions,
    workers: int = 1,
    provenance: dict | None = None,
    runner: JobRunner | None = None,
) -> dict:
    """Write `out_dir` (shards, rejected.jsonl, then manifest.json); return the manifest. The jobs run
    on `runner` (an entered runner), else on `workers` local processes. `provenance` is merged into
    the manifest's; with an "inputs" entry, the inputs are not hashed again."""
    stage, settings = TokenizeStage(provenance), Tokenize(tokenizer_path, options)
    if runner is not None:
        return run_stage(stage, inputs, out_dir, settings, runner)
    out_dir = Path(out_dir)
    refuse_overlap(inputs, out_dir)
    # held outside the local runner: its workers stop before temporaries are swept
    with output_folder(out_dir, TOKENIZE), writing_into(out_dir, *stage.owned(out_dir)), LocalRunner(workers) as local:
        return run_stage(stage, inputs, out_dir, settings, local)


def input_hashes(files: list[InputFile], runner: JobRunner) -> list[dict]:
    """Provenance of inputs: path relative to its input root, size and sha256 (no absolute paths)."""
    groups = _consecutive_groups(files, lambda f: f.size, HASH_JOB_BYTES)
    hashes = runner.run(
        _sha256_files,
        [tuple(f.path for f in g) for g in groups],
        "hash inputs",
        weights=[sum(f.size for f in g) for g in groups],
        unit="B",
    )
    return [{"path": f.rel, "bytes": f.size, "sha256": h} for f, h in zip(files, itertools.chain.from_iterable(hashes))]


def _sha256_files(paths: tuple[str, ...]) -> list[str]:
    return [sha256_file(p) for p in paths]


def _consecutive_groups(items: Sequence, size: Callable, target: int) -> list[list]:
    """Consecutive items in groups of at least `target` bytes (the last may be smaller)."""
    groups: list[list] = []
    current: list = []
    total = 0
    for item in items:
        current.append(item)
        total += size(item)
        if total >= target:
            groups.append(current)
            current, total = [], 0
    if current:
        groups.append(current)
    return groups


def _encoded_name(index: int) -> str:
    return f"encoded-{index:05d}"


@dataclass(frozen=True)
class EncodeJob:
    index: int
    tasks: tuple[ReadTask, ...]
    work_dir: str
    tokenizer_path: str
    tokenizer_sha256: str
    eos_token: str | None
    dtype: str
    text_field: str
    id_field: str

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.tasks)


ENCODED_SUFFIXES = (".tokens", ".lengths", ".ids", ".rejected")


def encode_part(job: EncodeJob) -> dict:
    """Read and encode one job's records into its encoded files; returns its counts."""
    base = Path(job.work_dir) / _encoded_name(job.index)
    done = Path(f"{base}.json")
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    encode = _encoder(job.tokenizer_path, job.tokenizer_sha256, job.eos_token, job.dtype)
    docs = tokens = 0
    reasons: Counter = Counter()
    urls: list[str | None] = []  # one per kept document: a job's few thousand, held until it ends
    with contextlib.ExitStack() as stack:
        # Not fsynced: a rerun rewrites any job whose .json (written last) is missing.
        out = {s: stack.enter_context(atomic_write(f"{base}{s}", "wb", durable=False)) for s in ENCODED_SUFFIXES}
        for items in _record_batches(job.tasks, job.text_field, job.id_field):
            lengths = encode([d.text for d in items if isinstance(d, Document)], out[".tokens"].write)
            kept_ids: list[bytes] = []
            rows: list[bytes] = []
            k = 0
            for item in items:
                if isinstance(item, Document):
                    k += 1
                    if lengths[k - 1]:
                        kept_ids.append(id_line(item.id))
                        urls.append(writable_url(item))
                        continue
                    item = Rejected(item.source, item.line, "text encodes to no tokens", item.id)
                rows.append((json.dumps(item.to_json(), ensure_ascii=False) + "\n").encode("utf-8"))
                reasons[reason_kind(item.reason)] += 1
            out[".lengths"].write(lengths[lengths > 0].astype(np.uint32).tobytes())
            out[".ids"].write(b"".join(kept_ids))
            out[".rejected"].write(b"".join(rows))
            docs, tokens = docs + len(kept_ids), tokens + int(lengths.sum())
    with_urls = sum(url is not None for url in urls)
    if with_urls:  # not fsynced, as the others
        with atomic_write(f"{base}.urls", "wb", durable=False) as f:
            f.write("".join(json.dumps(url) + "\n" for url in urls).encode("ascii"))
    meta = {"docs": docs, "tokens": tokens, "reasons": dict(sorted(reasons.items())), "urls": with_urls}
    write_text_atomic(done, json.dumps(meta))
    return meta


def _record_batches(tasks: Iterable[ReadTask], text_field: str, id_field: str) -> Iterator[list]:
    """Records in input order, in lists holding about ENCODE_CHARS characters of text."""
    items: list = []
    chars = 0
    for task in tasks:
        for item in read_task(task, text_field, id_field, records=False):
            items.append(item)
            chars += len(item.text) if isinstance(item, Document) else 0
            if chars >= ENCODE_CHARS:
                yield items
                items, chars = [], 0
    if items:
        yield items


class _Encoder:
    """Texts in, token count per text out; the tokens, back to back, go to `write` a group of
    pieces at a time (never the whole of a long text's tokens at once).

    A text longer than `piece_chars` is encoded in pieces, a group of pieces of about `ENCODE_CHARS`
    at a time, so memory follows the piece, not the document (the `tokenizers` library holds ~100
    bytes per token of a text it encodes). A cut is made only before a space between two word
    characters where the tokenizer gives the same tokens for the text around it whole and cut; where
    no such cut is found nearby (e.g. a normalizer that prepends to every input), the rest of the text
    is encoded whole."""

    def __init__(self, tokenizer: Tokenizer, dtype: np.dtype, piece_chars: int = PIECE_CHARS):
        self.tokenizer = tokenizer
        self.encode_batch = _fastest_encode_batch(tokenizer)
        self.dtype = dtype
        self.piece_chars = piece_chars

    def __call__(self, texts: list[str], write: Callable[[np.ndarray], object]) -> np.ndarray:
        lengths = np.zeros(len(texts), dtype=np.int64)
        group: list[str] = []
        owners: list[int] = []

        def encode_group() -> None:
            encodings = self.encode_batch(group, add_special_tokens=False)
            counts = np.fromiter(map(len, encodings), dtype=np.int64, count=len(encodings))
            np.add.at(lengths, owners, counts)
            write(
                np.fromiter(
                    itertools.chain.from_iterable(e.ids for e in encodings), dtype=self.dtype, count=int(counts.sum())
                )
            )
            group.clear()
            owners.clear()

        chars = 0
        for i, text in enumerate(texts):
            for piece in self._pieces(text):  # lazily: one piece of a long text exists at a time, beside it
                group.append(piece)
                owners.append(i)
                chars += len(piece)
                if chars >= ENCODE_CHARS:
                    encode_group()
                    chars = 0
        if group:
            encode_group()
        return lengths

    def _pieces(self, text: str) -> Iterator[str]:
        start = 0
        while (
            len(text) - start > self.piece_chars and (cut := self._safe_cut(text, start + self.piece_chars)) is not None
        ):
            yield text[start:cut]
            start = cut
        yield text[start:] if start else text

    def _safe_cut(self, text: str, at: int) -> int | None:
        def ids(s: str) -> list[int]:
            return self.tokenizer.encode(s, add_special_tokens=False).ids

        for tried, m in enumerate(_CUT.finditer(text, at, at + self.piece_chars)):
            if tried == 8:
                break
            c, lo, hi = m.start(), max(0, m.start() - _CUT_CONTEXT), m.start() + _CUT_CONTEXT
            if ids(text[lo:hi]) == ids(text[lo:c]) + ids(text[c:hi]):
                return c
        return None


_CUT = re.compile(r"(?<=\w) (?=\w)")
_CUT_CONTEXT = 256  # characters each side of a cut that must tokenize the same whole and cut


@functools.lru_cache(maxsize=4)
def _encoder(path: str, sha256: str, eos_token: str | None, dtype: str) -> _Encoder:
    """One tokenizer per worker process and tokenizer file (the sha256 keys out a changed file)."""
    return _Encoder(load_tokenizer(path, eos_token).tokenizer, np.dtype(dtype))


def _fastest_encode_batch(tokenizer: Tokenizer) -> Callable:
    """`encode_batch_fast` (tokenizers >= 0.20: same ids, no character offsets), else `encode_batch`."""
    return getattr(tokenizer, "encode_batch_fast", tokenizer.encode_batch)


@dataclass(frozen=True)
class ShardJob:
    index: int
    pieces: tuple[tuple[int, int, int], ...]  # (encode job, first document, end document) in its files
    tokens: int
    out_dir: str
    work_dir: str
    fmt: str
    dtype: str
    batch_tokens: int
    urls: bool  # whether the set holds urls (some encode job wrote them)


def _with_urls(encoded: list[dict]) -> bool:
    """Whether a url column is written: some kept document has a url."""
    return any(e.get("urls", 0) for e in encoded)


def _plan_shards(
    encoded: list[dict], options: TokenizeOptions, out_dir: str, work: str, dtype: np.dtype
) -> list[ShardJob]:
    """One job per shard, naming the pieces of the encode jobs' files its documents are in."""
    plan = ShardPlan(options.shard_tokens, options.batch_tokens)
    for i in range(len(encoded)):
        plan.add(np.fromfile(Path(work) / f"{_encoded_name(i)}.lengths", dtype=np.uint32))
    starts = np.concatenate(([0], np.cumsum([e["docs"] for e in encoded], dtype=np.int64))).tolist()
    jobs, urls = [], _with_urls(encoded)
    for k, ((first, end), tokens) in enumerate(zip(plan.finish(), plan.tokens)):
        pieces = []
        i = bisect.bisect_right(starts, first) - 1
        while i < len(encoded) and starts[i] < end:
            if starts[i + 1] > first:
                pieces.append((i, max(first, starts[i]) - starts[i], min(end, starts[i + 1]) - starts[i]))
            i += 1
        jobs.append(
            ShardJob(k, tuple(pieces), tokens, out_dir, work, options.format, dtype.str, options.batch_tokens, urls)
        )
    return jobs


class _EncodedDocs:
    """The documents of one shard, read from the encode jobs' files."""

    def __init__(self, job: ShardJob):
        self._job = job
        dtype = np.dtype(job.dtype)
        lengths, self._tokens = [], []
        for i, first, end in job.pieces:
            base = Path(job.work_dir) / _encoded_name(i)
            part = np.fromfile(f"{base}.lengths", dtype=np.uint32)
            start, stop = int(part[:first].sum(dtype=np.int64)), int(part[:end].sum(dtype=np.int64))
            self._tokens.append(
                np.memmap(f"{base}.tokens", dtype=dtype, mode="r", offset=start * dtype.itemsize, shape=(stop - start,))
                if stop > start
                else np.empty(0, dtype)
            )
            lengths.append(part[first:end])
        self.lengths = np.concatenate(lengths) if lengths else np.empty(0, np.uint32)
        self._offsets = np.concatenate(([0], np.cumsum(self.lengths, dtype=np.int64)))

    def ids(self) -> list[str]:
        return self._lines(".ids")

    def urls(self) -> list[str | None]:
        """Each document's url (None for one without; every one, from a job that wrote no `.urls`)."""
        return self._lines(".urls")

    def _lines(self, suffix: str) -> list:
        """The JSON values of this shard's documents in the encode jobs' `suffix` files, a line each;
        None for each of a job's documents where it has no such file."""
        values: list = []
        for i, first, end in self._job.pieces:
            path = Path(self._job.work_dir) / f"{_encoded_name(i)}{suffix}"
            if not path.exists():
                values += [None] * (end - first)
                continue
            with open(path, "rb") as f:
                values += [json.loads(line) for line in itertools.islice(f, first, end)]
        return values

    def tokens(self, a: int, b: int) -> np.ndarray:
        """Tokens of documents [a, b) of the shard, back to back."""
        lo, hi = int(self._offsets[a]), int(self._offsets[b])
        out, pos = [], 0
        for piece in self._tokens:
            if hi > pos and lo < pos + len(piece):
                out.append(piece[max(lo - pos, 0) : hi - pos])
            pos += len(piece)
        return np.concatenate(out) if out else np.empty(0, self._tokens[0].dtype if self._tokens else np.uint16)


def write_shard_part(job: ShardJob) -> ShardEntry:
    """Write one shard and its manifest entry (kept in the work directory until the manifest)."""
    entry_path = Path(job.work_dir) / f"shard-{job.index:05d}.json"
    if entry_path.exists():  # finished by an earlier, interrupted run
        entry = ShardEntry(**json.loads(entry_path.read_text()))
        shard = Path(job.out_dir) / entry.file
        if shard.is_file() and shard.stat().st_size == entry.bytes:
            return entry
    docs = _EncodedDocs(job)
    ids = docs.ids()
    urls = docs.urls() if job.urls else None
    entry = write_shard(
        job.out_dir,
        job.index,
        job.fmt,
        np.dtype(job.dtype),
        job.batch_tokens,
        docs.lengths,
        lambda a, b: (ids[a:b], docs.tokens(a, b)),
        (lambda a, b: urls[a:b]) if urls is not None else None,
    )
    write_text_atomic(entry_path, json.dumps(asdict(entry)))
    return entry


def write_text_shards(texts: Iterable[str], out_dir: str | Path, tokenizer_path: str | Path, **kwargs):
    """Encode texts with a tokenizer file and write them as a complete shard set; returns its ShardSet."""
    tok = load_tokenizer(tokenizer_path)
    docs = [e.ids for e in _fastest_encode_batch(tok.tokenizer)(list(texts), add_special_tokens=False)]
    return write_shards(
        docs,
        out_dir,
        vocab_size=tok.vocab_size,
        eos_id=tok.eos_id,
        tokenizer_sha256=tok.sha256,
        eos_token=tok.eos_token,
        vocab_fingerprint=tok.vocab_fingerprint,
        **kwargs,
    )
