"""`ptk eval MODEL (--shards DIR... | --text FILE... | --mixture YAML)`: loss, perplexity, bits per byte per source.

    ptk eval runs/base --mixture mixture.yaml --tokenizer tokenizer.json
    ptk eval model.safetensors --shards shards/web shards/code --seq-len 512 --json
    ptk eval runs/base --text notes.txt more.jsonl.zst --tokenizer tokenizer.json
    ptk eval runs/base --shards shards/web --per-document web-losses.jsonl   # every document's loss, ranked

MODEL is a run dir (its newest valid checkpoint), a checkpoint dir, a `ptk export` (native or
`--format hf`) or a Hugging Face model directory, loaded by `pretrainkit.train.checkpoint.load_model`. Each
shard set, text input or mixture source is one row; with more than one, an `all` row sums them.
The table goes to stdout (with `--json`, one JSON object instead), the progress bar to stderr.
`--per-document OUT.jsonl` also writes every document's mean loss, highest first, and puts a histogram
of them in the summary (`per_document.py`).
"""

from __future__ import annotations

import argparse
import json
import math
import sys

from pretrainkit.arguments import int_in
from pretrainkit.dataprep.readers import fetched_input_files
from pretrainkit.errors import UserError
from pretrainkit.files import output_file
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.train.rundir.run_files import run_files_read

# Figures printed and stored in JSON; rounding keeps the last, noise-level digits out of comparisons.
DIGITS = 6


def register(sub: argparse._SubParsersAction) -> None:
    from pretrainkit.dataprep.cli_options import add_field_options

    p = sub.add_parser(
        "eval",
        help="loss, perplexity and bits per byte of a model on shards, text or a mixture",
        description="Score every token of every document once (windows of --seq-len tokens) and "
        "report loss (nats/token), perplexity and bits per byte per source.",
    )
    p.add_argument(
        "model", help="a run dir, a checkpoint dir, a ptk export (native or HF) or a Hugging Face model directory"
    )
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--shards", nargs="+", metavar="DIR", help="shard sets: every document")
    what.add_argument(
        "--text", nargs="+", metavar="FILE", help=".txt / .jsonl(.gz/.zst) / .parquet files or directories"
    )
    what.add_argument("--mixture", metavar="YAML", help="a mixture: each source's held-out documents")
    p.add_argument("--tokenizer", help="tokenizer.json: needed for --text, and for bits per byte on shards")
    p.add_argument(
        "--seq-len", type=int_in(1, 1 << 20), help="tokens of context per window (default: the model's max_seq_len)"
    )
    p.add_argument(
        "--batch-size", type=int_in(1, 1 << 20), default=8, help="windows per forward pass (default %(default)s)"
    )
    p.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    p.add_argument(
        "--per-document",
        metavar="OUT.jsonl",
        help="also write every document's mean loss, highest first, to OUT.jsonl (and a histogram in the summary)",
    )
    add_field_options(p)
    p.set_defaults(
        func=run_eval,
        local_outputs=("per_document",),
        url_arguments=UrlArguments(
            selected=(("model", run_files_read),),
            inputs=("text",),
            select_inputs=fetched_input_files,
            files=("shards", "tokenizer"),
        ),
    )


def run_eval(args: argparse.Namespace) -> int:

    from pretrainkit.train.checkpoint.load_model import describe, load_model
    from pretrainkit.train.evaluation import eval_sets
    from pretrainkit.train.evaluation.per_document import DocumentLosses, document_rows, histogram, write_ranking
    from pretrainkit.train.evaluation.scoring import score_documents
    from pretrainkit.train.parallel.distributed import select_device

    if args.per_document:
        output_file(args.per_document)  # before the model is loaded and every document scored
    device = select_device(args.device, 0)
    loaded = load_model(args.model, args.tokenizer, device=str(device))
    cfg = loaded.config
    seq_len = cfg.max_seq_len if args.seq_len is None else args.seq_len
    if not 1 <= seq_len <= cfg.max_seq_len:
        raise UserError(f"--seq-len must lie in [1, {cfg.max_seq_len}] (the model's max_seq_len), got {seq_len}")
    tok, model_sha = loaded.tokenizer, recorded_tokenizer(loaded)
    if args.shards:
        sets = eval_sets.shard_sets(args.shards, cfg.vocab_size, tok, model_sha)
    elif args.mixture:
        sets = eval_sets.mixture_sets(args.mixture, cfg.vocab_size, tok, model_sha)
    else:
        sets = eval_sets.text_sets(args.text, tok, args.text_field, args.id_field)
    eos_id = tok.eos_id if tok is not None else sets_eos(args)
    rows, documents = [], []
    for s in sets:
        losses = DocumentLosses(s.lengths) if args.per_document else None
        score = score_documents(
            loaded.model,
            s.documents(),
            s.lengths,
            eos_id,
            seq_len,
            args.batch_size,
            device,
            desc=f"eval {s.name}",
            on_targets=None if losses is None else losses.add,
        )
        rows.append((s, score))
        if losses is not None:
            documents += document_rows(s.name, s.origin, s.lengths, losses.nats)
    report = build_report(describe(loaded), seq_len, args.batch_size, rows)
    if args.per_document:
        ranked = write_ranking(args.per_document, documents)
        report["per_document"] = {"path": args.per_document, "documents": len(ranked), "histogram": histogram(ranked)}
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    for s, _ in rows:
        if s.rejected:
            reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(s.rejected.items()))
            print(
                f"ptk eval: {s.name}: {sum(s.rejected.values())} input records not scored ({reasons})", file=sys.stderr
            )
    if any(s.text_bytes is None for s, _ in rows):
        print("ptk eval: bits per byte need the tokenizer to decode the shards: pass --tokenizer", file=sys.stderr)
    return 0


