#!/usr/bin/env bash
# `make demo`: the whole pipeline on corpora built from this machine's Python standard library.
# Outputs go to demo_out/. Every step is a plain `ptk` command a user could type.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=demo_out
mkdir -p "$OUT/corpus/code" "$OUT/corpus/docs"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

# Run a command and SIGKILL it as soon as RUN_DIR holds the checkpoint of step STEP.
kill_at_checkpoint() {
    local run_dir=$1 at=$2; shift 2
    "$@" & local pid=$!
    until [ -d "$run_dir/checkpoints/$(printf 'step-%07d' "$at")" ] || ! kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    kill -9 "$pid" 2>/dev/null && echo "(SIGKILLed at the step-$at checkpoint, as planned)"
    wait "$pid" 2>/dev/null || true
}

step "1. corpora from the standard library (modules + test suite = code, docstrings = docs)"
python demo/stdlib_corpus.py "$OUT/corpus/raw"
mv -f "$OUT/corpus/raw/modules.jsonl" "$OUT/corpus/raw/tests.jsonl" "$OUT/corpus/code/"
mv -f "$OUT/corpus/raw/docstrings.jsonl" "$OUT/corpus/docs/"

step "2. exact + near dedup of the code; the docs deduplicated against it (--against)"
ptk dedup "$OUT/corpus/code" -o "$OUT/dedup/code"
ptk dedup "$OUT/corpus/docs" -o "$OUT/dedup/docs" --against "$OUT/dedup/code/index"
echo "examples of removed documents:"
head -n 3 "$OUT/dedup/code/duplicates.jsonl"

step "3. a byte-level BPE tokenizer trained on the deduplicated corpora"
ptk tokenizer train "$OUT"/dedup/code/part-*.jsonl.zst "$OUT"/dedup/docs/part-*.jsonl.zst \
    -o "$OUT/tokenizer.json" --vocab-size 4096

step "4. tokenize into checksummed zstd Arrow shards; verify and inspect them"
ptk tokenize "$OUT"/dedup/code/part-*.jsonl.zst --tokenizer "$OUT/tokenizer.json" -o "$OUT/shards/code" --shard-size 2M
ptk tokenize "$OUT"/dedup/docs/part-*.jsonl.zst --tokenizer "$OUT/tokenizer.json" -o "$OUT/shards/docs" --shard-size 2M
ptk shards verify "$OUT/shards/code"
ptk shards inspect "$OUT/shards/docs" --tokenizer "$OUT/tokenizer.json" --samples 1 --chars 160

step "5. the mixture: what a 2M-token run would draw from each source"
ptk mix inspect mixtures/examples/demo.yaml --tokens 2M --seq-len 256

step "6. plan: compute-optimal size for a budget, and what the demo run needs per device"
ptk plan --flops 1e21 --devices 64 --device-memory 80 --peak-flops 989T
ptk plan --config train/examples/demo.yaml --devices 2

step "7. train the base model (2 processes, DDP, CPU): SIGKILLed midway, then the same command resumes it"
rm -rf "$OUT/runs"
kill_at_checkpoint "$OUT/runs/base" 100 ptk train train/examples/demo.yaml --nproc 2
ptk train train/examples/demo.yaml --nproc 2
python demo/show_metrics.py "$OUT/runs/base"
ptk export "$OUT/runs/base" -o "$OUT/runs/base/model.safetensors"

step "8. resume is exact: 40 steps uninterrupted vs SIGKILLed after step 20 and resumed"
check="ptk train train/examples/demo.yaml --nproc 2 --set max_steps=40 --set checkpoint.every=10"
$check --set run_dir="$OUT/runs/check-a"
kill_at_checkpoint "$OUT/runs/check-b" 20 $check --set run_dir="$OUT/runs/check-b"
$check --set run_dir="$OUT/runs/check-b"
python demo/show_metrics.py "$OUT/runs/check-a" --compare "$OUT/runs/check-b"

step "9. continued pretraining on the docstrings, replaying 5% of the code where the base run stopped"
ptk mix inspect mixtures/examples/continued.yaml --tokens 400K --seq-len 256
ptk train train/examples/continued.yaml
python demo/show_metrics.py "$OUT/runs/continued"

step "10. report"
ptk report "$OUT/runs/base" --compare "$OUT/runs/continued" -o "$OUT/report.png"
echo "report picture: $OUT/report.png"
