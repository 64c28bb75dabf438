"""`ptk mix inspect MIXTURE.yaml [--tokens N]`: check a mixture and show what it will draw.

    ptk mix inspect mixtures/examples/demo.yaml --tokens 20M --seq-len 256

Exit status 0, or 1 when training would stop with an error: the budget would take a source past its
`max_epochs`, or a `replay.from` run does not exist; a bad mixture is a one-line error and exit status 2.
"""

from __future__ import annotations

import argparse

from pretrainkit.arguments import count_in, int_in
from pretrainkit.mixtures.inspect import format_report, inspect_mixture
from pretrainkit.mixtures.mixture import load_mixture


def register(sub: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """Add `mix` and `mix inspect`; return `mix`'s subcommands, for the console to add `mix search`
    (`train/mix_search/cli.py`: it trains, which this layer may not import)."""
    mix = sub.add_parser("mix", help="check and describe a mixture YAML", description="Mixture tools.")
    mix_sub = mix.add_subparsers(dest="mix_command", metavar="COMMAND", required=True)
    inspect = mix_sub.add_parser(
        "inspect",
        help="effective proportions, tokens and epochs per source for a token budget, warnings",
        description="Validate a mixture (schema, shard checksums, one tokenizer) and print per source: weight, "
        "share of training sequences, documents, held-out documents, tokens per epoch and, with --tokens, "
        "the tokens drawn and epochs for that budget; then warnings (a source past max_epochs, a heavily "
        "upsampled source, many repeats). Exit 1 when the budget exceeds some source's max_epochs.",
    )
    inspect.add_argument("mixture", metavar="MIXTURE.yaml", help="mixture file")
    inspect.add_argument("--tokens", type=count_in(1, 10**15), help="training token budget (e.g. 20M, 1.5B)")
    inspect.add_argument(
        "--seq-len", type=int_in(1, 1 << 20), default=1024, help="training sequence length (default 1024)"
    )
    inspect.add_argument("--no-verify", action="store_true", help="skip the sha256 check of every shard")
    inspect.set_defaults(func=run_inspect)
    return mix_sub


def run_inspect(args: argparse.Namespace) -> int:
    mix = load_mixture(args.mixture, verify=not args.no_verify, progress=not args.no_verify)
    report = inspect_mixture(mix, args.tokens, args.seq_len)
    print(format_report(mix, report))
    return 1 if report.would_stop else 0
