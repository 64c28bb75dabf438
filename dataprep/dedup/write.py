"""Dedup's write stage: per read task, its kept records and its finished index part.

    written = write(scan_jobs, scans, resolved, removed_path, out_dir, runner)   # (kept records, index docs) per task

One job per read task copies the task's kept records, unchanged (`pretrainkit.dataprep.dedup.kept`),
and, in a thread of the same job, turns the task's index part into the finished index's, its kept
documents only, in place (`pretrainkit.dataprep.dedup.index.finish_part`); then the rest of the
task's scan files is deleted. While the workers write, a thread of the main process joins the
resolve stage's `duplicates.jsonl` pieces and the scan's rejected rows into the output. A job's
`written-NNNNN.json` marks it done; one that died after finishing its index part had begun has
its task scanned again (`part_files_whole`).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.dedup.index import (
    FINISHED_SUFFIXES,
    FinishJob,
    finish_part,
    part_files_whole,
    written_part_files,
)
from pretrainkit.dataprep.dedup.kept import WriteJob, write_kept
from pretrainkit.dataprep.dedup.scan import ScanJob, scan_part
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.files import atomic_write, write_concatenation_atomic
from pretrainkit.stage_layout import REJECTED_NAME, part_name


def write(
    scan_jobs: list[ScanJob], scans: list[dict], rows: list[str], removed_path: Path, out_dir: Path, runner: JobRunner
) -> list[tuple[int, int]]:
    """Write every task's outputs (`removed_path`: a flag per new document; `rows`: the
    duplicates.jsonl pieces, in order); returns (kept records, index documents) per task."""
    index_dir = out_dir / "index"
    firsts = np.concatenate(([0], np.cumsum([s["docs"] for s in scans], dtype=np.int64)))
    jobs = [
        _OutputJob(
            records=WriteJob(
                index=s.index,
                task=s.task,
                records_path=s.records_path,
                verbatim_path=s.verbatim_path,
                out_dir=str(out_dir),
            ),
            index=FinishJob(
                work_base=f"{s.parts_dir}/{part_name(s.index)}",
                index_base=str(index_dir / part_name(s.index)),
                docs=scan["docs"],
            ),
            scan=s,
            removed_path=str(removed_path),
            first=int(first),
            done_path=f"{s.work_dir}/written-{s.index:05d}.json",
        )
        for s, scan, first in zip(scan_jobs, scans, firsts)
    ]
    # duplicates.jsonl and rejected.jsonl are joined by a thread of this process while the workers
    # write and index (this process would otherwise copy them, hundreds of MB, with the workers idle).
    with ThreadPoolExecutor(1) as joiner:
        joined = [
            joiner.submit(write_concatenation_atomic, [Path(p) for p in rows], out_dir / "duplicates.jsonl"),
            joiner.submit(
                write_concatenation_atomic, [Path(s.rejected_path) for s in scan_jobs], out_dir / REJECTED_NAME
            ),
        ]
        written = runner.run(_write_outputs, jobs, "write", weights=[s.task.nbytes for s in scan_jobs], unit="B")
        for j in joined:
            j.result()
    return written


@dataclass(frozen=True)
class _OutputJob:
    records: WriteJob
    index: FinishJob
    scan: ScanJob  # run again where a run stopped while the job had begun finishing the index part
    removed_path: str  # uint8 per new document of the run, 1 where it was removed
    first: int  # position of the task's first document in the removed flags
    done_path: str  # (kept records, index documents), written once both are; marks the job finished


def _write_outputs(job: _OutputJob) -> tuple[int, int]:
    """A read task's kept records and its finished index part: (kept records, index documents).
    The index part (`finish_part`, made of the scan's files in place) is finished by a thread while
    this one compresses the records, so neither waits for the disk with the CPU idle. Then what is
    left of the scan's files of the task is deleted: here, while other jobs work, rather than all at
    the end with the workers idle (and pages the disk has not taken yet are dropped unwritten)."""
    done = Path(job.done_path)
    if done.exists():  # finished by an earlier, interrupted run
        return tuple(json.loads(done.read_text()))
    if not part_files_whole(job.index.work_base):  # an earlier run had begun finishing the part
        Path(f"{job.index.work_base}.json").unlink()
        scan_part(job.scan)
    keep = np.fromfile(job.removed_path, dtype=np.uint8, count=job.index.docs, offset=job.first) == 0
    lines = np.fromfile(f"{job.index.work_base}.lines", dtype=np.uint64).astype(
        np.int64
    )  # before finish_part takes the file
    arrays = written_part_files(job.index.work_base, job.scan.settings.bands)
    with ThreadPoolExecutor(1) as pool:
        # first the arrays no step reads any more (band and id hashes), in the thread: deleting a
        # file whose blocks are on disk can wait for the device to discard them
        deleted = pool.submit(_unlink, [p for p in arrays if not p.endswith(FINISHED_SUFFIXES)])
        index_docs = pool.submit(finish_part, job.index, keep)
        counts = write_kept(job.records, keep, lines), index_docs.result()
        deleted.result()
    with atomic_write(done, "w", durable=False) as f:
        f.write(json.dumps(counts))
    _unlink(
        arrays + [job.records.records_path, job.records.verbatim_path]
    )  # the arrays are the index's now, unless it was finished before a rescan
    return counts


def _unlink(paths: list[str]) -> None:
    for path in paths:
        Path(path).unlink(missing_ok=True)
