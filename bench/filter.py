"""Benchmark: `ptk filter` with the default filters vs datatrove running the same filters on the same
documents, in the same run.

    python -m bench.filter [--mb 200] [--workers 2] [--no-language]

Corpus: every text corpus in ../shared/data (Reuters-21578 bodies, Wikitext-2, PEPs, license texts),
repeated (each copy with ids of its own) or cut to about --mb MB of text, in 8 JSONL files. pretrainkit:
`run_filter` with the default filters (language ID, Gopher repetition, Gopher quality, C4 as FineWeb
ran it, FineWeb quality, PII) on --workers local workers; and once more without the language step:
the filters datatrove runs here. datatrove: `LocalPipelineExecutor` with 8 tasks on --workers
processes, JsonlReader -> GopherRepetitionFilter -> GopherQualityFilter ->
C4QualityFilter(filter_no_terminal_punct=False) -> FineWebQualityFilter(char_duplicates_ratio=0.1,
the paper's threshold; its later fourth rule off) -> PIIFormatter -> JsonlWriter, FineWeb's recipe
(datatrove: https://github.com/huggingface/datatrove/blob/main/examples/fineweb.py) without its
LanguageFilter: that one downloads its model (lid.176.bin) at run time, which this machine cannot (and
pretrainkit never does). datatrove finds words and sentences with spaCy's tokenizer (offline, in the spacy package).

Prints MB/s of each, the ratio, where the time goes (seconds per filter step, all workers together,
for both), how often the two agree on keeping a document, and writes bench/results/filter.json.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.results import write_result  # noqa: E402
from fixtures.corpora import DATA, text_corpora, write_jsonl  # noqa: E402
from pretrainkit.dataprep.executors.local import LocalRunner  # noqa: E402
from pretrainkit.dataprep.filter.pipeline import FilterOptions, run_filter  # noqa: E402
from pretrainkit.dataprep.filter.steps import DEFAULT_FILTERS, read_filters  # noqa: E402

FILES = 8


def corpus(root: Path, mb: float) -> tuple[Path, int, float]:
    """The corpora's documents, repeated or cut to about `mb` MB of text, in FILES files."""
    base = text_corpora()
    docs, size, copy = [], 0, 0
    while size < mb * 1e6:
        for doc_id, text in base:
            docs.append((f"{doc_id}/copy{copy}", text))
            size += len(text.encode())
            if size >= mb * 1e6:
                break
        copy += 1
    for i in range(FILES):
        write_jsonl(docs[i::FILES], root / f"part{i}.jsonl")
    return root, len(docs), sum(p.stat().st_size for p in root.iterdir()) / 1e6


def ours(inputs: Path, out: Path, workers: int, language: bool) -> dict:
    steps = tuple(s for s in read_filters(DEFAULT_FILTERS) if language or s.name != "language")
    with LocalRunner(workers) as runner:  # workers forked before the clock starts, as datatrove's pool is below
        t0 = time.perf_counter()
        stats = run_filter([str(inputs)], out, FilterOptions(steps), runner)
        seconds = time.perf_counter() - t0
    kept = set()
    for part in sorted(out.glob("part-*.jsonl.zst")):
        data = zstandard.ZstdDecompressor().decompressobj().decompress(part.read_bytes())
        kept.update(json.loads(line)["id"] for line in data.splitlines())
    return {
        "seconds": seconds,
        "kept": kept,
        "removed": stats["removed_docs"],
        "steps": {k: round(v, 2) for k, v in stats["step_seconds"].items()},
    }


def datatrove(inputs: Path, out: Path, workers: int) -> dict:
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.filters import (
        C4QualityFilter,
        FineWebQualityFilter,
        GopherQualityFilter,
        GopherRepetitionFilter,
    )
    from datatrove.pipeline.formatters import PIIFormatter
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter

    executor = LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(inputs)),
            GopherRepetitionFilter(),
            GopherQualityFilter(),
            C4QualityFilter(filter_no_terminal_punct=False),
            FineWebQualityFilter(char_duplicates_ratio=0.1, new_line_ratio=math.inf),
            PIIFormatter(),
            JsonlWriter(str(out / "kept"), compression=None),
        ],
        tasks=FILES,
        workers=workers,
        logging_dir=str(out / "logs"),
    )
    t0 = time.perf_counter()
    executor.run()
    seconds = time.perf_counter() - t0
    kept = {json.loads(line)["id"] for p in (out / "kept").glob("*.jsonl") for line in p.read_text().splitlines()}
    steps = {
        s["name"]: round(s["time_stats"]["total"], 2) for s in json.loads((out / "logs" / "stats.json").read_text())
    }
    return {"seconds": seconds, "kept": kept, "steps": steps}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=200, help="corpus size to build, MB of JSONL (default 200)")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--no-language", action="store_true", help="skip the run with the language step")
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit("bench/filter.py needs the test data (make test-data)")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        inputs, docs, mb = corpus(tmp / "in", args.mb)
        print(f"corpus: {docs:,} documents, {mb:.1f} MB of JSONL in {FILES} files; {args.workers} workers each")
        runs = {}
        if not args.no_language:
            runs["pretrainkit"] = ours(inputs, tmp / "ours", args.workers, language=True)
        runs["pretrainkit_same_filters"] = ours(inputs, tmp / "ours-same", args.workers, language=False)
        runs["datatrove"] = datatrove(inputs, tmp / "datatrove", args.workers)

    same, base = runs["pretrainkit_same_filters"], runs["datatrove"]
    agree = 1 - len(same["kept"] ^ base["kept"]) / docs
    result = {
        "corpus_mb": round(mb, 1),
        "docs": docs,
        "workers": args.workers,
        **{
            name: {
                "seconds": round(r["seconds"], 2),
                "mb_per_s": round(mb / r["seconds"], 2),
                "kept": len(r["kept"]),
                "step_seconds": r["steps"],
            }
            for name, r in runs.items()
        },
        "speedup_same_filters": round(base["seconds"] / same["seconds"], 2),
        "decisions_agree": round(agree, 4),
    }
    if "pretrainkit" in runs:
        result["speedup_with_language_vs_datatrove_without"] = round(
            base["seconds"] / runs["pretrainkit"]["seconds"], 2
        )
    for name in runs:
        r = result[name]
        print(f"  {name:<26} {r['seconds']:8.2f} s  {r['mb_per_s']:6.2f} MB/s  kept {r['kept']:,} of {docs:,}")
        total = sum(r["step_seconds"].values()) or 1
        for step, s in sorted(r["step_seconds"].items(), key=lambda kv: -kv[1]):
            print(f"      {step:<36} {s:8.2f} s  {100 * s / total:5.1f}%")
    print(f"speedup, the same filters: {result['speedup_same_filters']}x datatrove")
    if "pretrainkit" in runs:
        print(
            "speedup, pretrainkit with language ID vs datatrove without: "
            f"{result['speedup_with_language_vs_datatrove_without']}x"
        )
    print(f"keep/remove decisions the same for {100 * agree:.2f}% of documents")
    write_result("filter", result)


if __name__ == "__main__":
    main()
