"""Benchmark: the mixture `TrainLoader` vs a nanoGPT-style random-window read, in the same run.

    python bench/loader.py [--seq-len 1024] [--batch 16] [--batches 2000] [--workers 0] [--train-steps 8]
    python bench/loader.py --corpus short-20m --seq-len 2048 --batch 64 --batches 300 --workers 2
    python bench/loader.py --streaming [--seq-len 1024] [--batch 16] [--batches 2000] [--repeat 3]

`--corpus mix` (default): a byte-level BPE (8192 tokens) trained on the three corpora, then three
shard sets (Reuters-21578 bodies, Wikitext-2 valid+test articles, PEPs) mixed 0.5 / 0.3 / 0.2.
Then, for scale, what the trainer consumes: `ptk train` on the same mixture with a demo-sized
model (d_model 256, 4 layers, seq_len 256, batch 16) for a few steps, its median tokens/s, and how
many times that the loader delivers.
`--corpus short-2m | short-6m | short-20m`: one shard set of 2M / 6M / 20M short documents (~48
tokens each, web-text-like), built once into `--cache-dir` (default ../bench-cache): real text
(the same three corpora, the same tokenizer) cut into documents whose lengths are those of one
real sentence, or of two consecutive ones (30%). Besides tokens/s it prints the loader's construction time with an
empty index cache and with a warm one (each in a fresh process), and the resident memory of each
loader process (the main one and every DataLoader worker).
`--streaming`: one shard set of the three corpora, in a bucket (moto's S3 server on the loopback,
`fixtures/s3_server.py`), bounded by a cache just smaller than the set so that it is streamed one
record batch at a time (`shards/streamed.py`). For at most one epoch of it:
the TrainLoader on the local copy of the set, then on the bucket with an empty cache (cold), then
again (warm: every batch in the cache); and raw fsspec: `cat_ranges` of exactly the byte ranges the
cold run fetched, 64 at a time (a window's worth), nothing else. Each timing starts at the first
batch (the loader and its sets already open) and ends at the last; the cases run in turn `--repeat`
times (default 3), the best time of each kept, as the load of a shared machine varies. Prints tokens/s, warm / local
(target >= 0.9) and cold bytes/s / raw bytes/s (target >= 0.8); writes bench/results/loader-streaming.json.
Baseline: the same tokens as one uint16 `np.memmap` (doc EOS doc EOS ...), and nanoGPT's
`get_batch`: `batch` random offsets, `torch.stack` of `from_numpy(data[i:i+L].astype(int64))`
for inputs and targets. Both produce (inputs, targets) int64 [batch, seq_len] on the CPU; the
loader runs with world size 1 and one micro-batch per global batch. Prints sequences/s, tokens/s
and the ratio. Writes bench/results/loader.json (loader-short-20m.json, ...).
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repository root replaces this script's folder on the path: bench/tokenize.py would otherwise
# shadow the standard library's `tokenize` module.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.results import child_pids, rss_kb, write_result  # noqa: E402
from fixtures.corpora import DATA, pep_documents, reuters_documents, sentences, wikitext_documents  # noqa: E402
from pretrainkit.dataprep.tokenize.corpus import write_text_shards  # noqa: E402
from pretrainkit.files import write_text_atomic  # noqa: E402
from pretrainkit.mixtures import MixtureSampler, TrainLoader, load_mixture  # noqa: E402
from pretrainkit.shards import ShardSet, ShardWriter  # noqa: E402
from pretrainkit.shards.manifest import build_manifest, write_manifest  # noqa: E402
from pretrainkit.shards.tokenizer import load_tokenizer, train_tokenizer  # noqa: E402
from pretrainkit.train.reports.run_log import read_run  # noqa: E402

SOURCES = {"reuters": 0.5, "wikitext": 0.3, "peps": 0.2}
SHORT = {"short-2m": 2_000_000, "short-6m": 6_000_000, "short-20m": 20_000_000}


def _texts() -> dict[str, list[str]]:
    return {
        "reuters": [t for _, t in reuters_documents()],
        "wikitext": [t for _, t in wikitext_documents("valid") + wikitext_documents("test")],
        "peps": [t for _, t in pep_documents()],
    }


def build_data(root: Path) -> tuple[Path, Path]:
    """Shard sets and a mixture YAML under root, and the baseline's memmap file of the same tokens."""
    texts = _texts()
    tok = train_tokenizer((t for docs in texts.values() for t in docs), vocab_size=8192)
    tok.save(str(root / "tokenizer.json"))
    streams = []
    for name, docs in texts.items():
        ss: ShardSet = write_text_shards(docs, root / name, root / "tokenizer.json")
        streams.append(ss.read_tokens(0, ss.stream_length))
    lines = ["seed: 1", "sources:"] + [f"  - {{name: {n}, shards: {n}, weight: {w}}}" for n, w in SOURCES.items()]
    (root / "mix.yaml").write_text("\n".join(lines) + "\n")
    memmap_path = root / "train.bin"
    np.concatenate(streams).astype(np.uint16).tofile(memmap_path)
    return root / "mix.yaml", memmap_path