def recorded_tokenizer(loaded) -> str | None:
    """The sha256 of the tokenizer the model was trained with, when known (load_model checked a given one)."""
    if loaded.tokenizer is not None:
        return loaded.tokenizer.sha256
    if loaded.kind == "hf":
        return None
    from pretrainkit.train.checkpoint.init_from import find_init_source

    return find_init_source(loaded.path).tokenizer_sha256


def sets_eos(args: argparse.Namespace) -> int:
    """The end-of-text id the shards were written with (no tokenizer at hand)."""
    from pretrainkit.shards import ShardSet

    if args.shards:
        return ShardSet.open(args.shards[0]).tokenizer.eos_id
    from pretrainkit.mixtures import load_mixture

    return load_mixture(args.mixture, verify=False).tokenizer.eos_id


def _round(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.{DIGITS}g}")


def build_report(model: str, seq_len: int, batch_size: int, rows: list) -> dict:
    sources = {}
    for s, score in rows:
        sources[s.name] = {
            "documents": score.documents,
            "tokens": score.tokens,
            "windows": score.windows,
            "batches": score.batches,
            "bytes": s.text_bytes,
            "loss": _round(score.loss),
            "perplexity": _round(score.perplexity),
            "bits_per_byte": _round(score.bits_per_byte(s.text_bytes)) if s.text_bytes else None,
        }
    if len(rows) > 1:
        nats = math.fsum(score.nats for _, score in rows)
        tokens = sum(score.tokens for _, score in rows)
        known = all(s.text_bytes for s, _ in rows)
        text_bytes = sum(s.text_bytes for s, _ in rows) if known else None
        sources["all"] = {
            "documents": sum(score.documents for _, score in rows),
            "tokens": tokens,
            "windows": sum(score.windows for _, score in rows),
            "batches": sum(score.batches for _, score in rows),
            "bytes": text_bytes,
            "loss": _round(nats / tokens),
            "perplexity": _round(math.exp(nats / tokens)),
            "bits_per_byte": _round(nats / math.log(2) / text_bytes) if known else None,
        }
    return {"model": model, "seq_len": seq_len, "batch_size": batch_size, "sources": sources}


def format_table(report: dict) -> str:
    header = ("source", "documents", "tokens", "loss", "perplexity", "bits/byte")
    body = [
        (
            name,
            f"{r['documents']:,}",
            f"{r['tokens']:,}",
            f"{r['loss']:.4f}",
            f"{r['perplexity']:.2f}",
            "-" if r["bits_per_byte"] is None else f"{r['bits_per_byte']:.4f}",
        )
        for name, r in report["sources"].items()
    ]
    widths = [max(len(row[i]) for row in [header, *body]) for i in range(len(header))]
    # `ptk train`'s val loss covers only the first eval.batches held-out batches; this line says the eval covers all.
    covered = list(report["sources"].values())[-1]  # the `all` row, or the only source
    lines = [
        f"model {report['model']}, windows of {report['seq_len']} tokens",
        f"eval loss over all {covered['batches']:,} batches of up to {report['batch_size']} windows "
        f"({covered['windows']:,} windows, {covered['tokens']:,} tokens)",
    ]
    for row in [header, *body]:
        lines.append("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(row, widths))))
    if "per_document" in report:
        from pretrainkit.train.evaluation.per_document import format_histogram

        ranked = report["per_document"]
        lines.append(format_histogram(ranked["histogram"]))
        lines.append(f"wrote {ranked['documents']:,} documents by mean loss, highest first, to {ranked['path']}")
    return "\n".join(lines)
