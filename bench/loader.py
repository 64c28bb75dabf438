"""Benchmark: the mixture `TrainLoader` vs a nanoGPT-style random-window read, in the same run.

    python bench/loader.py [--seq-len 1024] [--batch 16] [--batches 2000] [--workers 0] [--train-steps 8]

Data: a byte-level BPE (8192 tokens) trained on the three corpora, then three shard sets
(Reuters-21578 bodies, Wikitext-2 valid+test articles, PEPs) mixed 0.5 / 0.3 / 0.2.
Baseline: the same tokens as one uint16 `np.memmap` (doc EOS doc EOS ...), and nanoGPT's
`get_batch`: `batch` random offsets, `torch.stack` of `from_numpy(data[i:i+L].astype(int64))`
for inputs and targets. Both produce (inputs, targets) int64 [batch, seq_len] on the CPU; the
loader runs with world size 1 and one micro-batch per global batch. Prints sequences/s, tokens/s
and the ratio. Then, for scale, what the trainer consumes: `ptk train` on the same mixture with a
demo-sized model (d_model 256, 4 layers, seq_len 256, batch 16) for a few steps, its median
tokens/s, and how many times that the loader delivers. Writes bench/results/loader.json.
"""

from __future__ import annotations

import sys
from pathlib import Path

# The repository root replaces this script's folder on the path: bench/tokenize.py would otherwise
# shadow the standard library's `tokenize` module.
sys.path[0] = str(Path(__file__).resolve().parent.parent)

import argparse  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.corpora import pep_documents, reuters_documents, shared_data_dir, wikitext_documents  # noqa: E402
from bench.results import write_result  # noqa: E402
from dataprep.tokenize import write_text_shards  # noqa: E402
from dataprep.tokenizer import train_tokenizer  # noqa: E402
from mixtures import MixtureSampler, TrainLoader, load_mixture  # noqa: E402
from shards import ShardSet  # noqa: E402
from train.reports.run_log import read_run  # noqa: E402

SOURCES = {"reuters": 0.5, "wikitext": 0.3, "peps": 0.2}


def build_data(root: Path) -> tuple[Path, Path]:
    """Shard sets and a mixture YAML under root, and the baseline's memmap file of the same tokens."""
    texts = {
        "reuters": [t for _, t in reuters_documents()],
        "wikitext": [t for _, t in wikitext_documents("valid") + wikitext_documents("test")],
        "peps": [t for _, t in pep_documents()],
    }
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
    subprocess.run([sys.executable, "-m", "pretrainkit.cli", "train", str(root / "train.yaml")], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    return statistics.median(read_run(root / "run").train["tokens_per_s"][1:])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seq-len", type=int, default=1024)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--batches", type=int, default=2000)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--train-steps", type=int, default=8, help="steps of the trainer measurement (the first is left out; 0 or 1: skip it)")
    args = p.parse_args()
    if shared_data_dir() is None:
        print("bench/loader.py: ../shared/data is absent; nothing to measure", file=sys.stderr)
        return 1
    torch.set_num_threads(1)
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
        "seq_len": args.seq_len, "batch": args.batch, "batches": args.batches, "workers": args.workers,
        "baseline_tokens_per_s": tokens / base_s, "loader_tokens_per_s": tokens / ours_s, "ratio": ratio,
    }  # fmt: skip
    if trainer is not None:
        print(f"trainer (demo-sized model, CPU) consumes {trainer:,.0f} tokens/s: the loader delivers {tokens / ours_s / trainer:,.0f}x that")
        result.update(trainer_tokens_per_s=trainer, loader_over_trainer=tokens / ours_s / trainer)
    write_result("loader", result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