def build_short_corpus(cache: Path, n_docs: int) -> tuple[Path, Path]:
    """(mixture YAML, baseline memmap) of `n_docs` short documents of real text, built once under cache."""
    root = cache / f"loader-short-{n_docs}"
    if (root / "mix.yaml").exists():
        return root / "mix.yaml", root / "train.bin"
    if root.exists():
        shutil.rmtree(root)  # an interrupted build
    tokenizer_path = cache / "loader-tokenizer.json"
    if not tokenizer_path.exists():
        cache.mkdir(parents=True, exist_ok=True)
        texts = _texts()
        tokenizer = train_tokenizer((t for docs in texts.values() for t in docs), vocab_size=8192)
        write_text_atomic(tokenizer_path, tokenizer.to_str(pretty=True))
    tok = load_tokenizer(tokenizer_path)
    pool = np.array(
        tok.tokenizer.encode("\n\n".join(t for docs in _texts().values() for t in docs)).ids, dtype=np.uint16
    )
    rng = np.random.default_rng(0)
    real = sentences()
    starts = rng.integers(len(real) - 3, size=20_000)
    samples = [" ".join(real[i : i + (2 if rng.random() < 0.3 else 1)]) for i in starts]
    real_lengths = np.array([len(e.ids) for e in tok.tokenizer.encode_batch(samples, add_special_tokens=False)])
    root.mkdir(parents=True)
    writer = ShardWriter(root / "shards", "arrow", np.uint16)
    position = 0
    with open(root / "train.bin.tmp", "wb") as memmap:
        for first in range(0, n_docs, 1_000_000):
            lengths = rng.choice(real_lengths[real_lengths > 0], size=min(1_000_000, n_docs - first))
            stream = np.empty(int(lengths.sum()) + len(lengths), dtype=np.uint16)
            at = 0
            for i, n in enumerate(lengths.tolist()):
                if position + n > len(pool):
                    position = 0
                doc = pool[position : position + n]
                writer.add(f"d{first + i}", doc)
                stream[at : at + n] = doc
                stream[at + n] = tok.eos_id
                at, position = at + n + 1, position + n
            stream.tofile(memmap)
            print(f"  {first + len(lengths):,} / {n_docs:,} documents", flush=True)
    entries = writer.close()
    write_manifest(
        root / "shards", build_manifest("arrow", "uint16", tok.info, entries, {"bench": "loader short documents"})
    )
    os.replace(root / "train.bin.tmp", root / "train.bin")
    (root / "mix.yaml").write_text("seed: 1\nsources:\n  - {name: web, shards: shards, weight: 1}\n")
    return root / "mix.yaml", root / "train.bin"


def measure_loader_process(mixture: Path, seq_len: int, batch: int, batches: int, workers: int) -> dict:
    """In this (fresh) process: construction time, RSS after it, and the loader's throughput and RSS."""
    imports = rss_kb(os.getpid()) / 1024  # Python, numpy, pyarrow and torch: ~290 MB before any data
    start = time.perf_counter()
    sampler = MixtureSampler(load_mixture(mixture, verify=False), seq_len=seq_len, global_batch_size=batch)
    result = {
        "construct_s": time.perf_counter() - start,
        "rss_after_imports_mb": imports,
        "rss_after_construct_mb": rss_kb(os.getpid()) / 1024,
    }
    if batches:
        loader = TrainLoader(sampler, rank=0, world_size=1, micro_size=batch, num_workers=workers)
        it = iter(loader)
        next(it)  # worker start-up is not throughput
        start = time.perf_counter()
        for _ in range(batches):
            x, y = next(it)
            assert x.shape == y.shape == (batch, seq_len)
        result["loader_s"] = time.perf_counter() - start
        children = child_pids()  # the workers are the children of the forkserver process this one started
        workers = sorted(pid for child in children.get(os.getpid(), []) for pid in children.get(child, []))
        result["rss_mb"] = {
            "main": rss_kb(os.getpid()) / 1024,
            **{f"worker {i}": rss_kb(k) / 1024 for i, k in enumerate(workers)},
        }
    return result


