"""Experiment: continued pretraining on a new domain with 0%, 5% and 25% replay of the original corpus.

    .venv/bin/python -m bench.replay                              # ~10-15 min on 2 CPU cores
    .venv/bin/python -m bench.replay --base-steps 40 --steps 20   # a quick look

After Ibrahim et al. 2024 ("Simple and Scalable Strategies to Continually Pre-train Large Language
Models"): a small byte-level model is trained on the original corpus (WikiText-2 + Reuters-21578), then
continued on the new domain (Python PEPs) from the base weights (`init_from`), the learning rate
re-warmed and re-decayed, once per replay share, at equal compute (same steps, same batch, same
tokens). Replayed sources use `replay: {from: BASE_RUN}`: they continue the original streams where the
base run stopped, so replay is fresh original data, never a repeat. Every mixture lists all three
corpora (validation-only where not trained on), so every run reports validation loss (nats per byte,
on the same held-out documents) on the original and the new domain. The baseline is the 0% row: the
ratio printed is the forgetting of the original corpus (its loss rise over the base model) with
replay, relative to that without. Writes bench/results/replay.json and prints a markdown table;
the runs are kept under bench/results/replay/ (rerunning starts them over).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import time
from pathlib import Path

import numpy as np
import torch
import yaml

from bench.results import RESULTS, write_result
from fixtures.corpora import DATA, pep_documents, reuters_documents, wikitext_documents
from pretrainkit.shards import write_shards
from pretrainkit.train.config import load_config
from pretrainkit.train.loop.run import run_training
from pretrainkit.train.rundir.run_dir import RunDir

ORIGINAL = ("wiki", "reuters")
NEW = "peps"
SHARES = (0.0, 0.05, 0.25)
BYTE_TOKENIZER = hashlib.sha256(b"utf-8 bytes, EOS 256").hexdigest()
MODEL = {"d_model": 128, "n_layers": 4, "n_heads": 4}
SEQ_LEN, BATCH = 128, 16


def byte_shards(work: Path) -> dict[str, Path]:
    """Each corpus as a byte-level shard set (token = UTF-8 byte, EOS 256): no tokenizer to train."""
    corpora = {
        "wiki": wikitext_documents("valid") + wikitext_documents("test"),
        "reuters": reuters_documents(files=6),
        "peps": pep_documents(),
    }
    out = {}
    for name, docs in corpora.items():
        tokens = [np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16) for _, text in docs]
        out[name] = work / "shards" / name
        write_shards(
            tokens, out[name], vocab_size=257, eos_id=256, tokenizer_sha256=BYTE_TOKENIZER, ids=[i for i, _ in docs]
        )
    return out


def mixture(path: Path, shards: dict[str, Path], weights: dict[str, float], replay_from: Path | None) -> Path:
    """All three corpora; those without a weight are validation-only; with `replay_from` the original ones replay."""
    sources = []
    for name in (*ORIGINAL, NEW):
        source: dict = {"name": name, "shards": str(shards[name])}
        if weights.get(name):
            source["weight"] = weights[name]
            if replay_from is not None and name in ORIGINAL:
                source["replay"] = {"from": str(replay_from)}
        else:
            source["eval_only"] = True
        sources.append(source)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"seed": 7, "sources": sources}, sort_keys=False))
    return path


def train(directory: Path, mix: Path, steps: int, lr: float, init_from: Path | None) -> dict[str, float]:
    """One run (warmup 10% of its steps, cosine to lr/10); its final validation loss per source."""
    cfg = {
        "run_dir": "run",
        "seed": 0,
        "data": {"mixture": str(mix), "seq_len": SEQ_LEN},
        "model": MODEL,
        "batch": {"global_size": BATCH, "micro_size": BATCH},
        "max_steps": steps,
        "optim": {"lr": lr, "min_lr": lr / 10, "warmup_steps": max(1, steps // 10)},
        "eval": {"every": max(1, steps // 4), "batches": 8},
        "checkpoint": {"every": 0, "keep": 1},
    }
    if init_from is not None:
        cfg["init_from"] = str(init_from)
    path = directory / "run.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    run_training(load_config(path), str(path), resume=False)
    rows = [json.loads(line) for line in RunDir(directory / "run").metrics.read_text().splitlines()]
    return [r["val_loss"] for r in rows if "val_loss" in r][-1]


def original_loss(val: dict[str, float]) -> float:
    return sum(val[n] for n in ORIGINAL) / len(ORIGINAL)


def table(before: dict[str, float], after: dict[float, dict[str, float]]) -> str:
    lines = [
        "| replay | original before | original after | new domain before | new domain after | forgetting vs 0% |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    rise0 = original_loss(after[0.0]) - original_loss(before)
    for share, val in after.items():
        rise = original_loss(val) - original_loss(before)
        lines.append(
            f"| {share:.0%} | {original_loss(before):.4f} | {original_loss(val):.4f} | {before[NEW]:.4f} | "
            f"{val[NEW]:.4f} | {f'{rise / rise0:.2f}' if rise0 > 0 else 'n/a'} |"
        )
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--base-steps", type=int, default=1000, help="steps of the base run on the original corpus")
    p.add_argument("--steps", type=int, default=400, help="steps of each continued run on the new domain")
    p.add_argument("--lr", type=float, default=3e-3, help="peak learning rate of every run (re-warmed)")
    p.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch CPU threads (on a shared 2-core machine, two threads that wait for each other run "
        "several times slower than one)",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    if not DATA.is_dir():
        print("bench.replay: the test data is absent (make test-data); nothing to measure")
        return 1
    work = RESULTS / "replay"
    shutil.rmtree(work, ignore_errors=True)
    start = time.perf_counter()
    shards = byte_shards(work)
    base_mix = mixture(work / "base" / "mix.yaml", shards, {n: 0.5 for n in ORIGINAL}, None)
    before = train(work / "base", base_mix, args.base_steps, args.lr, None)
    base_run = work / "base" / "run"
    after = {}
    for share in SHARES:
        weights = {NEW: round(1 - share, 6), **{n: round(share / len(ORIGINAL), 6) for n in ORIGINAL}}
        directory = work / f"replay-{round(share * 100)}"
        mix = mixture(directory / "mix.yaml", shards, weights, base_run)
        after[share] = train(directory, mix, args.steps, args.lr, base_run)
    minutes = (time.perf_counter() - start) / 60
    text = table(before, after)
    tokens = args.steps * BATCH * SEQ_LEN
    print(
        f"\nContinued pretraining, {args.steps} steps x {BATCH * SEQ_LEN} byte tokens ({tokens:,} per run) from a "
        f"base run of {args.base_steps} steps; "
        f"validation loss in nats/byte (original = mean of {', '.join(ORIGINAL)}); "
        f"{minutes:.1f} min\n"
    )
    print(text)
    write_result(
        "replay",
        {
            "model": MODEL,
            "seq_len": SEQ_LEN,
            "global_batch": BATCH,
            "base_steps": args.base_steps,
            "steps": args.steps,
            "lr": args.lr,
            "threads": args.threads,
            "minutes": round(minutes, 2),
            "before": before,
            "after": {f"{s:.0%}": v for s, v in after.items()},
            "table": text,
        },
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
