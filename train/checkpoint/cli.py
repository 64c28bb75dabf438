"""`ptk export MODEL -o OUT`: a run's newest valid checkpoint as one safetensors file, or as a Hugging
Face directory that transformers' AutoModelForCausalLM and AutoTokenizer load.

    ptk export runs/base -o model.safetensors
    ptk export runs/base --format hf -o hf-model/ --dtype bf16
    ptk export s3://bucket/runs/base --format hf -o s3://bucket/models/base   # a run and an output in a bucket
"""

from __future__ import annotations

import argparse
import contextlib
from pathlib import Path

from pretrainkit.arguments import count_in
from pretrainkit.errors import UserError, os_error
from pretrainkit.files import output_file
from pretrainkit.output_folders import EXPORT, output_folder, prefixed
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.remote.urls import is_url
from pretrainkit.train.rundir.run_files import run_files_read


def cmd_export(args: argparse.Namespace) -> int:
    import torch

    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    target = Path(args.output)
    with contextlib.ExitStack() as held:
        with prefixed("-o"):  # native: FILE.safetensors, or a directory for model.safetensors + pretrainkit_model.json
            if args.format == "native" and target.suffix == ".safetensors":
                output_file(target)
            else:  # held for the export: another command's output is refused, and so is a second export into it
                held.enter_context(output_folder(target, EXPORT))
        return _export(args, target, dtype)


def _export(args: argparse.Namespace, target: Path, dtype) -> int:
    from pretrainkit.train.checkpoint.export import export_hf, export_model

    if args.format == "native":
        if args.tokenizer is not None:
            raise UserError("--tokenizer is for --format hf (a native export records the tokenizer's sha256 only)")
        try:
            out, ckpt, cfg = export_model(args.run_dir, target, dtype)
        except OSError as e:
            raise os_error(e, target) from None
        print(
            f"ptk export: step {ckpt.step} of {ckpt.path.parent.parent} ({cfg.num_params() / 1e6:.2f}M parameters, "
            f"{args.dtype}) -> {out} ({out.stat().st_size / 2**20:.1f} MiB)"
        )
        return 0
    from pretrainkit.train.checkpoint.load_model import describe, load_model

    loaded = load_model(args.run_dir, tokenizer=args.tokenizer)
    try:
        files = export_hf(loaded, target, dtype, max_shard_bytes=args.max_shard_size)
    except OSError as e:
        raise os_error(e, target) from None
    size = sum(f.stat().st_size for f in files) / 2**20
    print(
        f"ptk export: {describe(loaded)} -> {target} (Hugging Face {loaded.config.family}, {args.dtype}, "
        f"{len(files)} safetensors file(s), {size:.1f} MiB)"
    )
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "export",
        help="write a run's model as one safetensors file, or as a Hugging Face directory",
        description="native: consolidate the newest valid checkpoint (any world size / parallel mode) "
        "into one safetensors file loadable on one process (pretrainkit.train.checkpoint.export.load_exported). "
        "hf: a directory transformers' AutoModelForCausalLM and AutoTokenizer load.",
    )
    p.add_argument(
        "run_dir",
        metavar="MODEL",
        help="a run directory (its newest valid checkpoint) or one checkpoint "
        "directory; with --format hf also a native export or a Hugging Face directory",
    )
    p.add_argument(
        "-o",
        "--output",
        required=True,
        type=export_target,
        help="native: FILE.safetensors, or a directory (model.safetensors + pretrainkit_model.json); hf: a directory",
    )
    p.add_argument("--format", choices=["native", "hf"], default="native")
    p.add_argument("--dtype", choices=["fp32", "bf16", "fp16"], default="fp32")
    p.add_argument(
        "--tokenizer",
        help="hf: the model's tokenizer.json or HF directory, when the run does not lead to it "
        "(checked against the sha256 the run recorded)",
    )
    p.add_argument(
        "--max-shard-size",
        type=count_in(1, 10**15),
        default=5_000_000_000,
        metavar="BYTES",
        help="hf: weight files above this size are split, with model.safetensors.index.json (default 5G)",
    )
    p.set_defaults(
        func=cmd_export,
        url_arguments=UrlArguments(selected=(("run_dir", run_files_read),), files=("tokenizer",), output="output"),
    )


def export_target(value: str) -> str:
    """-o: a URL is a folder (written locally, then published), never a .safetensors object of its own."""
    if is_url(value) and value.rstrip("/").endswith(".safetensors"):
        raise argparse.ArgumentTypeError(
            f"{value}: a URL output is a folder (it gets model.safetensors); drop the .safetensors name"
        )
    return value
