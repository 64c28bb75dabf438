"""Dedup's resolve stage: per range of keys, which documents are removed and their duplicates.jsonl rows.

    resolved = resolve(parts, exact, (labels_path, links_by_range), work, runner, budget, removed_path)

One job per range of `budget.range_docs` keys (new documents only) reads its range's exact pairs
(`pretrainkit.dataprep.dedup.pairs`, by range of the later key), its labels (the cluster stage's
file, `pretrainkit.dataprep.dedup.clusters`) and its documents' links (the verify stage's pair files
by range), and writes its piece of the removed flags (uint8 per key) and of `duplicates.jsonl`
(`pretrainkit.dataprep.dedup.rows`). An exact duplicate names its first occurrence, as
`duplicate_of` and as `matched`. A near one names its cluster's smallest key (the kept document)
as `duplicate_of`, with the Jaccard of the two (`similarity`), which may be below the threshold:
clusters are transitive. So it also names the document whose link put it in the cluster
(`matched`: the first in input order of the documents it is linked to) with their Jaccard
(`matched_similarity`, at least the threshold). Nothing holds a flag per document of the run in
memory: the pieces are concatenated, the flags into `removed_path`, the rows by the write stage.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.budget import DedupBudget
from pretrainkit.dataprep.dedup.clusters import LABEL
from pretrainkit.dataprep.dedup.index import Parts
from pretrainkit.dataprep.dedup.match import PairFiles
from pretrainkit.dataprep.dedup.pairs import distinct, pack, read_partition
from pretrainkit.dataprep.dedup.rows import Duplicates, write_duplicates
from pretrainkit.dataprep.dedup.similarity import pair_similarities
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.files import atomic_write, write_concatenation_atomic, write_text_atomic


def resolve(
    parts: Parts,
    exact: PairFiles,
    near: tuple[Path, PairFiles] | None,
    work: Path,
    runner: JobRunner,
    budget: DedupBudget,
    removed_path: Path,
) -> dict:
    """Write `removed_path` (a flag per new document); returns each range job's (exact, near) counts
    (`found`) and its duplicates.jsonl piece (`rows`), in key order. `near`: the cluster labels and
    the links by range; None where there are no links."""
    resolve_dir = work / f"resolve-{budget.range_docs}"
    ranges = math.ceil(parts.total / budget.range_docs)
    jobs = [
        _ResolveJob(
            lo=lo,
            hi=hi,
            exact_dir=str(exact.directory),
            exact_partition=r,
            labels_path=str(near[0]) if near else None,
            links_dir=str(near[1].directory) if near else None,
            removed_path=str(resolve_dir / f"{r:05d}.removed"),
            rows_path=str(resolve_dir / f"{r:05d}.jsonl"),
            done_path=str(resolve_dir / f"{r:05d}.json"),
            parts=parts,
            verify_pairs=budget.verify_pairs,
            shingle_bytes=budget.shingle_bytes,
            describe_rows=budget.describe_rows,
        )
        for r in range(parts.first_new_key // budget.range_docs, ranges)
        for lo, hi in [(max(r * budget.range_docs, parts.first_new_key), min((r + 1) * budget.range_docs, parts.total))]
        if lo < hi
    ]
    found = runner.run(_resolve_range, jobs, "resolve", weights=[j.hi - j.lo for j in jobs], unit="doc")
    write_concatenation_atomic([Path(j.removed_path) for j in jobs], removed_path)
    return {"found": found, "rows": [j.rows_path for j in jobs]}


@dataclass(frozen=True)
class _ResolveJob:
    lo: int  # keys lo .. hi - 1, new documents all, within one range of the exact pair files
    hi: int
    exact_dir: str
    exact_partition: int
    labels_path: str | None  # None: no near-duplicate links (or --no-near)
    links_dir: str | None  # the links by range, partition = range (`exact_partition`)
    removed_path: str
    rows_path: str
    done_path: str
    parts: Parts
    verify_pairs: int
    shingle_bytes: int
    describe_rows: int


def _resolve_range(job: _ResolveJob) -> tuple[int, int]:
    """Removed flags (uint8 per key) and duplicates.jsonl rows of keys lo .. hi - 1; returns the
    (exact, near) duplicates among them."""
    done = Path(job.done_path)
    if done.exists():  # finished by an earlier, interrupted run
        return tuple(json.loads(done.read_text()))
    exact = read_partition(Path(job.exact_dir), job.exact_partition).astype(np.int64)
    exact = exact[exact[:, 0] >= job.lo]  # the range's keys below lo are old documents
    members = roots = matched = np.empty(0, np.int64)
    if job.labels_path is not None:
        keys = np.arange(job.lo, job.hi, dtype=np.int64)
        label = np.fromfile(job.labels_path, dtype=LABEL, count=job.hi - job.lo, offset=job.lo * LABEL.itemsize)
        linked = label != keys
        members, roots = keys[linked], label[linked].astype(np.int64)
        matched = _first_links(read_partition(Path(job.links_dir), job.exact_partition), members)
    removed = np.zeros(job.hi - job.lo, dtype=np.uint8)
    removed[exact[:, 0] - job.lo] = 1
    removed[members - job.lo] = 1
    parts = job.parts.open()
    similarity, matched_similarity = (
        pair_similarities(
            np.stack([members, other], axis=1), parts, job.parts.offsets, job.verify_pairs, job.shingle_bytes
        )
        for other in (roots, matched)
    )
    with atomic_write(job.removed_path, durable=False) as f:
        f.write(removed.tobytes())
    ones = np.ones(len(exact))
    dups = Duplicates(
        keys=np.concatenate([exact[:, 0], members]),
        dup_of=np.concatenate([exact[:, 1], roots]),
        kinds=np.concatenate([np.zeros(len(exact), np.int8), np.ones(len(members), np.int8)]),
        sims=np.concatenate([ones, similarity]),
        matched=np.concatenate([exact[:, 1], matched]),
        matched_sims=np.concatenate([ones, matched_similarity]),
    )
    write_duplicates(Path(job.rows_path), dups, parts, job.parts.offsets, job.describe_rows)
    counts = (len(exact), len(members))
    write_text_atomic(done, json.dumps(counts))
    return counts


def _first_links(links: np.ndarray, members: np.ndarray) -> np.ndarray:
    """For each of `members` (sorted keys, each with a link), the smallest key it is linked to, given
    `links`: (key, linked key) pairs of the range's keys, in any order."""
    first = distinct(pack(links[:, 0], links[:, 1]))  # sorted by key, then by linked key
    keys = (first >> np.uint64(32)).astype(np.int64)
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1]))) if len(keys) else np.empty(0, np.int64)
    at = starts[np.searchsorted(keys[starts], members)]
    return (first[at] & np.uint64(0xFFFFFFFF)).astype(np.int64)
