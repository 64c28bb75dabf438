"""Benchmark: `ptk tokenize` and the shard reader against their bare baselines, same corpus, same run.

    python bench/tokenize.py [--workers 2] [--windows 20000]

Corpus: every text corpus in ../shared/data (Reuters-21578 bodies, Wikitext-2, PEPs, license
texts) as one JSONL file; a 16K byte-level BPE trained on it.
(a) write: `tokenize_corpus` (read JSONL, encode, write zstd Arrow shards + manifest) vs bare
    `Tokenizer.encode_batch` over the same texts already in memory, writing nothing (and, as a
    stricter second baseline, `encode_batch_fast`, which ptk itself uses: no character offsets).
(b) read: all tokens sequentially, and random 2049-token windows, from the Arrow shards
    (`ShardSet.read_tokens`) vs a nanoGPT-style uint16 `.bin` of the same stream via `np.memmap`.
    Random windows are measured twice: with the default batch cache (this corpus fits in it) and
    with no cache (every window decompresses the batches it touches).
(c) size: Arrow and WebDataset shard bytes vs the raw uint16 stream.
Prints the ratios (>1 means pretrainkit is faster/smaller) and writes bench/results/tokenize.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This file is named like the stdlib `tokenize` module: keep its folder off sys.path (a later
# `import tokenize`, e.g. from linecache, would load this script) and put the repo root there.
ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench"]
sys.path.insert(0, str(ROOT))

import argparse  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from bench.results import write_result  # noqa: E402
from fixtures.corpora import DATA, text_corpora, write_jsonl  # noqa: E402
from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions, tokenize_corpus  # noqa: E402
from pretrainkit.shards import ShardSet  # noqa: E402
from pretrainkit.shards.tokenizer import train_tokenizer  # noqa: E402

SEQ = 2049


def interleaved(fns: dict, repeat: int) -> dict:
    """Best wall seconds per function, the functions run in turn `repeat` times, so that load from
    other processes on a shared machine hits each of them alike."""
    best = {name: float("inf") for name in fns}
    for _ in range(repeat):
        for name, fn in fns.items():
            t = time.perf_counter()
            fn()
            best[name] = min(best[name], time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--windows", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit("bench/tokenize.py: the test data is absent (make test-data); nothing to measure")
    docs = text_corpora()
    texts = [t for _, t in docs]
    mb = sum(len(t.encode()) for t in texts) / 1e6
    work = Path(tempfile.mkdtemp(prefix="ptk-bench-tokenize-"))
    corpus = write_jsonl(docs, work / "corpus.jsonl")
    tok_path = work / "tokenizer.json"
    train_tokenizer(texts, 16384).save(str(tok_path))
    tokenizer = Tokenizer.from_file(str(tok_path))

    # (a) write
    write_s = interleaved(
        {
            "bare": lambda: tokenizer.encode_batch(texts, add_special_tokens=False),
            "bare_fast": lambda: tokenizer.encode_batch_fast(texts, add_special_tokens=False),
            "ours": lambda: tokenize_corpus(
                [str(corpus)], work / "arrow", str(tok_path), TokenizeOptions(), args.workers
            ),
        },
        args.repeat,
    )
    bare_s, ours_s = write_s["bare"], write_s["ours"]
    manifest = ShardSet.open(work / "arrow").manifest
    tokens = manifest["totals"]["tokens"]
    wds = tokenize_corpus(
        [str(corpus)], work / "wds", str(tok_path), TokenizeOptions(format="webdataset"), args.workers
    )

    # (b) read
    ss = ShardSet.open(work / "arrow")
    stream = ss.read_tokens(0, ss.stream_length)
    stream.tofile(work / "train.bin")
    mm = np.memmap(work / "train.bin", dtype=np.uint16, mode="r")
    starts = np.random.default_rng(0).integers(0, len(stream) - SEQ, size=args.windows).tolist()
    chunk = 1 << 20

    def seq_shards():
        fresh = ShardSet.open(work / "arrow")
        return sum(
            len(fresh.read_tokens(s, min(s + chunk, fresh.stream_length))) for s in range(0, fresh.stream_length, chunk)
        )

    def seq_memmap():
        m = np.memmap(work / "train.bin", dtype=np.uint16, mode="r")
        return sum(len(np.array(m[s : s + chunk])) for s in range(0, len(m), chunk))

    def windows(read):
        def run():
            for s in starts:
                read(s)

        return run

    cold = ShardSet.open(work / "arrow", cache_tokens=0)
    ss.read_tokens(0, ss.stream_length)  # warm the cache: the corpus fits in the default LRU
    read_s = interleaved(
        {
            "sequential_shards": seq_shards,
            "sequential_memmap": seq_memmap,
            "random_shards_cached": windows(lambda s: ss.read_tokens(s, s + SEQ)),
            "random_shards_uncached": windows(lambda s: cold.read_tokens(s, s + SEQ)),
            "random_memmap": windows(lambda s: np.array(mm[s : s + SEQ])),
        },
        args.repeat,
    )
    n_stream, n_win = len(stream), args.windows * SEQ
    rate = {k: (n_stream if k.startswith("sequential") else n_win) / v for k, v in read_s.items()}

    raw = 2 * n_stream
    result = {
        "corpus": {"docs": len(texts), "mb": round(mb, 1), "tokens": tokens, "workers": args.workers},
        "write": {
            "bare_encode_batch_s": round(bare_s, 3),
            "bare_encode_batch_fast_s": round(write_s["bare_fast"], 3),
            "ratio_vs_fast": round(write_s["bare_fast"] / ours_s, 3),
            "ptk_tokenize_s": round(ours_s, 3),
            "ratio": round(bare_s / ours_s, 3),
            "ptk_tokens_per_s": round(tokens / ours_s),
        },
        "read_tokens_per_s": {k: round(v) for k, v in rate.items()},
        "read_ratio": {
            "sequential": round(rate["sequential_shards"] / rate["sequential_memmap"], 3),
            "random_cached": round(rate["random_shards_cached"] / rate["random_memmap"], 3),
            "random_uncached": round(rate["random_shards_uncached"] / rate["random_memmap"], 3),
        },
        "size": {
            "raw_uint16_bytes": raw,
            "arrow_bytes": manifest["totals"]["bytes"],
            "webdataset_bytes": wds["totals"]["bytes"],
            "arrow_vs_raw": round(manifest["totals"]["bytes"] / raw, 3),
            "webdataset_vs_arrow": round(wds["totals"]["bytes"] / manifest["totals"]["bytes"], 3),
        },
    }
    print(f"corpus: {len(texts):,} docs, {mb:.1f} MB, {tokens:,} tokens; --workers {args.workers}")
    w = result["write"]
    print(
        f"(a) write: ptk tokenize {w['ptk_tokenize_s']:.2f} s vs bare encode_batch {w['bare_encode_batch_s']:.2f} s"
        f" -> ratio {w['ratio']:.2f}x (target >= 0.85); vs bare encode_batch_fast {w['bare_encode_batch_fast_s']:.2f} s"
        f" -> {w['ratio_vs_fast']:.2f}x"
    )
    for k, v in rate.items():
        print(f"(b) read {k:<24} {v / 1e6:10.1f} M tokens/s")
    r = result["read_ratio"]
    print(
        f"(b) ratio vs memmap: sequential {r['sequential']:.2f}x, random cached {r['random_cached']:.2f}x, "
        f"random uncached {r['random_uncached']:.2f}x (target >= 0.5 random)"
    )
    s = result["size"]
    print(
        f"(c) size: arrow {s['arrow_bytes']:,} B = {s['arrow_vs_raw']:.2f}x raw uint16 ({raw:,} B); "
        f"webdataset {s['webdataset_bytes']:,} B = {s['webdataset_vs_arrow']:.2f}x arrow (target <= 1.2)"
    )
    write_result("tokenize", result)
    shutil.rmtree(work)


if __name__ == "__main__":
    main()
