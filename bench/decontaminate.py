r"""Benchmark: throughput and peak memory of `ptk decontaminate` at 1M and 4M short documents, against
a plain-Python set of n-grams doing the same check, in the same run.

    python -m bench.decontaminate [--docs 1000000 4000000] [--workers 2] [--eval-items 2000]

Corpus: documents of two real sentences (Reuters-21578, Wikitext-2, PEPs from ../shared/data, as
`bench/dedup_memory.py` makes them), one in a thousand with a passage of an evaluation item
appended, lower-cased and unpunctuated; written once into `--cache-dir` (default ../bench-cache).
Evaluation set: `--eval-items` paragraphs of Wikitext-2's test split (JSONL, 13-grams).
`ptk decontaminate` runs as a child process; the resident memory of its process tree (main and
workers) is sampled every 20 ms (`bench.results.peak_tree_rss_kb`), at each corpus size, so that a
peak flat in the corpus size shows. Baseline: `baseline_check`, run in a child process of its own
over the same files: the same normalization in Python (`str.translate` deleting the categories P
and S after NFKC and case folding), the evaluation n-grams as a Python set of word tuples, the
corpus streamed line by line, one process (what a script would do). The benchmark checks both
find the same documents, and prints MB/s, peak memory and the ratio. Writes
bench/results/decontaminate.json.
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
from fixtures.corpora import sentences, shared_data_dir, wikitext_documents  # noqa: E402

CONTAMINATION_RATE = 0.001
NGRAM = 13


def write_eval_set(path: Path, items: int) -> list[str]:
    passages = [t for _, t in wikitext_documents("test") if len(t.split()) >= 30][:items]
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(passages):
            f.write(json.dumps({"id": f"wikitext-test-{i}", "text": text}) + "\n")
    return passages


def write_corpus(path: Path, n_docs: int, passages: list[str]) -> None:
    rng = np.random.default_rng(0)
    pool = sentences()
    with open(path, "w", encoding="utf-8") as f:
        for i in range(n_docs):
            first, second = rng.integers(len(pool), size=2)
            text = f"{pool[first]} {pool[second]}"
            if rng.random() < CONTAMINATION_RATE:
                words = passages[int(rng.integers(len(passages)))].split()
                start = int(rng.integers(max(1, len(words) - 20)))
                text += " " + "".join(c for c in " ".join(words[start : start + 20]).lower() if c.isalnum() or c == " ")
            f.write(json.dumps({"id": f"d{i}", "text": text}) + "\n")


def baseline_check(corpus: str, evals: str, ngram: int) -> None:
    """The plain-Python check (run as `python -m bench.decontaminate --baseline CORPUS EVALS`):
    prints the number of documents that share an n-gram with the evaluation set."""
    import unicodedata

    deleted = {cp: None for cp in range(sys.maxunicode + 1) if unicodedata.category(chr(cp))[0] in "PS"}

    def words(text: str) -> list[str]:
        if not text.isascii():
            text = unicodedata.normalize("NFKC", text).casefold()
        return text.lower().translate(deleted).split()

    grams: set[tuple[str, ...]] = set()
    with open(evals, encoding="utf-8") as f:
        for line in f:
            w = words(json.loads(line)["text"])
            grams.update(tuple(w[i : i + ngram]) for i in range(len(w) - ngram + 1))
    found = 0
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            w = words(json.loads(line)["text"])
            found += any(tuple(w[i : i + ngram]) in grams for i in range(len(w) - ngram + 1))
    print(found)


def timed(cmd: list[str]) -> tuple[float, int, str]:
    """Seconds, peak RSS of the process tree (KB) and stdout of a child process."""
    os.sync()
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = peak_tree_rss_kb(proc)
    seconds = time.perf_counter() - start
    out = proc.stdout.read()
    if proc.returncode:
        sys.exit(f"{cmd[:5]} failed with status {proc.returncode}")
    return seconds, peak, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--eval-items", type=int, default=2000)
    ap.add_argument(
        "--cache-dir",
        default=str(Path(__file__).resolve().parents[2] / "bench-cache"),
        help="where corpora are written once",
    )
    ap.add_argument("--baseline", nargs=2, metavar=("CORPUS", "EVALS"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.baseline:
        baseline_check(*args.baseline, NGRAM)
        return
    if shared_data_dir() is None:
        sys.exit("bench/decontaminate.py needs ../shared/data")
    cache = Path(args.cache_dir)
    cache.mkdir(parents=True, exist_ok=True)
    evals = cache / f"decon-eval-{args.eval_items}.jsonl"
    passages = write_eval_set(evals, args.eval_items)
    runs = []
    for n in args.docs:
        corpus = cache / f"decon-{args.eval_items}-{n}.jsonl"
        if not corpus.exists():
            write_corpus(corpus.with_suffix(".tmp"), n, passages)
            corpus.with_suffix(".tmp").rename(corpus)
        mb = corpus.stat().st_size / 1e6
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            cmd = [sys.executable, "-m", "pretrainkit.cli", "decontaminate", str(corpus), "--eval", str(evals)]
            seconds, peak, summary = timed(cmd + ["-o", f"{tmp}/out", "--workers", str(args.workers)])
            stats = json.loads(Path(f"{tmp}/out/stats.json").read_text())
        base_seconds, base_peak, found = timed(
            [sys.executable, "-m", "bench.decontaminate", "--baseline", str(corpus), str(evals)]
        )
        run = {
            "docs": n,
            "input_mb": round(mb, 1),
            "eval_items": args.eval_items,
            "eval_ngrams": stats["eval_files"][str(evals)]["ngrams"],
            "workers": args.workers,
            "seconds": round(seconds, 2),
            "mb_per_s": round(mb / seconds, 1),
            "peak_rss_mb_process_tree": round(peak / 1024),
            "contaminated_docs": stats["contaminated_docs"],
            "baseline": {
                "name": "plain-Python set of 13-gram word tuples, one process",
                "seconds": round(base_seconds, 2),
                "mb_per_s": round(mb / base_seconds, 1),
                "peak_rss_mb": round(base_peak / 1024),
                "contaminated_docs": int(found),
            },
            "speedup_over_baseline": round(base_seconds / seconds, 2),
        }
        print(summary)
        print(
            f"{n:,} docs ({mb:.0f} MB): ptk decontaminate --workers {args.workers} {run['mb_per_s']} MB/s, "
            f"peak RSS {run['peak_rss_mb_process_tree']} MB; baseline (Python set) {run['baseline']['mb_per_s']} MB/s, "
            f"peak RSS {run['baseline']['peak_rss_mb']} MB; {run['speedup_over_baseline']}x the baseline's "
            f"throughput; contaminated docs {run['contaminated_docs']:,} (baseline {int(found):,})"
        )
        if run["contaminated_docs"] != int(found):
            sys.exit("ptk decontaminate and the baseline disagree on the contaminated documents")
        runs.append(run)
    for a, b in zip(runs, runs[1:]):
        growth = (b["peak_rss_mb_process_tree"] - a["peak_rss_mb_process_tree"]) * 2**20 / (b["docs"] - a["docs"])
        print(f"{a['docs']:,} -> {b['docs']:,} docs: the peak grows {growth:.1f} bytes per extra document")
    write_result("decontaminate", {"runs": runs})


if __name__ == "__main__":
    main()
