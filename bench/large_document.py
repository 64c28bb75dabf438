"""Benchmark: peak memory of `ptk dedup` and `ptk tokenize` on one large document (issue 13 item 7).

    python -m bench.large_document [--mb 48] [--workers 1]

The document is paragraphs of WikiText-2 and Tiny Shakespeare (../shared/data) drawn at random up to
`--mb` MB of UTF-8 (accents included, so the non-ASCII normalization path runs), plus one small
document, as JSONL. Each command runs as a child process; the resident memory of its whole process
tree is sampled every 20 ms. Baselines, in the same run: the document's own size, which the peak is
divided by, and the same command on the small document alone (the process's own memory: modules,
tokenizer), whose peak is subtracted for the growth (the multiple docs/dedup.md states). Writes
bench/results/large_document.json.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import peak_tree_rss_kb, write_result  # noqa: E402
from fixtures.corpora import DATA, SMALL_RECORD, write_document  # noqa: E402


def peak_of(cmd: list[str]) -> tuple[int, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
    peak = peak_tree_rss_kb(proc)
    if proc.returncode:
        sys.exit(f"{' '.join(cmd[2:5])} failed with status {proc.returncode}")
    return peak * 1024, time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=48)
    ap.add_argument("--workers", type=int, default=1)
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit("bench/large_document.py needs the test data (make test-data)")
    ptk = [sys.executable, "-m", "pretrainkit.cli"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        text = write_document(tmp / "doc.jsonl", args.mb)
        doc_bytes = len(text.encode("utf-8"))
        from pretrainkit.shards.tokenizer import train_tokenizer

        train_tokenizer([text[:2_000_000]], 4096).save(str(tmp / "tok.json"))
        (tmp / "small.jsonl").write_text(SMALL_RECORD)
        workers = ["--workers", str(args.workers)]

        def runs(corpus: str, out: str) -> dict[str, list[str]]:
            return {
                "dedup": ptk + ["dedup", str(tmp / corpus), "-o", str(tmp / f"dedup-{out}"), *workers],
                "tokenize": ptk
                + [
                    "tokenize",
                    str(tmp / corpus),
                    "--tokenizer",
                    str(tmp / "tok.json"),
                    "-o",
                    str(tmp / f"shards-{out}"),
                    *workers,
                ],
            }

        result = {"document_mb": round(doc_bytes / 1e6, 1), "workers": args.workers}
        for (name, cmd), small_cmd in zip(runs("doc.jsonl", "large").items(), runs("small.jsonl", "small").values()):
            base, _ = peak_of(small_cmd)
            peak, seconds = peak_of(cmd)
            growth = peak - base
            result[name] = {
                "peak_rss_mb_process_tree": round(peak / 1e6),
                "multiple_of_document": round(peak / doc_bytes, 1),
                "baseline_peak_mb": round(base / 1e6),
                "growth_multiple_of_document": round(growth / doc_bytes, 2),
                "seconds": round(seconds, 1),
            }
            print(
                f"{name:9s} one {doc_bytes / 1e6:.0f} MB document: peak RSS of the process tree {peak / 1e6:.0f} MB "
                f"= {peak / doc_bytes:.1f}x the document; {growth / 1e6:.0f} MB = {growth / doc_bytes:.2f}x above the "
                f"same command on the small document alone ({base / 1e6:.0f} MB) ({seconds:.0f} s)"
            )
    write_result("large_document", result)


if __name__ == "__main__":
    main()
