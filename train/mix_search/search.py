"""A mixture search from start to summary: proposals, proxy runs, the fit, `best.yaml`, `runs.jsonl`, `search.png`.

    opts = SearchOptions(mixture="mix.yaml", config="train.yaml", target="shards/target", runs=16, seed=0,
                         parallel=1, executor="local", ray_address=None, out=Path("search"))
    result = run_search(opts)
    result.best, result.fit.mean_abs_error

OUT (held as a `ptk mix search` output, `pretrainkit.output_folders`) gets `runs/NNN/` (a normal
run directory each, with its proposal as `mixture.yaml`), then, once every run has its target loss,
`runs.jsonl`, `best.yaml` and `search.png`, each written atomically. Everything written is a function
of the inputs and the seed: a rerun after a kill trains only what is missing (the proxy runs resume
as training runs do) and writes the same bytes. A run directory whose `mixture.yaml` is not the one
this search would write belongs to another search (other inputs or seed): refused, not overwritten.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from pretrainkit.dataprep.executors import open_runner
from pretrainkit.errors import UserError
from pretrainkit.files import write_text_atomic
from pretrainkit.mixtures import Mixture, load_mixture
from pretrainkit.mixtures.config import MixtureConfig, config_document
from pretrainkit.output_folders import MIX_SEARCH, output_folder
from pretrainkit.shards import ShardSet
from pretrainkit.shards.verify import check_shards_whole
from pretrainkit.train.config import TrainConfig, load_config
from pretrainkit.train.evaluation.eval_sets import check_shards
from pretrainkit.train.mix_search.plot import draw_search
from pretrainkit.train.mix_search.proposals import EpochLimits, best_of, candidates, proposals, shares_of
from pretrainkit.train.mix_search.proxy import ProxyJob, proxy_run
from pretrainkit.train.mix_search.regression import Fit, fit_runs, require_scikit_learn

CANDIDATES = 10_000  # Dirichlet draws the fitted model ranks
TOP = 100  # of which the best predicted are averaged (RegMix's choice)
MIXTURE_FILE = "mixture.yaml"


@dataclass(frozen=True)
class SearchOptions:
    mixture: str
    config: str
    target: str
    runs: int
    seed: int
    parallel: int
    executor: str
    ray_address: str | None
    out: Path


@dataclass(frozen=True)
class SearchResult:
    names: list[str]  # the training sources, in the mixture's order
    shares: np.ndarray  # [runs, sources]
    losses: np.ndarray  # [runs]
    fit: Fit
    best: np.ndarray  # [sources]
    best_predicted: float
    given_predicted: float
    steps: int
    tokens_per_run: int


def run_search(opts: SearchOptions) -> SearchResult:
    require_scikit_learn()
    cfg = load_config(opts.config)
    # Verified here, so that a damaged shard is one line before OUT is touched (each run verifies again).
    mix = load_mixture(opts.mixture, verify=True, shard_cache=cfg.data.cache.shard_cache())
    names = [s.name for s in mix.train_sources]
    if len(names) < 2:
        raise UserError(f"{opts.mixture}: one training source: there are no weights to search")
    check_target(opts.target, mix)
    limits = EpochLimits.of(mix, cfg.data.seq_len, cfg.batch.global_size, cfg.max_steps)
    given = shares_of([s.weight for s in mix.train_sources])
    shares = proposals(given, opts.runs, opts.seed, limits)
    with output_folder(opts.out, MIX_SEARCH):
        jobs = [write_proposal(opts, cfg, mix, i, row) for i, row in enumerate(shares)]
        with open_runner(opts.executor, opts.parallel, opts.ray_address) as runner:
            runner.check_paths([opts.target, *(str(s.shard_set.path) for s in mix.sources)], opts.out / "runs")
            results = runner.run(proxy_run, jobs, "proxy runs", unit="run")
        losses = np.array([r["target_loss"] for r in results])
        fit = fit_runs(shares, losses)
        pool = candidates(given, CANDIDATES, opts.seed, limits)
        best = best_of(pool, fit.predict(pool), TOP)
        best_predicted, given_predicted = (float(p) for p in fit.predict(np.stack([best, shares[0]])))
        write_runs(opts.out / "runs.jsonl", names, shares, results, fit)
        best_doc = with_shares(mix.config, names, best)
        header = f"# ptk mix search: predicted target loss {best_predicted:.4f} ({opts.runs} proxy runs)\n"
        write_text_atomic(opts.out / "best.yaml", header + yaml.safe_dump(best_doc, sort_keys=False))
        draw_search(opts.out / "search.png", names, shares, losses, fit.loo, best, best_predicted)
    tokens = cfg.max_steps * cfg.batch.global_size * cfg.data.seq_len
    return SearchResult(names, shares, losses, fit, best, best_predicted, given_predicted, cfg.max_steps, tokens)


def check_target(target: str, mix: Mixture) -> None:
    """The target is a whole shard set of the mixture's tokenizer: said before any run trains."""
    where = f"--target {target}"
    if not Path(target).is_dir():
        raise UserError(f"{where}: not a shard set directory")
    ss = ShardSet.open(target)
    check_shards_whole(ss.path, ss.manifest, where)
    check_shards(ss, where, mix.tokenizer.vocab_size, mix.tokenizer.sha256)


