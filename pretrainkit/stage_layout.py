"""The names of a command's output folder, defined once: what `pretrainkit.dataprep`'s stages write,
what `pretrainkit.output_folders` recognises and locks, and what `pretrainkit.remote.staging` leaves
out of an upload.

    OUT/part-00000.jsonl.zst    part_name(0) + KEPT_SUFFIX: a job's kept records (KEPT_GLOB: all of them)
    OUT/removed.jsonl           REMOVED_NAME: a row per removed document
    OUT/rejected.jsonl          REJECTED_NAME: a row per record the readers could not read
    OUT/stats.json              STATS_NAME: written last; a folder without it is no finished output
    OUT/.work/                  WORK_NAME: a run's resume files, with its plan (PLAN_MARKER)
    OUT/.pretrainkit-output.json  MARKER_NAME: which command owns the folder
    OUT/.pretrainkit-lock       LOCK_NAME: held while a run writes there
"""

from __future__ import annotations

WORK_NAME = ".work"
PLAN_MARKER = "plan.sha256"  # in WORK_NAME: the fingerprint of the plan its files belong to
STATS_NAME = "stats.json"
REMOVED_NAME = "removed.jsonl"
REJECTED_NAME = "rejected.jsonl"
MARKER_NAME = ".pretrainkit-output.json"
LOCK_NAME = ".pretrainkit-lock"

PART_PREFIX = "part-"
PART_DIGITS = 5
KEPT_SUFFIX = ".jsonl.zst"
KEPT_GLOB = f"{PART_PREFIX}*{KEPT_SUFFIX}"


def part_name(index: int) -> str:
    """`part-NNNNN`: the name of job `index`'s part, before its suffix (files sort in job order)."""
    return f"{PART_PREFIX}{index:0{PART_DIGITS}d}"


def part_index(name: str) -> int:
    """The job number of a part's file name (`part-00012.jsonl.zst` -> 12)."""
    return int(name[len(PART_PREFIX) : len(PART_PREFIX) + PART_DIGITS])
