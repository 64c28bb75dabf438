#!/usr/bin/env bash
# `make demo`: the whole pipeline on corpora built from this machine's Python standard library.
# Outputs go to demo_out/. Every step is a plain `ptk` command a user could type.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=demo_out
mkdir -p "$OUT/corpus/code" "$OUT/corpus/docs"

step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

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