def with_shares(config: MixtureConfig, names: list[str], shares: np.ndarray) -> dict:
    """The mixture's YAML document with its training sources' weights replaced by `shares`."""
    weight = dict(zip(names, (float(s) for s in shares)))
    sources = [s if s.eval_only else dataclasses.replace(s, weight=weight[s.name]) for s in config.sources]
    return config_document(dataclasses.replace(config, sources=sources))


def write_proposal(opts: SearchOptions, cfg: TrainConfig, mix: Mixture, index: int, shares: np.ndarray) -> ProxyJob:
    """Run `index`'s directory with its proposal's mixture in it, and its job."""
    run_dir = (opts.out / "runs" / f"{index:03d}").resolve()
    mixture = run_dir / MIXTURE_FILE
    text = yaml.safe_dump(with_shares(mix.config, [s.name for s in mix.train_sources], shares), sort_keys=False)
    if mixture.is_file() and mixture.read_text() != text:
        raise UserError(f"{mixture}: the proposal of another search (other inputs or --seed) is there; use another -o")
    run_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomic(mixture, text)
    run_cfg = dataclasses.replace(cfg, run_dir=str(run_dir), data=dataclasses.replace(cfg.data, mixture=str(mixture)))
    return ProxyJob(run_cfg, opts.config, opts.target, mix.tokenizer.sha256)


def write_runs(path: Path, names: list[str], shares: np.ndarray, results: list[dict], fit: Fit) -> None:
    rows = [
        {
            "run": f"{i:03d}",
            "weights": dict(zip(names, (float(s) for s in row))),
            "target_loss": result["target_loss"],
            "predicted_loo": float(f"{fit.loo[i]:.6g}"),
            "steps": result["steps"],
        }
        for i, (row, result) in enumerate(zip(shares, results))
    ]
    write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in rows))


def format_summary(opts: SearchOptions, result: SearchResult) -> str:
    names = result.names
    width = max(8, *(len(n) for n in names))
    head = "  ".join(["run ", *(n.rjust(width) for n in names), "target loss", "predicted (LOO)"])
    lines = [
        f"ptk mix search: {len(result.losses)} proxy runs of {result.steps:,} steps "
        f"({result.tokens_per_run:,} tokens each), scored on {opts.target}",
        head,
    ]
    for i, (row, loss, loo) in enumerate(zip(result.shares, result.losses, result.fit.loo)):
        cells = [f"{i:03d} ", *(f"{s:.3f}".rjust(width) for s in row), f"{loss:.4f}".rjust(11), f"{loo:.4f}".rjust(15)]
        lines.append("  ".join(cells))
    fit = result.fit
    lines += [
        f"held-out error (leave-one-out over {len(result.losses)} runs): mean absolute {fit.mean_abs_error:.4f} "
        f"nats, rank correlation {fit.rank_correlation:.2f}",
        f"best.yaml: {', '.join(f'{n} {s:.3f}' for n, s in zip(names, result.best))}; predicted target loss "
        f"{result.best_predicted:.4f} (the given weights: {result.given_predicted:.4f} predicted, "
        f"{result.losses[0]:.4f} measured)",
        f"wrote {opts.out / 'best.yaml'}, {opts.out / 'runs.jsonl'}, {opts.out / 'search.png'}",
        "a search, not a guarantee: train best.yaml and compare it on the target before relying on it",
    ]
    return "\n".join(lines)
