"""One read task tested against the evaluation index: its kept records, contaminated rows and rejections.

    counts = check_task(CheckJob(index, task, eval_dir, ngram, ...))   # a job of `runner.run`

The task's documents are read in batches (`pretrainkit.dataprep.readers`); one compiled loop
(`ngrams.first_hits`) normalizes each, hashes its n-grams and looks them up in the index's sorted
hashes, so Python does nothing per n-gram. A document with a hit has its hits confirmed on the
tokens (`EvalIndex.confirm`), the first confirmed one in token order making its `contaminated.jsonl`
row; one whose hits are all collisions is kept (and counted). The job writes
`OUT/part-NNNNN.jsonl.zst` (the kept records, each the line `ptk dedup` writes for it, in input
order; none with `report_only`) and, in the work directory, its contaminated and rejected rows;
its `done-NNNNN.json` (its counts) is written last and marks it finished: a rerun takes the counts.
"""

from __future__ import annotations

import contextlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.compressed_parts import compressed_part
from pretrainkit.dataprep.decontaminate.evalindex import EvalIndex, Match
from pretrainkit.dataprep.decontaminate.ngrams import first_hits, gram_hashes, joined, normalized_words
from pretrainkit.dataprep.readers import Document, ReadTask, described, in_batches, read_task
from pretrainkit.files import atomic_write, write_text_atomic
from pretrainkit.stage_layout import KEPT_SUFFIX, part_name

BATCH_CHARS = 1 << 20  # texts per compiled call: large enough that the call's cost is nothing
BATCH_DOCS = 8192


@dataclass(frozen=True)
class CheckJob:
    index: int
    task: ReadTask
    eval_dir: str
    ngram: int
    text_field: str
    id_field: str
    report_only: bool
    out_dir: str
    work_dir: str

    @property
    def contaminated_path(self) -> str:
        return f"{self.work_dir}/contaminated-{self.index:05d}.jsonl"

    @property
    def rejected_path(self) -> str:
        return f"{self.work_dir}/rejected-{self.index:05d}.jsonl"

    @property
    def done_path(self) -> str:
        return f"{self.work_dir}/done-{self.index:05d}.json"

    @property
    def kept_path(self) -> str:
        return f"{self.out_dir}/{part_name(self.index)}{KEPT_SUFFIX}"


def check_task(job: CheckJob) -> dict:
    """Test the task's documents; returns its counts (`docs`, `kept`, `contaminated`, `rejected`,
    `shorter_than_ngram`, `hash_collisions`, `by_eval_file`)."""
    done = Path(job.done_path)
    if done.exists():  # finished by an earlier, interrupted run
        return json.loads(done.read_text())
    index = EvalIndex.open(job.eval_dir)
    counts = Counter()
    by_eval_file: Counter = Counter()
    with contextlib.ExitStack() as stack:
        rows = stack.enter_context(atomic_write(job.contaminated_path, "w", durable=False, encoding="utf-8"))
        rejected = stack.enter_context(atomic_write(job.rejected_path, "w", durable=False, encoding="utf-8"))
        kept = None
        if not job.report_only:
            raw = stack.enter_context(atomic_write(job.kept_path))
            kept = stack.enter_context(compressed_part(raw))

        def check(batch: list[Document]) -> None:
            first, words = first_hits([d.text for d in batch], job.ngram, index.hashes, index.filter)  # words' weight
            kept_records: list[bytes] = []
            counts["shorter_than_ngram"] += int(np.count_nonzero(words < job.ngram))
            for doc, at in zip(batch, first.tolist()):
                match = _confirmed(index, doc.text, at, job.ngram) if at >= 0 else None
                if match is None:
                    counts["kept"] += 1
                    counts["hash_collisions"] += at >= 0
                    kept_records.append(doc.record)
                    continue
                counts["contaminated"] += 1
                by_eval_file[match.eval_file] += 1
                row = {"id": doc.id, "source": doc.source, "line": doc.line, "eval_id": match.eval_id}
                row |= {"eval_file": match.eval_file, "ngram": joined(match.ngram)} | described(doc)
                rows.write(json.dumps(row, ensure_ascii=False) + "\n")
            if kept is not None and kept_records:
                kept.write(b"\n".join(kept_records) + b"\n")

        items = read_task(job.task, job.text_field, job.id_field, records=not job.report_only)
        for batch in in_batches(items, BATCH_DOCS, BATCH_CHARS):
            docs = []
            for item in batch:
                if type(item) is not Document:
                    rejected.write(json.dumps(item.to_json(), ensure_ascii=False) + "\n")
                    counts["rejected"] += 1
                    continue
                counts["docs"] += 1
                docs.append(item)
            if docs:
                check(docs)
    result = {
        k: counts[k] for k in ("docs", "kept", "contaminated", "rejected", "shorter_than_ngram", "hash_collisions")
    }
    result["by_eval_file"] = dict(sorted(by_eval_file.items()))
    write_text_atomic(done, json.dumps(result))
    return result


def _confirmed(index: EvalIndex, text: str, first: int, ngram: int) -> Match | None:
    """The first of the document's hits, from token position `first` on, that its tokens confirm."""
    hashes = gram_hashes(text, ngram)
    at = np.searchsorted(index.hashes, hashes[first:])
    at = np.minimum(at, len(index.hashes) - 1)
    hits = first + np.flatnonzero(index.hashes[at] == hashes[first:])
    words = normalized_words(text)
    for position in hits.tolist():
        if (match := index.confirm(words, position, ngram, hashes[position])) is not None:
            return match
    return None
