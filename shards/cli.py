"""`ptk shards verify` and `ptk shards inspect`."""

from __future__ import annotations

import argparse
from pathlib import Path

from pretrainkit.arguments import int_in
from pretrainkit.errors import UserError
from pretrainkit.files import sha256_file
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.shards.inspect import inspect_lines
from pretrainkit.shards.manifest import MANIFEST_NAME, fingerprint, load_manifest
from pretrainkit.shards.reader import ShardSet
from pretrainkit.shards.verify import check_shards_whole, verify_shards


def register(sub: argparse._SubParsersAction) -> None:
    shards = sub.add_parser("shards", help="check or describe a shard set", description="Shard set tools.")
    shards_sub = shards.add_subparsers(dest="shards_command", metavar="COMMAND", required=True)
    verify = shards_sub.add_parser(
        "verify",
        help="check every shard against the manifest (exit 1 naming each bad file)",
        description="Check that every shard listed in SHARDS/manifest.json exists with the listed size and "
        "sha256. Prints one line per missing, truncated or altered file and exits 1; exits 0 when whole.",
    )
    verify.add_argument("shards", metavar="SHARDS", help="shard directory")
    verify.set_defaults(func=run_verify, url_arguments=UrlArguments(files=("shards",)))
    inspect = shards_sub.add_parser(
        "inspect",
        help="counts, document-length histogram and sample documents",
        description="Describe a shard set: counts, a document-length histogram and a few documents "
        "(decoded when --tokenizer is given, else as token ids).",
    )
    inspect.add_argument("shards", metavar="SHARDS", help="shard directory")
    inspect.add_argument(
        "--tokenizer", help="tokenizer.json or HF directory to decode samples with (must match the manifest's sha256)"
    )
    inspect.add_argument("--samples", type=int_in(0, 10**6), default=3, help="documents to show (default 3)")
    inspect.add_argument(
        "--chars", type=int_in(0, 10**9), default=200, help="characters shown per document (default 200)"
    )
    inspect.add_argument("--no-verify", action="store_true", help="skip the sha256 check of every shard")
    inspect.set_defaults(func=run_inspect, url_arguments=UrlArguments(files=("shards",)))


def run_verify(args: argparse.Namespace) -> int:
    directory = Path(args.shards)  # Path drops a trailing or doubled slash, so messages name "shards/manifest.json"
    manifest = load_manifest(directory)
    problems = verify_shards(directory, manifest, progress=True)
    for line in problems:
        print(line)
    t = manifest["totals"]
    if problems:
        print(
            f"FAILED: {len(problems)} problem{'s' if len(problems) > 1 else ''} "
            f"with the {t['shards']} shards of {directory}"
        )
        return 1
    print(
        f"OK: {t['shards']} shards, {t['docs']} documents, {t['tokens']} tokens match {directory / MANIFEST_NAME} "
        f"(fingerprint {fingerprint(manifest)[:16]})"
    )
    return 0


def run_inspect(args: argparse.Namespace) -> int:
    if args.samples < 0:
        raise UserError(f"--samples must be >= 0, got {args.samples}")
    if args.chars < 1:
        raise UserError(f"--chars must be >= 1, got {args.chars}")
    ss = ShardSet.open(args.shards)
    if not args.no_verify:  # a histogram and samples of altered tokens would describe no real data
        check_shards_whole(ss.path, ss.manifest, str(ss.path), progress=True)
    decode = None
    if args.tokenizer:
        from tokenizers import Tokenizer

        path = Path(args.tokenizer)
        path = path / "tokenizer.json" if path.is_dir() else path  # a Hugging Face model or tokenizer directory
        if not path.is_file():
            raise UserError(f"{path}: tokenizer file not found")
        if sha256_file(path) != ss.tokenizer.sha256:
            raise UserError(f"{args.tokenizer}: not the tokenizer of {args.shards} (sha256 differs from its manifest)")
        decode = Tokenizer.from_file(str(path)).decode
    print("\n".join(inspect_lines(ss, decode, args.samples, args.chars)))
    return 0
