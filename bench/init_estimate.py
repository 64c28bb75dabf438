"""Benchmark: how long a run `ptk init --minutes M` sized really trains, measured sizing against nominal.

    python -m bench.init_estimate [--minutes 1]

Corpus: Wikitext-2 (valid and test) and PEPs from ../shared/data as two byte-level shard sets (token =
UTF-8 byte, no tokenizer to train). Each sizing writes a run with `ptk init RUN --shards ... --minutes M`
and trains it with the `ptk train` command `ptk init` prints; the clock runs around `ptk train`.
Project: `ptk init` as it is (it times a few real steps of the proposed run before sizing it).
Baseline, in the same run: `ptk init --no-measure` (sized from the nominal FLOP/s of the cores or GPUs).
Prints each run's training time against the M minutes asked for and writes bench/results/init_estimate.json.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from bench.results import write_result  # noqa: E402
from fixtures.corpora import DATA, pep_documents, wikitext_documents  # noqa: E402
from pretrainkit.shards import write_shards  # noqa: E402

BYTE_VOCAB, BYTE_EOS = 257, 256  # token = UTF-8 byte, EOS = 256


def byte_shards(docs: list[tuple[str, str]], out: Path) -> Path:
    tokens = [np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16) for _, text in docs]
    write_shards(tokens, out, vocab_size=BYTE_VOCAB, eos_id=BYTE_EOS, tokenizer_sha256="b" * 64)
    return out


def ptk(*args: str) -> str:
    done = subprocess.run([sys.executable, "-m", "pretrainkit.cli", *args], capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench/init_estimate.py: ptk {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return done.stdout


def sized_run(run: Path, shards: list[Path], minutes: float, measure: bool) -> dict:
    """`ptk init` then the `ptk train` it proposes; the seconds `ptk train` took."""
    out = ptk(
        "init",
        str(run),
        "--shards",
        *map(str, shards),
        "--minutes",
        f"{minutes:g}",
        *([] if measure else ["--no-measure"]),
    )
    nproc = re.search(r"--nproc (\d+)", out)
    start = time.perf_counter()
    ptk("train", str(run / "train.yaml"), *(["--nproc", nproc.group(1)] if nproc else []))
    seconds = time.perf_counter() - start
    steps = int(re.search(r"^max_steps: (\d+)$", (run / "train.yaml").read_text(), re.M).group(1))
    return {"train_seconds": seconds, "steps": steps, "ratio_to_target": seconds / (60 * minutes)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=1.0)
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit("bench/init_estimate.py needs the test data (make test-data)")
    with tempfile.TemporaryDirectory(prefix="ptk-bench-init-") as tmp:
        work = Path(tmp)
        wiki = wikitext_documents("valid") + wikitext_documents("test")
        shards = [byte_shards(wiki, work / "wiki"), byte_shards(pep_documents(), work / "peps")]
        results = {
            "measured": sized_run(work / "measured", shards, args.minutes, measure=True),
            "nominal": sized_run(work / "nominal", shards, args.minutes, measure=False),
        }
    for name, r in results.items():
        print(
            f"{name:<9} ptk init --minutes {args.minutes:g}: {r['steps']} steps trained in "
            f"{r['train_seconds']:.1f} s, {r['ratio_to_target']:.2f}x the {60 * args.minutes:.0f} s asked for"
        )
    write_result("init_estimate", {"minutes": args.minutes, **results})


if __name__ == "__main__":
    main()
