"""A loaded mixture: validated YAML plus its opened, verified shard sets and its fingerprint.

    mix = load_mixture("mixtures/examples/demo.yaml")
    mix.sources[0].name, mix.sources[0].share, mix.tokenizer.vocab_size, mix.tokenizer.eos_id, mix.fingerprint

Replay (where a source's stream starts) is data, not code: each `Source` carries a `StreamStart`
(the seed of its per-epoch shuffles and the stream token it starts at). `mix.with_replay(name,
base_loader_state)` returns the mixture with that source continuing exactly where the base run's
saved loader state left the source with the same shards (matched by shard-set fingerprint), or
with `mode="seen"` re-reading from where the base run started it; `mix.with_replays(reader)`
applies every `replay:` of the YAML; `mix.with_stream_start` sets one start directly, `mix.with_saved_starts(state,
field)` every one from a saved loader state (a resume, a trace). The start
is part of the fingerprint, and the loader state records it, so a continued run can itself be
continued.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.errors import UserError, quoted
from pretrainkit.mixtures.config import REPLAY_MODES, MixtureConfig, ReplayConfig, SourceConfig, read_mixture_config
from pretrainkit.mixtures.holdout import HeldoutSplit, split_heldout
from pretrainkit.mixtures.schedule import quotas_from_weights
from pretrainkit.shards import ShardSet
from pretrainkit.shards.manifest import TokenizerInfo, tokenizer_difference
from pretrainkit.shards.set_copies import ShardCache
from pretrainkit.shards.streamed import StreamedShardSet, open_shard_set
from pretrainkit.shards.verify import check_shards_whole

# The version of the loader state (`TrainLoader.state_dict()`): 2 since the windowed shuffle of
# `pretrainkit.mixtures.stream`, under which a saved stream position means other documents than under 1.
STATE_VERSION = 2


@dataclass(frozen=True)
class StreamStart:
    """Where a source's stream begins: its shuffle seed and a token position in that stream."""

    seed: int
    token: int = 0


@dataclass(frozen=True)
class Source:
    config: SourceConfig
    index: int  # position in the YAML's source list; the value of `source_ids`
    shard_set: ShardSet
    share: float  # normalized weight; 0 for a validation-only source
    split: HeldoutSplit  # which documents training samples from (`split.train`) and which validate
    start: StreamStart

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def weight(self) -> float:
        return self.config.weight

    @property
    def max_epochs(self) -> float | None:
        return self.config.max_epochs

    @property
    def replay(self) -> ReplayConfig | None:
        return self.config.replay

    @property
    def eval_only(self) -> bool:
        return self.config.eval_only

    @property
    def train_tokens(self) -> int:
        """Tokens (with EOS) in one epoch of this source's training documents."""
        return self.split.train.tokens

    @property
    def heldout_tokens(self) -> int:
        """Tokens (with EOS) of the held-out validation documents."""
        return self.split.heldout.tokens


@dataclass(frozen=True)
class Mixture:
    config: MixtureConfig
    sources: list[Source]
    allow_mixture_change: bool = False

    @property
    def path(self) -> Path:
        return self.config.path

    @property
    def seed(self) -> int:
        return self.config.seed

    @property
    def train_sources(self) -> list[Source]:
        return [s for s in self.sources if not s.eval_only]

    @property
    def tokenizer(self) -> TokenizerInfo:
        """The tokenizer every source shares (sources[0]'s manifest)."""
        return self.sources[0].shard_set.tokenizer

    @property
    def fingerprint(self) -> str:
        """sha256 of everything that decides the data order: seed, holdout, shares, shard content, starts."""
        quotas, period = quotas_from_weights([s.weight for s in self.train_sources])
        quota = iter(quotas)
        desc = {
            "seed": self.seed,
            "holdout": dataclasses.asdict(self.config.holdout),
            "period": period,
            "sources": [
                {
                    "name": s.name,
                    "shards": s.shard_set.fingerprint,
                    "quota": 0 if s.eval_only else next(quota),
                    "max_epochs": s.max_epochs,
                    "start": [s.start.seed, s.start.token],
                }
                for s in self.sources
            ],
        }
        return hashlib.sha256(json.dumps(desc, sort_keys=True).encode()).hexdigest()

    def source(self, name: str) -> Source:
        for s in self.sources:
            if s.name == name:
                return s
        raise UserError(
            f"{self.path}: no source named {quoted(name)} (sources: {', '.join(s.name for s in self.sources)})"
        )

    def with_stream_start(self, name: str, start: StreamStart) -> Mixture:
        """This mixture with source `name` starting at `start` (replay, or a rebased resume)."""
        target = self.source(name)
        if target.eval_only:
            raise UserError(f"{self.path}: source {quoted(name)} is validation-only; its stream is never trained on")
        sources = [dataclasses.replace(s, start=start) if s is target else s for s in self.sources]
        return dataclasses.replace(self, sources=sources)

    def with_replay(self, name: str, base_state: dict, mode: str = "continue") -> Mixture:
        """Start source `name` where the base run's loader state (`TrainLoader.state_dict()`) left the
        source with the same shard set: `continue` at its next unread sequence, `seen` at the
        first sequence the base run read from it."""
        if mode not in REPLAY_MODES:
            raise UserError(
                f"{self.path}: source {quoted(name)}: replay mode must be one of {', '.join(REPLAY_MODES)}, "
                f"got {quoted(mode)}"
            )
        source = self.source(name)
        if base_state.get("version") != STATE_VERSION:
            raise UserError(
                f"{self.path}: source {quoted(name)}: the base run's loader state is version "
                f"{quoted(base_state.get('version'))}, "
                f"this pretrainkit replays version {STATE_VERSION} (its data order differs)"
            )
        entry = matching_state_entry(base_state, source)
        if entry is None:
            raise UserError(
                f"{self.path}: source {quoted(name)}: the base run's loader state has no source with shard set "
                f"{source.shard_set.path} (fingerprint {source.shard_set.fingerprint[:12]})"
            )
        token = entry["next_token"] if mode == "continue" else entry["start_token"]
        return self.with_stream_start(name, StreamStart(entry["stream_seed"], token))

    def with_replays(self, loader_state_of: Callable[[Path], dict]) -> Mixture:
        """Apply every source's `replay:` from the YAML. `loader_state_of(path)` returns the saved
        `TrainLoader.state_dict()` of the run or checkpoint at `replay.from` (the trainer knows
        where checkpoints keep it); each replaying source then starts as `with_replay` says."""
        mix = self
        for s in self.sources:
            if s.replay is not None:
                mix = mix.with_replay(s.name, loader_state_of(s.replay.from_path), s.replay.mode)
        return mix

    def with_saved_starts(self, state: dict, field: str, require_all: bool = True) -> Mixture | None:
        """The mixture with each training source starting at the loader state's `field` position for it
        (`start_token`: where that order started it, `next_token`: where it left it); None (with
        `require_all`) when some source has no entry for its shard set."""
        mix = self
        for source in self.train_sources:
            entry = matching_state_entry(state, source)
            if entry is None:
                if require_all:
                    return None
                continue
            mix = mix.with_stream_start(source.name, StreamStart(entry["stream_seed"], entry[field]))
        return mix


