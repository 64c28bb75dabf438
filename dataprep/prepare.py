"""`ptk prepare`: dedup then tokenize as one pipeline, `OUT/dedup/` then `OUT/shards/`.

    manifest = run_prepare(["corpus/"], Path("out"), "tokenizer.json", DedupOptions(), TokenizeOptions(), workers=4)

The shard manifest's provenance names the raw inputs with their hashes and holds the dedup
stats, so it describes the whole pipeline. Both stages run on one runner (the same worker
processes, or the same Ray connection) and are crash-safe on their own, so running the same
command again after a kill completes the job with the same bytes.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from pretrainkit.dataprep.dedup.pipeline import DedupOptions, run_dedup
from pretrainkit.dataprep.dedup.pipeline import owned_directories as dedup_owned
from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.readers import DEDUP_KEPT_GLOB, discover_inputs
from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions, input_hashes, tokenize_corpus
from pretrainkit.dataprep.tokenize.corpus import owned_directories as shards_owned
from pretrainkit.dataprep.tokenize.tokenizer import load_tokenizer
from pretrainkit.output_folders import DEDUP, PREPARE, TOKENIZE, check_folder, output_folder


def _stage_dirs(out_dir: Path) -> tuple[Path, Path]:
    return out_dir / "dedup", out_dir / "shards"


def owned_directories(out_dir: Path) -> tuple[list[Path], list[Path]]:
    """Where only a prepare run into `out_dir` writes: its two stages' (directories, trees)."""
    dedup_dir, shard_dir = _stage_dirs(out_dir)
    (dedup_dirs, dedup_trees), (shard_dirs, shard_trees) = dedup_owned(dedup_dir), shards_owned(shard_dir)
    return dedup_dirs + shard_dirs, dedup_trees + shard_trees


def run_prepare(
    inputs: list[str],
    out_dir: Path,
    tokenizer_path: str,
    dedup: DedupOptions,
    tokenize: TokenizeOptions,
    workers: int = 1,
    runner: JobRunner | None = None,
) -> tuple[dict, dict]:
    """Returns (dedup stats, shard manifest). The jobs run on `runner`, else on `workers` local processes."""
    if runner is None:
        with LocalRunner(workers) as local:
            return run_prepare(inputs, out_dir, tokenizer_path, dedup, tokenize, runner=local)
    dedup.validate()  # before the output folder is made
    dedup_dir, shard_dir = _stage_dirs(out_dir)
    with output_folder(out_dir, PREPARE):
        for folder, kind in ((dedup_dir, DEDUP), (shard_dir, TOKENIZE)):
            check_folder(folder, kind)  # before the long dedup, not after it
        return _prepare(inputs, out_dir, tokenizer_path, dedup, tokenize, runner)


def _prepare(
    inputs: list[str],
    out_dir: Path,
    tokenizer_path: str,
    dedup: DedupOptions,
    tokenize: TokenizeOptions,
    runner: JobRunner,
) -> tuple[dict, dict]:
    load_tokenizer(tokenizer_path, tokenize.eos_token)  # fail before the long dedup, not after it
    raw_inputs = input_hashes(discover_inputs(inputs), runner)
    dedup_dir, shard_dir = _stage_dirs(out_dir)
    stats = run_dedup(inputs, dedup_dir, dedup, runner=runner)
    reproducible_stats = json.loads((dedup_dir / "stats.json").read_text(encoding="utf-8"))
    kept = sorted(str(p) for p in dedup_dir.glob(DEDUP_KEPT_GLOB))
    # Kept records keep their original fields, ids included; read them with the same field names.
    tokenize = replace(tokenize, text_field=dedup.text_field, id_field=dedup.id_field)
    manifest = tokenize_corpus(
        kept,
        shard_dir,
        tokenizer_path,
        tokenize,
        runner=runner,
        provenance={"inputs": raw_inputs, "dedup": reproducible_stats},
    )
    return stats, manifest
