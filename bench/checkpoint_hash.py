"""Benchmark: what hashing a checkpoint's files costs, against writing them with `torch.distributed.checkpoint`.

    python -m bench.checkpoint_hash [--mb 512] [--repeats 3]

Every checkpoint's `meta.json` records each file's sha256 (train/checkpoint/checkpoints.py), and a
resume verifies them. Both are on the critical path: the processes wait for the hashing. This
measures, on one process and the same state (float32 tensors of --mb MB in all), the seconds of
`dcp.save` (the baseline: the write that cannot be avoided) and of sha256 over the files it wrote
(read back from the page cache, as right after a save), and prints the cost per GB and the ratio.
With N processes each hashes about 1/N of the files (`share_of_files`), so the cost per process
per GB of checkpoint is this figure / N.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
import warnings
from pathlib import Path

import torch
import torch.distributed.checkpoint as dcp

from bench.results import write_result
from pretrainkit.files import sha256_file


def state_of(mb: int) -> dict[str, torch.Tensor]:
    """Tensors of 16 MB each (a model's weight matrices), `mb` MB in all."""
    g = torch.Generator().manual_seed(0)
    return {f"layer{i}.weight": torch.randn(2048, 2048, generator=g) for i in range(max(1, mb // 16))}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mb", type=int, default=512)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args()
    state = state_of(args.mb)
    size = sum(t.numel() * t.element_size() for t in state.values())
    writes, hashes = [], []
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as d:
            t0 = time.perf_counter()
            with warnings.catch_warnings():  # "torch.distributed is disabled": one process is the point
                warnings.simplefilter("ignore")
                dcp.save({"model": state}, checkpoint_id=d, no_dist=True)
            t1 = time.perf_counter()
            for f in sorted(Path(d).iterdir()):
                sha256_file(f)
            t2 = time.perf_counter()
        writes.append(t1 - t0)
        hashes.append(t2 - t1)
    gb = size / 1e9
    write_s, hash_s = statistics.median(writes), statistics.median(hashes)
    print(f"checkpoint of {gb:.3f} GB on one process, median of {args.repeats}")
    print(f"  dcp.save (baseline)   {write_s:7.3f} s   {write_s / gb:6.3f} s/GB")
    print(f"  sha256 of its files   {hash_s:7.3f} s   {hash_s / gb:6.3f} s/GB")
    print(f"  hashing / writing     {hash_s / write_s:.2f}x")
    write_result("checkpoint_hash", {"gb": gb, "repeats": args.repeats, "dcp_save_s_per_gb": write_s / gb,
                                     "sha256_s_per_gb": hash_s / gb, "ratio_hash_to_write": hash_s / write_s})  # fmt: skip


if __name__ == "__main__":
    main()