def _in_fresh_process(args: list[str], cache_dir: Path) -> dict:
    env = {**os.environ, "PTK_CACHE_DIR": str(cache_dir)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", *args], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(out.stdout.splitlines()[-1])


def short_corpus_main(args: argparse.Namespace) -> int:
    cache = Path(args.cache_dir)
    n_docs = SHORT[args.corpus]
    mixture, memmap_path = build_short_corpus(cache, n_docs)
    ss = ShardSet.open(mixture.parent / "shards")
    child = [str(mixture), str(args.seq_len), str(args.batch), str(args.batches), str(args.workers)]
    index_cache = Path(tempfile.mkdtemp(prefix="ptk-index-cache-", dir=cache))
    try:
        cold = _in_fresh_process(child[:3] + ["0", "0"], index_cache)
        warm = _in_fresh_process(child, index_cache)
    finally:
        shutil.rmtree(index_cache)
    tokens = args.batches * args.batch * args.seq_len
    base_s = nanogpt_batches(memmap_path, args.seq_len, args.batch, args.batches)
    print(
        f"corpus {args.corpus}: {ss.num_docs:,} documents, {ss.num_tokens:,} tokens "
        f"({ss.num_tokens / ss.num_docs:.1f} per document), "
        f"{ss.batches.num_batches:,} record batches; seq_len {args.seq_len}, batch {args.batch}, {args.workers} workers"
    )
    print(
        f"construction: {cold['construct_s']:.2f} s with an empty index cache, "
        f"{warm['construct_s']:.2f} s with a warm one"
    )
    print(
        f"RSS after imports {warm['rss_after_imports_mb']:.0f} MB, "
        f"after construction {warm['rss_after_construct_mb']:.0f} MB; "
        f"after {args.batches} batches: " + ", ".join(f"{k} {v:.0f} MB" for k, v in warm["rss_mb"].items())
    )
    rows = {"nanoGPT memmap get_batch": base_s, f"TrainLoader ({args.workers} workers)": warm["loader_s"]}
    for name, secs in rows.items():
        print(f"{name:28s} {args.batches * args.batch / secs:12,.0f} sequences/s {tokens / secs:14,.0f} tokens/s")
    ratio = base_s / warm["loader_s"]
    print(f"ratio (TrainLoader / baseline tokens/s): {ratio:.2f}x")
    write_result(
        f"loader-{args.corpus}",
        {
            "corpus": args.corpus,
            "docs": ss.num_docs,
            "tokens": ss.num_tokens,
            "seq_len": args.seq_len,
            "batch": args.batch,
            "batches": args.batches,
            "workers": args.workers,
            "construct_cold_s": cold["construct_s"],
            "construct_warm_s": warm["construct_s"],
            "rss_after_imports_mb": warm["rss_after_imports_mb"],
            "rss_after_construct_mb": warm["rss_after_construct_mb"],
            "rss_mb": warm["rss_mb"],
            "baseline_tokens_per_s": tokens / base_s,
            "loader_tokens_per_s": tokens / warm["loader_s"],
            "ratio": ratio,
        },
    )
    return 0


def nanogpt_batches(path: Path, seq_len: int, batch: int, batches: int) -> float:
    """Seconds for `batches` calls of nanoGPT's get_batch (the memmap is reopened per batch, as there)."""
    rng = np.random.default_rng(0)
    start = time.perf_counter()
    for _ in range(batches):
        data = np.memmap(path, dtype=np.uint16, mode="r")
        ix = rng.integers(0, len(data) - seq_len - 1, size=batch)
        x = torch.stack([torch.from_numpy(data[i : i + seq_len].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 1 + seq_len].astype(np.int64)) for i in ix])
        assert x.shape == y.shape == (batch, seq_len)
    return time.perf_counter() - start


def loader_batches(mixture: Path, seq_len: int, batch: int, batches: int, workers: int) -> float:
    sampler = MixtureSampler(load_mixture(mixture), seq_len=seq_len, global_batch_size=batch)
    loader = TrainLoader(sampler, rank=0, world_size=1, micro_size=batch, num_workers=workers)
    it = iter(loader)
    next(it)  # worker start-up and first shuffles are not throughput
    start = time.perf_counter()
    for _ in range(batches):
        x, y = next(it)
        assert x.shape == y.shape == (batch, seq_len)
    return time.perf_counter() - start


