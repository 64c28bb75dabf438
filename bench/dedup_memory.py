r"""Benchmark: peak memory and throughput of `ptk dedup` on 1M, 3M, 6M short documents (bounded memory).

    python -m bench.dedup_memory [--docs 1000000 3000000 6000000] [--workers 2] [--memory-limit 1G] \
        [--scaling] [--repeat 3]

Documents are two real sentences (Reuters-21578, Wikitext-2, PEPs from ../shared/data), with 18%
exact and 17% lightly edited copies mixed in (about a third are duplicates at every size; the rate
each corpus really has is printed and written); each corpus is written once into `--cache-dir`
(default ../bench-cache). `ptk dedup`
runs as a child process; the resident memory of its whole process tree (main + workers) is
sampled every 20 ms. Baseline, in the same run: the bytes of the text itself, which the peak must
not track. With several sizes it prints the growth of the peak per extra document, and for each
the size of `OUT/index/` against the input. `--scaling` also runs each corpus with one worker, the
baseline of the throughput: it prints the MB/s of both and their ratio. `--repeat N` runs each N
times, alternating, and reports the median run (and the highest peak) with every run's seconds.
Writes bench/results/dedup_memory.json.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import peak_tree_rss_kb, write_result  # noqa: E402
from fixtures.corpora import DATA, sentences  # noqa: E402

COPY_RATE, EDIT_RATE = 0.18, 0.17  # of the documents: exact copies, lightly edited copies
RECENT = 200_000  # copies are of one of the last RECENT documents written


def write_corpus(path: Path, n_docs: int) -> int:
    """Documents of two real sentences drawn independently from the pool (~190k distinct sentences,
    so two documents rarely share both by chance), with COPY_RATE exact copies and EDIT_RATE copies
    whose last word is replaced (one 5-gram differs: Jaccard ~0.95) of recent documents: about a
    third are duplicates at every size; the benchmark prints the rate each corpus really has."""
    rng = np.random.default_rng(0)
    pool = sentences()
    recent: list[str] = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n_docs):
            r = rng.random()
            if r < COPY_RATE + EDIT_RATE and recent:
                text = recent[int(rng.integers(len(recent)))]
                if r >= COPY_RATE:
                    text = text.rsplit(" ", 1)[0] + " edited"
            else:
                first, second = rng.integers(len(pool), size=2)
                text = f"{pool[first]} {pool[second]}"
            if len(recent) < RECENT:
                recent.append(text)
            else:
                recent[i % RECENT] = text
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")
    return path.stat().st_size


def measure(corpus: Path, out: Path, workers: int, memory_limit: str | None) -> dict:
    """Run `ptk dedup` on one corpus in a child process; its peak tree RSS, time and output sizes."""
    cmd = [sys.executable, "-m", "pretrainkit.cli", "dedup", str(corpus), "-o", str(out), "--workers", str(workers)]
    cmd += ["--memory-limit", memory_limit] if memory_limit else []
    os.sync()  # the previous run's dirty pages are written back before the clock starts, not during this run
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = peak_tree_rss_kb(proc)
    seconds = time.perf_counter() - start
    summary = proc.stdout.read()
    if proc.returncode:
        sys.exit(f"ptk dedup failed with status {proc.returncode}")
    stats = json.loads((out / "stats.json").read_text())
    size = corpus.stat().st_size
    index_bytes = sum(f.stat().st_size for f in (out / "index").iterdir())
    return {
        "docs": stats["input_docs"],
        "input_mb": round(size / 1e6, 1),
        "workers": workers,
        "memory_limit": memory_limit,
        "seconds": round(seconds, 2),
        "mb_per_s": round(size / 1e6 / seconds, 1),
        "peak_rss_mb_process_tree": round(peak / 1024),
        "rss_bytes_per_doc": round(peak * 1024 / stats["input_docs"], 1),
        "index_mb": round(index_bytes / 1e6, 1),
        "index_over_input": round(index_bytes / size, 2),
        "exact_duplicates": stats["exact_duplicates"],
        "near_duplicates": stats["near_duplicates"],
        "duplicate_rate": round((stats["exact_duplicates"] + stats["near_duplicates"]) / stats["input_docs"], 3),
        "summary": summary,
    }


def _measure_in_temporary(corpus: Path, workers: int, memory_limit: str | None, cache_dir: str) -> dict:
    with tempfile.TemporaryDirectory(dir=cache_dir) as tmp:
        return measure(corpus, Path(tmp) / "out", workers, memory_limit)


def _median_run(runs: list[dict]) -> dict:
    """The run of median time (the lower middle one of an even count), with the highest peak of all
    and every run's seconds and peak."""
    median = sorted(runs, key=lambda r: r["seconds"])[(len(runs) - 1) // 2]
    highest = max(runs, key=lambda r: r["peak_rss_mb_process_tree"])
    return dict(
        median,
        peak_rss_mb_process_tree=highest["peak_rss_mb_process_tree"],
        rss_bytes_per_doc=highest["rss_bytes_per_doc"],
        all_seconds=[r["seconds"] for r in runs],
        all_peaks_mb=[r["peak_rss_mb_process_tree"] for r in runs],
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[1_000_000])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--memory-limit", help="passed to ptk dedup (default: its own default)")
    ap.add_argument("--scaling", action="store_true", help="also run with one worker and print the throughput ratio")
    ap.add_argument(
        "--repeat", type=int, default=1, help="runs of each (alternated with --scaling); the medians are reported"
    )
    ap.add_argument(
        "--cache-dir",
        default=str(Path(__file__).resolve().parents[2] / "bench-cache"),
        help="where corpora are written once",
    )
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit("bench/dedup_memory.py needs the test data (make test-data)")
    Path(args.cache_dir).mkdir(parents=True, exist_ok=True)
    results = []
    for n in args.docs:
        corpus = Path(args.cache_dir) / f"dedup-short2-{n}.jsonl"  # short2: the generator of about a third duplicates
        if not corpus.exists():
            write_corpus(corpus.with_suffix(".tmp"), n)
            corpus.with_suffix(".tmp").rename(corpus)
        runs, one_worker_runs = [], []
        for _ in range(args.repeat):  # alternated, so that a drift of the machine's speed reaches both alike
            runs.append(_measure_in_temporary(corpus, args.workers, args.memory_limit, args.cache_dir))
            if args.scaling and args.workers > 1:
                one_worker_runs.append(_measure_in_temporary(corpus, 1, args.memory_limit, args.cache_dir))
        r = _median_run(runs)
        print(r.pop("summary"))
        print(
            f"{n:,} docs ({r['input_mb']:.0f} MB of JSONL): peak RSS of the process tree "
            f"{r['peak_rss_mb_process_tree']} MB ({r['rss_bytes_per_doc']} bytes/doc; "
            f"{r['duplicate_rate']:.1%} duplicates: {r['exact_duplicates']:,} exact, "
            f"{r['near_duplicates']:,} near) in {r['seconds']:.1f} s ({r['mb_per_s']} MB/s); "
            f"input text / peak RSS = {r['input_mb'] / r['peak_rss_mb_process_tree']:.2f}; "
            f"index on disk {r['index_mb']} MB = {r['index_over_input']}x the input"
        )
        if one_worker_runs:
            one = _median_run(one_worker_runs)
            r["one_worker"] = {
                "seconds": one["seconds"],
                "mb_per_s": one["mb_per_s"],
                "all_seconds": one["all_seconds"],
            }
            r["speedup_over_one_worker"] = round(one["seconds"] / r["seconds"], 2)
            print(
                f"{n:,} docs: {args.workers} workers {r['mb_per_s']} MB/s, "
                f"1 worker {one['mb_per_s']} MB/s ({one['seconds']:.1f} s): "
                f"{r['speedup_over_one_worker']}x one worker's throughput"
            )
        if args.repeat > 1:
            print(
                f"{n:,} docs: {args.repeat} runs each, medians above; "
                f"seconds with {args.workers} workers {r['all_seconds']}"
                + (f", with 1 worker {r['one_worker']['all_seconds']}" if one_worker_runs else "")
                + f"; peaks (MB) {r['all_peaks_mb']}"
            )
        results.append(r)
    for a, b in zip(results, results[1:]):
        growth = (b["peak_rss_mb_process_tree"] - a["peak_rss_mb_process_tree"]) * 2**20 / (b["docs"] - a["docs"])
        print(f"{a['docs']:,} -> {b['docs']:,} docs: the peak grows {growth:.0f} bytes per extra document")
    write_result("dedup_memory", {"runs": results})


if __name__ == "__main__":
    main()
