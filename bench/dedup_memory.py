"""Benchmark: peak memory of `ptk dedup` on 1M short documents (bounded-memory claim).

    python -m bench.dedup_memory [--docs 1000000] [--workers 2]

Documents are 1-3 consecutive real sentences (Reuters-21578, Wikitext-2, PEPs from
../shared/data), with 5% exact and 5% lightly edited copies mixed in. `ptk dedup` runs as a child
process; the resident memory of its whole process tree (main + workers) is sampled every 20 ms.
Baseline, in the same run: the bytes of the text itself, which the peak must not track.
Writes bench/results/dedup_memory.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpora import sentences, shared_data_dir  # noqa: E402
from bench.results import tree_rss_kb, write_result  # noqa: E402


def write_corpus(path: Path, n_docs: int) -> int:
    rng = np.random.default_rng(0)
    pool = sentences()
    docs: list[str] = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n_docs):
            r = rng.random()
            if r < 0.05 and docs:
                text = docs[int(rng.integers(len(docs)))]
            elif r < 0.10 and docs:
                words = docs[int(rng.integers(len(docs)))].split()
                words[int(rng.integers(len(words)))] = "edited"
                text = " ".join(words)
            else:
                start = int(rng.integers(len(pool) - 3))
                text = " ".join(pool[start : start + int(rng.integers(1, 4))])
            if len(docs) < 100_000:
                docs.append(text)
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    return path.stat().st_size


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=1_000_000)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if shared_data_dir() is None:
        sys.exit("bench/dedup_memory.py needs ../shared/data")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "short.jsonl"
        size = write_corpus(corpus, args.docs)
        cmd = [sys.executable, "-m", "pretrainkit.cli", "dedup", str(corpus), "-o", str(Path(tmp) / "out"), "--workers", str(args.workers)]
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        peak = 0
        while proc.poll() is None:
            peak = max(peak, tree_rss_kb(proc.pid))
            time.sleep(0.02)
        seconds = time.perf_counter() - start
        summary = proc.stdout.read()
        if proc.returncode:
            sys.exit(f"ptk dedup failed with status {proc.returncode}")
        stats = json.loads((Path(tmp) / "out" / "stats.json").read_text())
    result = {
        "docs": args.docs, "input_mb": round(size / 1e6, 1), "workers": args.workers, "seconds": round(seconds, 2),
        "peak_rss_mb_process_tree": round(peak / 1024), "rss_bytes_per_doc": round(peak * 1024 / args.docs, 1),
        "exact_duplicates": stats["exact_duplicates"], "near_duplicates": stats["near_duplicates"],
    }
    print(summary)
    print(f"{args.docs:,} docs ({size / 1e6:.0f} MB of JSONL): peak RSS of the process tree {peak / 1024:.0f} MB "
          f"({result['rss_bytes_per_doc']} bytes/doc) in {seconds:.1f} s; input text / peak RSS = {size / (peak * 1024):.2f}")
    write_result("dedup_memory", result)


if __name__ == "__main__":
    main()
