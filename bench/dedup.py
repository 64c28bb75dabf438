"""Benchmark: `ptk dedup` vs the textbook datasketch loop, on the same real corpus in the same run.

    python -m bench.dedup [--workers 2] [--executor ray] [--copies 8]

Corpus: every text corpus in ../shared/data (Reuters-21578 bodies, Wikitext-2, PEPs, license
texts) as one JSONL file. Baseline: per document, a set of word 5-gram strings (regex words),
`MinHash(num_perm=128).update_batch`, then `MinHashLSH.query` and `insert` at the same threshold,
single process, reading the same JSONL. Prints docs/s, MB/s, peak RSS and the speed ratio, and
writes bench/results/dedup.json. With `--workers` above 1 it also times one worker on the same corpus
and prints the throughput ratio (how the work divides among processes on long documents). `--executor ray`
also runs the same dedup as Ray tasks on a local
Ray instance (started before the clock starts) and prints its time as a ratio to the local executor's:
the Ray overhead on one machine.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import peak_rss_mb, write_result  # noqa: E402
from fixtures.corpora import DATA, text_corpora, write_jsonl  # noqa: E402
from pretrainkit.dataprep.dedup.pipeline import DedupOptions, run_dedup  # noqa: E402
from pretrainkit.dataprep.executors.local import LocalRunner  # noqa: E402
from pretrainkit.dataprep.executors.ray import RayRunner  # noqa: E402

_WORD = re.compile(r"\w+")


def datasketch_loop(path: Path, threshold: float, num_perm: int, ngram: int) -> tuple[int, int]:
    from datasketch import MinHash, MinHashLSH

    lsh = MinHashLSH(threshold=threshold, num_perm=num_perm)
    kept = dups = 0
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f):
            words = _WORD.findall(json.loads(line)["text"].lower())
            shingles = {" ".join(words[j : j + ngram]) for j in range(max(1, len(words) - ngram + 1))}
            m = MinHash(num_perm=num_perm)
            m.update_batch([s.encode("utf-8") for s in shingles])
            if lsh.query(m):
                dups += 1
            else:
                lsh.insert(str(i), m)
                kept += 1
    return kept, dups


def perturbed(doc: tuple[str, str], copy: int) -> tuple[str, str]:
    """The document with every tenth word replaced by one of its words, drawn by a seeded generator."""
    doc_id, text = doc
    words = text.split()
    rng = random.Random(f"{doc_id}/{copy}")
    for i in range(copy % 10, len(words), 10):
        words[i] = rng.choice(words)
    return f"{doc_id}/copy{copy}", " ".join(words)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threshold", type=float, default=0.8)
    ap.add_argument("--copies", type=int, default=1, help="the corpus this many times, later copies perturbed")
    ap.add_argument(
        "--executor", choices=["local", "ray"], default="local", help="ray: also time the Ray executor beside local"
    )
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit("bench/dedup.py needs the test data (make test-data)")
    with tempfile.TemporaryDirectory() as tmp:
        docs = text_corpora()
        docs = docs + [perturbed(doc, copy) for copy in range(1, args.copies) for doc in docs]
        corpus = write_jsonl(docs, Path(tmp) / "corpus.jsonl")
        mb = corpus.stat().st_size / 1e6

        t0 = time.perf_counter()
        with LocalRunner(args.workers) as runner:
            stats = run_dedup([str(corpus)], Path(tmp) / "out", DedupOptions(threshold=args.threshold), runner)
        ours = time.perf_counter() - t0
        ours_rss = peak_rss_mb()

        one_worker = None
        if args.workers > 1:
            t0 = time.perf_counter()
            with LocalRunner(1) as runner:
                run_dedup([str(corpus)], Path(tmp) / "out-1", DedupOptions(threshold=args.threshold), runner)
            one_worker = time.perf_counter() - t0

        t0 = time.perf_counter()
        base_kept, base_dups = datasketch_loop(corpus, args.threshold, 128, 5)
        base = time.perf_counter() - t0

        ray_seconds = None
        if args.executor == "ray":
            with RayRunner(args.workers) as runner:  # the instance starts here, outside the timing
                t0 = time.perf_counter()
                ray_stats = run_dedup(
                    [str(corpus)], Path(tmp) / "out-ray", DedupOptions(threshold=args.threshold), runner=runner
                )
                ray_seconds = time.perf_counter() - t0
            same = all(
                (Path(tmp) / "out" / n).read_bytes() == (Path(tmp) / "out-ray" / n).read_bytes()
                for n in ("duplicates.jsonl", "stats.json")
            )
            assert same and ray_stats["kept_docs"] == stats["kept_docs"], "the Ray executor's output differs"

    result = {
        "corpus_mb": round(mb, 2),
        "docs": len(docs),
        "workers": args.workers,
        "pretrainkit": {
            "seconds": round(ours, 3),
            "docs_per_s": round(len(docs) / ours),
            "mb_per_s": round(mb / ours, 2),
            "removed": stats["exact_duplicates"] + stats["near_duplicates"],
            "peak_rss_mb": ours_rss,
        },
        "datasketch_loop": {
            "seconds": round(base, 3),
            "docs_per_s": round(len(docs) / base),
            "mb_per_s": round(mb / base, 2),
            "removed": base_dups,
        },
        "speedup": round(base / ours, 2),
    }
    if one_worker is not None:
        result["one_worker"] = {
            "seconds": round(one_worker, 3),
            "mb_per_s": round(mb / one_worker, 2),
            "speedup_of_workers": round(one_worker / ours, 2),
        }
    if ray_seconds is not None:
        result["ray"] = {
            "seconds": round(ray_seconds, 3),
            "mb_per_s": round(mb / ray_seconds, 2),
            "time_vs_local": round(ray_seconds / ours, 2),
        }
    print(f"corpus: {len(docs):,} docs, {mb:.1f} MB")
    for name in ("pretrainkit", "datasketch_loop"):
        r = result[name]
        print(
            f"  {name:<16} {r['seconds']:7.2f} s  {r['docs_per_s']:>8,} docs/s  {r['mb_per_s']:6.2f} MB/s"
            f"  removed {r['removed']:,}"
        )
    print(f"  peak RSS (pretrainkit main + largest worker): {ours_rss} MB")
    if one_worker is not None:
        r = result["one_worker"]
        print(
            f"  --workers 1      {r['seconds']:7.2f} s  {r['mb_per_s']:6.2f} MB/s: --workers {args.workers} is "
            f"{r['speedup_of_workers']}x one worker's throughput"
        )
    print(
        f"speedup vs datasketch loop: {result['speedup']}x (pretrainkit --workers {args.workers}, baseline 1 process)"
    )
    if ray_seconds is not None:
        r = result["ray"]
        print(
            f"  --executor ray   {r['seconds']:7.2f} s  {r['mb_per_s']:6.2f} MB/s  (same output; "
            f"{r['time_vs_local']}x the time of --executor local, {args.workers} workers each)"
        )
    write_result("dedup", result)


if __name__ == "__main__":
    main()
