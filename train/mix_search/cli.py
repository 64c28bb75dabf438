"""`ptk mix` with `ptk mix search`: mixture weights fitted from short proxy runs (RegMix-style).

    ptk mix search mixture.yaml --config train.yaml --target shards/target --runs 16 -o search/
    ptk train train.yaml --set data.mixture=search/best.yaml

The console registers `ptk mix` here: `mix inspect` is the mixtures layer's (`mixtures/cli.py`),
`mix search` trains, which that layer may not import. Heavy imports (torch, scikit-learn) wait for
the command to run. Stopped by SIGTERM or a kill, the same command resumes: finished proxy runs are
read back, an interrupted one resumes from its newest checkpoint.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from pretrainkit.arguments import int_in
from pretrainkit.dataprep.executors import EXECUTORS
from pretrainkit.mixtures.cli import register as register_mix
from pretrainkit.remote.staging import UrlArguments
from pretrainkit.train.mix_search.regression import MIN_RUNS


def register(sub: argparse._SubParsersAction) -> None:
    mix_sub = register_mix(sub)
    p = mix_sub.add_parser(
        "search",
        help="fit mixture weights to a target from short proxy runs (RegMix-style); writes best.yaml",
        description="Train N short proxy runs of the training config's model and budget on mixtures whose "
        "weights are drawn around the given ones (Dirichlet; the first is the given weights), score each "
        "on the target shard set, fit a regression from weights to target loss, and write the weights it "
        "predicts best as OUT/best.yaml, with OUT/runs.jsonl and OUT/search.png. A search, not a guarantee.",
    )
    p.add_argument("mixture", metavar="MIXTURE.yaml", help="the mixture whose weights are searched around")
    p.add_argument("--config", required=True, metavar="TRAIN.yaml", help="training config: model and budget")
    p.add_argument(
        "--target", required=True, metavar="SHARDS", help="shard set (a folder or a URL) whose loss is minimized"
    )
    p.add_argument("--runs", type=int_in(MIN_RUNS, 100_000), default=16, help="proxy runs (default %(default)s)")
    p.add_argument("--seed", type=int_in(0, 2**63 - 1), default=0, help="seed of the weights drawn (default 0)")
    p.add_argument(
        "--parallel", type=int_in(1, 4096), default=1, help="proxy runs at a time (default 1: one after another)"
    )
    p.add_argument(
        "--executor",
        choices=EXECUTORS,
        default="local",
        help="local: processes on this machine (default); ray: one Ray task per proxy run",
    )
    p.add_argument(
        "--ray-address",
        default=None,
        metavar="ADDR",
        help="Ray cluster to run on (default: $RAY_ADDRESS, else a local Ray instance for the search)",
    )
    p.add_argument("-o", "--output", required=True, type=Path, metavar="OUT", help="output folder")
    # A target in a bucket is fetched whole first, as `ptk eval --shards` fetches its shard sets.
    p.set_defaults(
        func=run_search_command, resumes=True, local_outputs=("output",), url_arguments=UrlArguments(files=("target",))
    )


def run_search_command(args: argparse.Namespace) -> int:
    from pretrainkit.train.mix_search.search import SearchOptions, format_summary, run_search

    opts = SearchOptions(
        mixture=args.mixture,
        config=args.config,
        target=args.target,
        runs=args.runs,
        seed=args.seed,
        parallel=args.parallel,
        executor=args.executor,
        ray_address=args.ray_address,
        out=args.output,
    )
    result = run_search(opts)
    print(format_summary(opts, result))
    sys.stdout.flush()
    return 0
