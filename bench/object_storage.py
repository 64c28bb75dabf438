"""Benchmark: `ptk dedup` and `ptk tokenize` with inputs and outputs in a bucket, against the same
commands on local paths, in the same run.

    python -m bench.object_storage [--workers 2] [--copies 4] [--repeat 2]

The bucket is an S3 server on the loopback (moto's, `fixtures/s3_server.py`), so the network is
fast and the figure is what staging costs: fetching the inputs into the work folder, publishing
the outputs (each through a temporary key and a server-side copy). Corpus: every text corpus in
../shared/data as JSONL, `--copies` times (each copy its own file), so dedup has exact duplicates.
Each case runs `--repeat` times, local and bucket in turn; the best wall time of each is kept.
Prints the ratio local seconds / bucket seconds (1.0: no cost; the target is at least 0.7) and writes
bench/results/object_storage.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.results import write_result
from fixtures.corpora import DATA, text_corpora, write_jsonl
from fixtures.s3_server import s3_server
from pretrainkit.remote.transfer import upload
from pretrainkit.shards.tokenizer import train_tokenizer

ROOT = Path(__file__).resolve().parent.parent


def ptk(argv: list[str], env: dict[str, str]) -> float:
    began = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "pretrainkit.cli", *argv], env=env, capture_output=True, text=True)
    if result.returncode != 0:
        raise SystemExit(f"ptk {' '.join(argv)} failed:\n{result.stderr[-3000:]}")
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()
    if not DATA.is_dir():
        raise SystemExit("needs the test data (make test-data)")
    docs = text_corpora()
    with tempfile.TemporaryDirectory(prefix="ptk-bench-s3-") as tmp, s3_server() as server:
        tmp = Path(tmp)
        corpus = tmp / "corpus"
        for i in range(args.copies):
            write_jsonl(docs, corpus / f"part-{i}.jsonl")
        tokenizer = tmp / "tokenizer.json"
        train_tokenizer([text for _, text in docs[:5000]], 8192).save(str(tokenizer))
        env = {**os.environ, **server.environment(), "PTK_WORK_DIR": str(tmp / "work"), "PYTHONPATH": str(ROOT)}
        os.environ.update(server.environment())
        bucket = server.make_bucket("bench")
        for f in sorted(corpus.iterdir()):
            upload(f, f"{bucket}/corpus/{f.name}")
        upload(tokenizer, f"{bucket}/tokenizer.json")
        workers = ["--workers", str(args.workers)]
        cases = {
            "dedup": (
                ["dedup", str(corpus), "-o", str(tmp / "dedup"), *workers],
                ["dedup", f"{bucket}/corpus", "-o", f"{bucket}/dedup", *workers],
            ),
            "tokenize": (
                ["tokenize", str(tmp / "dedup"), "-o", str(tmp / "shards"), "--tokenizer", str(tokenizer), *workers],
                [
                    "tokenize",
                    f"{bucket}/dedup",
                    "-o",
                    f"{bucket}/shards",
                    "--tokenizer",
                    f"{bucket}/tokenizer.json",
                    *workers,
                ],
            ),
        }
        input_mb = sum(f.stat().st_size for f in corpus.iterdir()) / 1e6
        result: dict = {"corpus_mb": round(input_mb, 1), "workers": args.workers, "cases": {}}
        print(f"corpus: {input_mb:,.1f} MB in {args.copies} files; S3 on the loopback ({server.endpoint})")
        for name, (local, remote) in cases.items():
            best = {"local": float("inf"), "bucket": float("inf")}
            for _ in range(args.repeat):
                for where, argv in (("local", local), ("bucket", remote)):
                    if where == "local":  # a fresh run each time, as the bucket's (its staging is removed)
                        shutil.rmtree(argv[argv.index("-o") + 1], ignore_errors=True)
                    best[where] = min(best[where], ptk(argv, env))
            ratio = best["local"] / best["bucket"]
            result["cases"][name] = {"local_s": round(best["local"], 2), "bucket_s": round(best["bucket"], 2)}
            result["cases"][name]["ratio"] = round(ratio, 3)
            print(f"{name:9s} local {best['local']:6.2f} s   bucket {best['bucket']:6.2f} s   ratio {ratio:.2f}x")
    write_result("object_storage", result)


if __name__ == "__main__":
    main()