def matching_state_entry(state: dict, source: Source) -> dict | None:
    """The per-source entry of a loader state for `source`: same shard set, preferring the same name."""
    entries = [e for e in state.get("sources", []) if e.get("shards_fingerprint") == source.shard_set.fingerprint]
    same_name = [e for e in entries if e.get("name") == source.name]
    return (same_name or entries or [None])[0]


def default_stream_seed(seed: int, name: str) -> int:
    """Each source's shuffle seed: a function of the mixture seed and the source's name only."""
    return int.from_bytes(hashlib.sha256(f"{seed}\0{name}".encode()).digest()[:8], "little") >> 1  # fits int64


def load_mixture(
    path: str | Path,
    allow_mixture_change: bool = False,
    verify: bool = True,
    progress: bool = False,
    shard_cache: ShardCache | None = None,
) -> Mixture:
    """Read, validate and open a mixture; every problem is a UserError naming the file and the key.

    `verify` checks every shard's sha256 against its manifest (reads all the data once; `progress`
    shows a bar per source). `allow_mixture_change` lets a loader resume from a state saved for
    a different mixture (see `pretrainkit.mixtures.loader`). `shard_cache`: where shard sets in a
    bucket and the derived arrays are kept, and its bound (None: `$PTK_CACHE_DIR`,
    `$PTK_SHARD_CACHE_BYTES`); the sources' shard sets carry it into the loader's workers.
    """
    cfg = read_mixture_config(path)
    total = sum(s.weight for s in cfg.sources)
    sources = []
    for i, sc in enumerate(cfg.sources):
        key = f"{cfg.path}: sources[{i}].shards"
        try:
            ss = open_shard_set(sc.shards, shard_cache)
        except UserError as e:
            raise UserError(f"{key}: {e}") from None
        if verify and not isinstance(ss, StreamedShardSet):  # a streamed set checks each batch as it arrives
            check_shards_whole(ss.path, ss.manifest, key, progress=progress)
        split = split_heldout(ss, cfg.holdout)
        if not sc.eval_only and split.train.num_docs == 0:
            raise UserError(f"{key}: shard set {sc.shards} holds no documents to train on")
        start = StreamStart(default_stream_seed(cfg.seed, sc.name))
        sources.append(Source(sc, i, ss, sc.weight / total, split, start))
    _check_same_tokenizer(cfg.path, sources)
    _check_distinct_shard_sets(cfg.path, sources)
    return Mixture(cfg, sources, allow_mixture_change)


def _check_distinct_shard_sets(path: Path, sources: list[Source]) -> None:
    """The same shard content under two training names would weight it twice and make replay
    ambiguous (a base run's loader state is matched to a source by shard-set fingerprint). A
    validation-only source may name a training source's shards: it reads the same held-out split."""
    first: dict[str, Source] = {}
    for s in sources:
        if s.eval_only:
            continue
        other = first.setdefault(s.shard_set.fingerprint, s)
        if other is not s:
            raise UserError(
                f"{path}: sources[{s.index}].shards: the same shard set as sources[{other.index}] ({other.name}) "
                f"(fingerprint {s.shard_set.fingerprint[:12]}); list a shard set once and give it the summed weight"
            )


def _check_same_tokenizer(path: Path, sources: list[Source]) -> None:
    first = sources[0]
    for s in sources[1:]:
        diff = tokenizer_difference(s.shard_set.tokenizer, first.shard_set.tokenizer)
        if diff is not None:
            raise UserError(
                f"{path}: sources[{s.index}].shards: tokenizer differs from sources[0] ({first.name}): "
                f"{s.shard_set.path} vs {first.shard_set.path}: {diff}; all sources must share one tokenizer"
            )
