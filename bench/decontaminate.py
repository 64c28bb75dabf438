r"""Benchmark: throughput and peak memory of `ptk decontaminate` at 1M and 4M short documents, against
a plain-Python set of n-grams doing the same check, in the same run.

    python -m bench.decontaminate [--docs 1000000 4000000] [--workers 2] [--eval-items 2000]

Corpus: documents of two real sentences (Reuters-21578, Wikitext-2, PEPs from ../shared/data, as
`bench/dedup_memory.py` makes them), one in a thousand with a passage of an evaluation item
appended, lower-cased and unpunctuated; written once into `--cache-dir` (default ../bench-cache).
Evaluation set: the articles of Wikitext-2's test split of 30 words or more (62 articles, 205,563
13-grams; `--eval-items` takes fewer), as JSONL.
`ptk decontaminate` runs as a child process; the resident memory of its process tree (main and
workers) is sampled every 20 ms (`bench.results.peak_tree_rss_kb`), at each corpus size, so that a
peak flat in the corpus size shows. Baseline: `baseline_check`, run in a child process of its own
over the same files: the same normalization in Python (`str.translate` deleting the categories P
and S after NFKC and case folding), the evaluation n-grams as a Python set of word tuples, the
corpus streamed line by line, one process (what a script would do). The benchmark checks both
find the same documents, and prints MB/s, MB per CPU-second, peak memory and the ratios, for
`ptk decontaminate` removing (kept records compressed into parts) and with `--report-only` (the
baseline's work: only the check). Writes
bench/results/decontaminate.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import peak_tree_rss_kb, write_result  # noqa: E402
from fixtures.corpora import DATA, sentences, wikitext_documents  # noqa: E402

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


def timed(cmd: list[str]) -> dict:
    """Seconds, CPU seconds (user + system, of the whole process tree, waited for), peak RSS of the
    process tree (MB) and stdout of a child process. On a machine shared with other work the CPU
    seconds are the steadier measure: they do not count the time other processes had the cores."""
    os.sync()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    peak = peak_tree_rss_kb(proc)
    seconds = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = proc.stdout.read()
    if proc.returncode:
        sys.exit(f"{cmd[:5]} failed with status {proc.returncode}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2), "peak_rss_mb": round(peak / 1024), "out": out}


def figures(run: dict, mb: float) -> dict:
    return dict(run, mb_per_s=round(mb / run["seconds"], 1), mb_per_cpu_s=round(mb / run["cpu_seconds"], 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, nargs="+", default=[1_000_000, 4_000_000])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--eval-items", type=int, default=1000, help="at most this many Wikitext-2 test articles")
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
    if not DATA.is_dir():
        sys.exit("bench/decontaminate.py needs the test data (make test-data)")
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
        cmd = [sys.executable, "-m", "pretrainkit.cli", "decontaminate", str(corpus), "--eval", str(evals)]
        cmd += ["--workers", str(args.workers)]
        measured = {}
        for mode, extra in (("remove", []), ("report_only", ["--report-only"])):
            with tempfile.TemporaryDirectory(dir=cache) as tmp:
                measured[mode] = figures(timed(cmd + ["-o", f"{tmp}/out", *extra]), mb)
                measured[mode]["stats"] = json.loads(Path(f"{tmp}/out/stats.json").read_text())
        base = figures(timed([sys.executable, "-m", "bench.decontaminate", "--baseline", str(corpus), str(evals)]), mb)
        found = int(base.pop("out"))
        stats = measured["remove"].pop("stats")
        print(measured["remove"].pop("out"))
        run = {
            "docs": n,
            "input_mb": round(mb, 1),
            "eval_items": stats["eval_files"][str(evals)]["items"],
            "eval_ngrams": stats["eval_files"][str(evals)]["ngrams"],
            "workers": args.workers,
            "contaminated_docs": stats["contaminated_docs"],
            "ptk_decontaminate": measured["remove"],
            "ptk_decontaminate_report_only": {
                k: v for k, v in measured["report_only"].items() if k not in ("out", "stats")
            },
            "baseline": dict(
                base, name="plain-Python set of 13-gram word tuples, one process", contaminated_docs=found
            ),
        }
        for mode in ("ptk_decontaminate", "ptk_decontaminate_report_only"):
            m = run[mode]
            m["speedup_over_baseline"] = round(base["seconds"] / m["seconds"], 2)
            m["cpu_efficiency_over_baseline"] = round(base["cpu_seconds"] / m["cpu_seconds"], 2)
            print(
                f"{n:,} docs ({mb:.0f} MB), {mode} --workers {args.workers}: {m['mb_per_s']} MB/s "
                f"({m['mb_per_cpu_s']} MB per CPU-second), peak RSS {m['peak_rss_mb']} MB; "
                f"{m['speedup_over_baseline']}x the baseline's MB/s, {m['cpu_efficiency_over_baseline']}x its MB per "
                "CPU-second"
            )
        print(
            f"{n:,} docs: baseline (Python set, one process) {base['mb_per_s']} MB/s ({base['mb_per_cpu_s']} MB per "
            f"CPU-second), peak RSS {base['peak_rss_mb']} MB; contaminated docs: ptk {run['contaminated_docs']:,}, "
            f"baseline {found:,}"
        )
        if run["contaminated_docs"] != found or measured["report_only"]["stats"]["contaminated_docs"] != found:
            sys.exit("ptk decontaminate and the baseline disagree on the contaminated documents")
        runs.append(run)
    for a, b in zip(runs, runs[1:]):
        a_peak, b_peak = a["ptk_decontaminate"]["peak_rss_mb"], b["ptk_decontaminate"]["peak_rss_mb"]
        growth = (b_peak - a_peak) * 2**20 / (b["docs"] - a["docs"])
        print(
            f"{a['docs']:,} -> {b['docs']:,} docs: the peak of ptk decontaminate goes {a_peak} -> {b_peak} MB "
            f"({growth:.1f} bytes per extra document)"
        )
    write_result("decontaminate", {"runs": runs})


if __name__ == "__main__":
    main()