def first_batch_to_last(mixture: Path, seq_len: int, batch: int, batches: int) -> float:
    """Seconds from asking for the first batch to having the last (the first batch's reads included)."""
    sampler = MixtureSampler(load_mixture(mixture, verify=False), seq_len=seq_len, global_batch_size=batch)
    it = iter(TrainLoader(sampler, rank=0, world_size=1, micro_size=batch))
    start = time.perf_counter()
    for _ in range(batches):
        x, y = next(it)
        assert x.shape == y.shape == (batch, seq_len)
    return time.perf_counter() - start


def raw_range_reads(ranges: list, per_call: int = 64) -> float:
    """Seconds for fsspec's `cat_ranges` of these ranges, `per_call` at a time (a window's worth)."""
    from pretrainkit.remote.urls import filesystem

    fs, _ = filesystem(ranges[0].url)
    start = time.perf_counter()
    for i in range(0, len(ranges), per_call):
        part = ranges[i : i + per_call]
        data = fs.cat_ranges(
            [filesystem(r.url)[1] for r in part], [r.offset for r in part], [r.offset + r.size for r in part]
        )
        assert [len(d) for d in data] == [r.size for r in part]
    return time.perf_counter() - start


def streaming_main(args: argparse.Namespace) -> int:
    from fixtures.s3_server import s3_server
    from pretrainkit.remote.transfer import upload
    from pretrainkit.shards import batch_cache
    from pretrainkit.shards.set_copies import BATCHES_FOLDER, MAX_BYTES_ENV
    from pretrainkit.shards.verify import listed_files

    with tempfile.TemporaryDirectory() as tmp, s3_server() as server:
        root = Path(tmp)
        texts = [t for docs in _texts().values() for t in docs]
        train_tokenizer(texts, vocab_size=8192).save(str(root / "tokenizer.json"))
        ss = write_text_shards(texts, root / "shards", root / "tokenizer.json")
        os.environ.update(server.environment())
        url = f"{server.make_bucket('bench')}/tokens/all"
        for f in sorted((root / "shards").iterdir()):
            upload(f, f"{url}/{f.name}")
        set_bytes = sum(size for size, _ in listed_files(ss.manifest).values())  # shards and sidecars
        os.environ[MAX_BYTES_ENV] = str(set_bytes - 1)  # streamed, and every batch it reads fits
        os.environ["PTK_CACHE_DIR"] = str(root / "cache")
        mixtures = {}
        for name, shards in (("local", root / "shards"), ("bucket", url)):
            mixtures[name] = root / f"{name}.yaml"
            mixtures[name].write_text(f"seed: 1\nsources:\n  - {{name: all, shards: {shards}, weight: 1}}\n")
        record_batches = ss.batches.num_batches
        batches = min(args.batches, ss.stream_length // (args.batch * (args.seq_len + 1)) - 1)  # one epoch at most
        fetched: list = []
        fetch = batch_cache._fetch

        def recording(ranges: list) -> list[bytes]:
            fetched.extend(ranges)
            return fetch(ranges)

        batch_cache._fetch = recording
        cold_s = raw_s = local_s = warm_s = float("inf")
        for _ in range(args.repeat):  # in turn, the best of each: the machine's load varies
            shutil.rmtree(root / "cache" / BATCHES_FOLDER, ignore_errors=True)
            fetched.clear()
            cold_s = min(cold_s, first_batch_to_last(mixtures["bucket"], args.seq_len, args.batch, batches))
            cold_ranges = list(fetched)
            raw_s = min(raw_s, raw_range_reads(cold_ranges))
            local_s = min(local_s, first_batch_to_last(mixtures["local"], args.seq_len, args.batch, batches))
            warm_s = min(warm_s, first_batch_to_last(mixtures["bucket"], args.seq_len, args.batch, batches))
        batch_cache._fetch = fetch
    tokens = batches * args.batch * args.seq_len
    fetched_bytes = sum(r.size for r in cold_ranges)
    print(
        f"one shard set, {ss.num_tokens:,} tokens, {set_bytes:,} bytes, {record_batches} record batches; "
        f"{batches} batches of {args.batch} x {args.seq_len}; cache bound {set_bytes - 1:,} bytes"
    )
    for name, secs in (("local shards", local_s), ("bucket, cold cache", cold_s), ("bucket, warm cache", warm_s)):
        print(f"TrainLoader, {name:20s} {tokens / secs:14,.0f} tokens/s")
    print(
        f"cold: {len(cold_ranges)} range reads, {fetched_bytes:,} bytes: {fetched_bytes / cold_s / 1e6:,.1f} MB/s; "
        f"raw fsspec cat_ranges of the same ranges: {fetched_bytes / raw_s / 1e6:,.1f} MB/s"
    )
    warm, cold = local_s / warm_s, raw_s / cold_s
    print(f"ratio warm cache / local tokens/s: {warm:.2f}x (target >= 0.9)")
    print(f"ratio cold bytes/s / raw fsspec bytes/s: {cold:.2f}x (target >= 0.8)")
    write_result(
        "loader-streaming",
        {
            "seq_len": args.seq_len,
            "batch": args.batch,
            "batches": batches,
            "repeat": args.repeat,
            "set_tokens": ss.num_tokens,
            "set_bytes": set_bytes,
            "local_tokens_per_s": tokens / local_s,
            "cold_tokens_per_s": tokens / cold_s,
            "warm_tokens_per_s": tokens / warm_s,
            "cold_range_reads": len(cold_ranges),
            "cold_bytes": fetched_bytes,
            "cold_bytes_per_s": fetched_bytes / cold_s,
            "raw_fsspec_bytes_per_s": fetched_bytes / raw_s,
            "ratio_warm_over_local": warm,
            "ratio_cold_over_raw": cold,
        },
    )
    return 0


TRAIN_CONFIG = """run_dir: run
data: {{mixture: mix.yaml, seq_len: 256}}
model: {{d_model: 256, n_layers: 4, n_heads: 8}}
batch: {{global_size: 16, micro_size: 16}}
optim: {{warmup_steps: 2}}
max_steps: {steps}
device: cpu
"""


def trainer_tokens_per_s(root: Path, steps: int) -> float:
    """Median tokens/s of `ptk train` with a demo-sized model on the bench mixture (first step left out)."""
    (root / "train.yaml").write_text(TRAIN_CONFIG.format(steps=steps))
    subprocess.run(
        [sys.executable, "-m", "pretrainkit.cli", "train", str(root / "train.yaml")],
        check=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return statistics.median(read_run(root / "run").train["tokens_per_s"][1:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument(
        "--train-steps",
        type=int,
        default=8,
        help="steps of the trainer measurement (the first is left out; 0 or 1: skip it)",
    )
    p.add_argument("--corpus", choices=["mix", *SHORT], default="mix")
    p.add_argument(
        "--cache-dir",
        default=str(Path(__file__).resolve().parents[2] / "bench-cache"),
        help="where short corpora are built once",
    )
    p.add_argument("--streaming", action="store_true", help="the loader on shards in a bucket (see above)")
    p.add_argument("--repeat", type=int, default=3, help="--streaming: runs of each case, the best kept")
    p.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    args = p.parse_args()
    torch.set_num_threads(1)
    if args.child:
        mixture, *numbers = args.child
        print(json.dumps(measure_loader_process(Path(mixture), *map(int, numbers))))
        return 0
    if not DATA.is_dir():
        print("bench/loader.py: the test data is absent (make test-data); nothing to measure", file=sys.stderr)
        return 1
    if args.streaming:
        return streaming_main(args)
    if args.corpus != "mix":
        return short_corpus_main(args)
    with tempfile.TemporaryDirectory() as tmp:
        mixture, memmap_path = build_data(Path(tmp))
        tokens = args.batches * args.batch * args.seq_len
        base_s = nanogpt_batches(memmap_path, args.seq_len, args.batch, args.batches)
        ours_s = loader_batches(mixture, args.seq_len, args.batch, args.batches, args.workers)
        trainer = trainer_tokens_per_s(Path(tmp), args.train_steps) if args.train_steps > 1 else None
    rows = {"nanoGPT memmap get_batch": base_s, f"TrainLoader ({args.workers} workers)": ours_s}
    for name, secs in rows.items():
        print(f"{name:28s} {args.batches * args.batch / secs:12,.0f} sequences/s {tokens / secs:14,.0f} tokens/s")
    ratio = base_s / ours_s
    print(f"ratio (TrainLoader / baseline tokens/s): {ratio:.2f}x")
    result = {
        "seq_len": args.seq_len,
        "batch": args.batch,
        "batches": args.batches,
        "workers": args.workers,
        "baseline_tokens_per_s": tokens / base_s,
        "loader_tokens_per_s": tokens / ours_s,
        "ratio": ratio,
    }
    if trainer is not None:
        print(
            f"trainer (demo-sized model, CPU) consumes {trainer:,.0f} tokens/s: "
            f"the loader delivers {tokens / ours_s / trainer:,.0f}x that"
        )
        result.update(trainer_tokens_per_s=trainer, loader_over_trainer=tokens / ours_s / trainer)
    write_result("loader", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
