"""Where benchmarks put their numbers: `bench/results/<name>.json`, plus resident-memory helpers."""

from __future__ import annotations

import json
import resource
import subprocess
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def write_result(name: str, result: dict) -> Path:
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")
    return path


def peak_rss_mb() -> int:
    """Peak RSS of this process and of the largest finished child process, in MB (Linux: KiB units)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    return round(max(own, children) / 1024)


def child_pids() -> dict[int, list[int]]:
    """Every process's children, by parent pid (from /proc)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return children


def rss_kb(pid: int) -> int:
    """Resident memory of one process (0 if it is gone)."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def tree_pids(pid: int) -> list[int]:
    """`pid` and all its descendants (one pass over /proc)."""
    children = child_pids()
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += children.get(p, [])
    return found


def peak_tree_rss_kb(proc: subprocess.Popen, every: float = 0.02, rescan: float = 0.5) -> int:
    """Peak resident memory of `proc` and its descendants until it exits, sampled every `every`
    seconds. The process tree is found again every `rescan` seconds only: a pass over /proc is
    hundreds of reads, and done every sample it takes a good part of a core from the run measured."""
    peak, pids, scanned = 0, [proc.pid], 0.0
    while proc.poll() is None:
        if time.monotonic() - scanned >= rescan:
            pids, scanned = tree_pids(proc.pid), time.monotonic()
        peak = max(peak, sum(rss_kb(p) for p in pids))
        time.sleep(every)
    return peak
