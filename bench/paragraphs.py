r"""Benchmark: throughput and peak memory of `ptk dedup --paragraphs` at 1M and 4M documents, against
a plain-Python set of the lines seen doing the same rule, in the same run.

    python -m bench.paragraphs [--docs 1000000 4000000] [--workers 2] [--memory-limit 270M]

Corpus: documents of real text (sentences of Reuters-21578, Wikitext-2 and the PEPs from
../shared/data, `fixtures.corpora.sentences`): two or three paragraphs of two sentences each
(almost all distinct), with, as extraction leaves them, a boilerplate line from a pool of 500 short
ones in 60% of the documents and a paragraph quoted from one of the last 10,000 documents in 10%;
written once into `--cache-dir` (default ../bench-cache). `ptk dedup --paragraphs` runs as a child
process; the resident memory of its process tree (main and workers) is sampled every 20 ms
(`bench.results.peak_tree_rss_kb`), at each corpus size, so that a peak flat in the corpus size
shows; `--memory-limit` (default 270M, near the smallest) keeps its partitions at ~20 MB at both sizes,
so that what grows with the corpus would show. Baseline: `baseline_rule` run by `baseline_run`, in
a child process of its own over the same file: the corpus streamed line by line in one process
(`json`), a Python set of every stripped line of the documents before (it grows with the corpus),
the kept records written as JSONL (uncompressed; ptk writes zstd parts): what a script would do. The
benchmark checks that both keep and remove the same documents and text, and prints MB/s, MB per
CPU-second, peak memory and the ratios. Writes bench/results/paragraphs.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.decontaminate import figures, timed  # noqa: E402
from bench.results import write_result  # noqa: E402
from fixtures.corpora import DATA, sentences  # noqa: E402

BOILERPLATE_RATE, QUOTE_RATE = 0.6, 0.1
BOILERPLATE_LINES = 500
RECENT = 10_000
MIN_LENGTH = 1  # ptk's default


def baseline_rule(min_length: int = MIN_LENGTH) -> Callable[[str], str | None]:
    """The rule in plain Python, applied to texts in corpus order: each text without its lines
    (stripped, non-blank) that an earlier text had, or None for a text that lost a line and is left
    shorter than `min_length` (stripped). Its set of the lines seen grows with the corpus."""
    seen: set[str] = set()

    def apply(text: str) -> str | None:
        lines = text.split("\n")
        keys = [line.strip() for line in lines]
        kept = [line for line, key in zip(lines, keys) if not key or key not in seen]
        seen.update(key for key in keys if key)
        left = "\n".join(kept)
        return None if len(kept) < len(lines) and len(left.strip()) < min_length else left

    return apply


def baseline_run(corpus: str, out: str) -> None:
    """`python -m bench.paragraphs --baseline CORPUS OUT`: the baseline over a JSONL file, streamed,
    writing the kept records (the text changed, every other field as it was) to OUT as JSONL, as a
    script would; prints the documents kept and removed and the bytes of text left."""
    kept = removed = left = 0
    rule = baseline_rule()
    with open(corpus, encoding="utf-8") as f, open(out, "w", encoding="utf-8") as written:
        for line in f:
            record = json.loads(line)
            text = rule(record["text"])
            if text is None:
                removed += 1
                continue
            kept += 1
            left += len(text.encode("utf-8"))
            record["text"] = text
            written.write(json.dumps(record, ensure_ascii=False) + "\n")
    print(json.dumps({"kept_docs": kept, "removed_docs": removed, "output_text_bytes": left}))


def write_corpus(path: Path, n_docs: int) -> None:
    rng = np.random.default_rng(0)
    pool = sentences()
    boilerplate = [s for s in pool if len(s) < 60][:BOILERPLATE_LINES]
    recent: list[str] = []
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n_docs):
            paragraphs = [" ".join(pool[j] for j in rng.integers(len(pool), size=2)) for _ in range(rng.integers(2, 4))]
            if recent and rng.random() < QUOTE_RATE:
                paragraphs.insert(1, recent[int(rng.integers(len(recent)))])
            if rng.random() < BOILERPLATE_RATE:
                paragraphs.append(boilerplate[int(rng.integers(len(boilerplate)))])
            if len(recent) < RECENT:
                recent.append(paragraphs[0])
            else:
                recent[i % RECENT] = paragraphs[0]
            f.write(json.dumps({"id": f"d{i}", "text": "\n".join(paragraphs)}) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument(
        "--cache-dir",
        default=str(Path(__file__).resolve().parents[2] / "bench-cache"),
        help="where corpora are written once",
    )
    ap.add_argument(
        "--memory-limit",
        default="270M",
        help="ptk's --memory-limit (default 270M, near the smallest: partitions of ~20 MB at every size, so that "
        "anything else growing with the corpus shows)",
    )
    ap.add_argument("--baseline", nargs=2, metavar=("CORPUS", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline:
        baseline_run(*args.baseline)
        return
    if not DATA.is_dir():
        sys.exit("bench/paragraphs.py needs the test data (make test-data)")
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    runs = []
    for n in args.docs:
        corpus = cache / f"paragraphs-{n}.jsonl"
        if not corpus.exists():
            write_corpus(corpus.with_suffix(".tmp"), n)
            corpus.with_suffix(".tmp").rename(corpus)
        mb = corpus.stat().st_size / 1e6
        cmd = [sys.executable, "-m", "pretrainkit.cli", "dedup", "--paragraphs", str(corpus), "--workers"]
        cmd += [str(args.workers), "--memory-limit", args.memory_limit]
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            ptk = figures(timed(cmd + ["-o", f"{tmp}/out"]), mb)
            stats = json.loads(Path(f"{tmp}/out/stats.json").read_text())
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            base = figures(
                timed([sys.executable, "-m", "bench.paragraphs", "--baseline", str(corpus), f"{tmp}/out"]), mb
            )
        found = json.loads(base.pop("out"))
        print(ptk.pop("out"))
        run = {
            "docs": n,
            "input_mb": round(mb, 1),
            "workers": args.workers,
            "memory_limit": args.memory_limit,
            "paragraphs": stats["paragraphs"],
            "paragraphs_removed": stats["paragraphs_removed"],
            "removed_docs": stats["removed_docs"],
            "ptk_dedup_paragraphs": ptk,
            "baseline": dict(base, name="plain-Python set of the stripped lines seen, one process", **found),
        }
        ptk["speedup_over_baseline"] = round(base["seconds"] / ptk["seconds"], 2)
        ptk["cpu_efficiency_over_baseline"] = round(base["cpu_seconds"] / ptk["cpu_seconds"], 2)
        print(
            f"{n:,} docs ({mb:.0f} MB), ptk dedup --paragraphs --workers {args.workers} --memory-limit "
            f"{args.memory_limit}: {ptk['mb_per_s']} MB/s "
            f"({ptk['mb_per_cpu_s']} MB per CPU-second), peak RSS {ptk['peak_rss_mb']} MB; "
            f"{ptk['speedup_over_baseline']}x the baseline's MB/s, {ptk['cpu_efficiency_over_baseline']}x its MB per "
            "CPU-second"
        )
        print(
            f"{n:,} docs: baseline (Python set, one process) {base['mb_per_s']} MB/s ({base['mb_per_cpu_s']} MB per "
            f"CPU-second), peak RSS {base['peak_rss_mb']} MB; paragraphs removed: "
            f"{stats['paragraphs_removed']:,} of {stats['paragraphs']:,}"
        )
        if any(stats[k] != found[k] for k in found):
            sys.exit(f"ptk and the baseline disagree: {[(k, stats[k], found[k]) for k in found]}")
        runs.append(run)
    for a, b in zip(runs, runs[1:]):
        a_peak, b_peak = a["ptk_dedup_paragraphs"]["peak_rss_mb"], b["ptk_dedup_paragraphs"]["peak_rss_mb"]
        growth = (b_peak - a_peak) * 2**20 / (b["docs"] - a["docs"])
        print(
            f"{a['docs']:,} -> {b['docs']:,} docs: the peak of ptk dedup --paragraphs goes {a_peak} -> {b_peak} MB "
            f"({growth:.1f} bytes per extra document); the baseline's {a['baseline']['peak_rss_mb']} -> "
            f"{b['baseline']['peak_rss_mb']} MB"
        )
    write_result("paragraphs", {"runs": runs})


if __name__ == "__main__":
    main()
