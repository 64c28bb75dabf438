"""The mixture YAML schema: parse and validate a mixture file into dataclasses (no shard I/O).

    cfg = read_mixture_config("mixtures/examples/demo.yaml")
    cfg.seed, [s.name for s in cfg.sources]

```yaml
seed: 1234                    # optional, default 0: seeds every source's per-epoch shuffle
holdout: {fraction: 0.01, min_tokens: 16384}   # optional: the held-out validation share
sources:
  - name: web
    shards: ../shards/web     # relative to this YAML file, or a URL: s3://bucket/tokens/web
    weight: 0.25              # > 0 and finite; weights are normalized
    replay: {from: ../runs/base, mode: continue}   # optional (continue | seen); a URL too
  - name: medical
    shards: ../shards/medical
    weight: 0.75
    max_epochs: 4             # optional: stop with an error instead of repeating more
  - name: held
    shards: ../shards/other
    eval_only: true           # or `weight: 0`: in the validation set only, never trained on
```

Every problem is a `UserError` naming the file and the key path (`sources[1].weight`).

The file itself may be a URL (`s3://bucket/mixes/web.yaml`): it is read afresh each time, and its
relative `shards:` are keys beside it in the bucket (`../tokens/web` is `s3://bucket/tokens/web`), as
a local file's are paths beside it; `config.path` is then the URL.

`config_document(cfg)` is the way back: the YAML document of a config (paths absolute), what
`ptk mix search` writes its proposals and its `best.yaml` as.
"""

from __future__ import annotations

import math
import posixpath
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pretrainkit.errors import UserError, quoted, shortened
from pretrainkit.quantities import config_number
from pretrainkit.remote.transfer import download
from pretrainkit.remote.urls import beside, is_url
from pretrainkit.user_yaml import read_user_yaml

REPLAY_MODES = ("continue", "seen")


@dataclass(frozen=True)
class ReplayConfig:
    """Start a source where a base run's saved loader state left it (issue 7 resolves `from_path`)."""

    from_path: Path | str  # resolved like a source's `shards`: a local path, or a URL (s3://...)
    mode: str = "continue"  # continue: the next unseen sequence; seen: re-read from the base run's start


@dataclass(frozen=True)
class HoldoutConfig:
    """Which documents of each shard set are held out for validation (never trained on).

    The split depends on the shard set alone (not on the seed or the mixture), so a source keeps the
    same held-out documents in every mixture that uses it, including a replaying continuation.
    """

    fraction: float = 0.01  # of the shard set's tokens
    min_tokens: int = 16384  # at least this many tokens, as long as half the documents are left to train


@dataclass(frozen=True)
class SourceConfig:
    name: str
    shards: Path | str  # resolved against the YAML file's directory; or a URL (s3://...) as it is
    weight: float  # 0 for a validation-only source
    max_epochs: float | None = None
    replay: ReplayConfig | None = None

    @property
    def eval_only(self) -> bool:
        return self.weight == 0


@dataclass(frozen=True)
class MixtureConfig:
    path: Path | str  # the file, or its URL
    seed: int
    sources: list[SourceConfig]
    holdout: HoldoutConfig = field(default_factory=HoldoutConfig)


_TOP_KEYS = {"seed", "sources", "holdout"}
_SOURCE_KEYS = {"name", "shards", "weight", "max_epochs", "replay", "eval_only"}
_REPLAY_KEYS = {"from", "mode"}
_HOLDOUT_KEYS = {"fraction", "min_tokens"}


class _Checker:
    """Builds error messages that name the file and the key path."""

    def __init__(self, path: Path | str):
        self.path = path

    def fail(self, key: str, problem: str) -> UserError:
        return UserError(f"{self.path}: {key}: {problem}")

    def mapping(self, value: Any, key: str, allowed: set[str]) -> dict:
        if not isinstance(value, dict):
            raise self.fail(key, f"expected a mapping, got {type(value).__name__}")
        for k in value:
            if k not in allowed:
                where = f"{key}.{shortened(str(k))}" if key != "(top level)" else shortened(str(k))
                raise self.fail(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")
        return value

    def number(self, value: Any, key: str, *, minimum: float, inclusive: bool) -> float:
        if (number := config_number(value)) is None:
            raise self.fail(key, f"expected a number, got {quoted(value)}")
        ok = math.isfinite(number) and (number >= minimum if inclusive else number > minimum)
        if not ok:
            raise self.fail(key, f"must be finite and {'>=' if inclusive else '>'} {minimum:g}, got {quoted(value)}")
        return number

    def integer(self, value: Any, key: str, *, minimum: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.fail(key, f"expected an integer >= {minimum}, got {quoted(value)}")
        return value

    def string(self, value: Any, key: str) -> str:
        if not isinstance(value, str) or not value.strip():
            raise self.fail(key, f"expected a non-empty string, got {quoted(value)}")
        return value


def read_mixture_config(path: str | Path) -> MixtureConfig:
    """Read and validate a mixture YAML (a file or a URL); local shard directories must exist (their
    content is checked later, a URL's when its shard set is fetched)."""
    if is_url(path):
        return parse_mixture_config(_read_url(str(path)), str(path))
    path = Path(path)
    return parse_mixture_config(read_user_yaml(path, "mixture file"), path)


def _read_url(url: str) -> Any:
    """The YAML document at `url`; errors name the URL. Fetched each time, not kept: a copy from an
    earlier run could be of an older edit of the file."""
    with tempfile.TemporaryDirectory(prefix="ptk-mixture-") as tmp:
        local = download(url, Path(tmp) / "mixture.yaml")
        try:
            return read_user_yaml(local, "mixture file")
        except UserError as e:
            raise UserError(str(e).replace(str(local), url)) from None


def parse_mixture_config(doc: Any, path: Path | str) -> MixtureConfig:
    c = _Checker(path)
    top = c.mapping(doc, "(top level)", _TOP_KEYS)
    seed = c.integer(top.get("seed", 0), "seed", minimum=0)
    holdout = _parse_holdout(c, top.get("holdout", {}))
    raw_sources = top.get("sources")
    if not isinstance(raw_sources, list) or not raw_sources:
        raise c.fail("sources", "expected a non-empty list of sources")
    base = posixpath.dirname(path) if is_url(path) else Path(path).parent
    sources = [_parse_source(c, raw, f"sources[{i}]", base) for i, raw in enumerate(raw_sources)]
    seen: dict[str, int] = {}
    for i, s in enumerate(sources):
        if s.name in seen:
            raise c.fail(f"sources[{i}].name", f"duplicate source name {quoted(s.name)} (also sources[{seen[s.name]}])")
        seen[s.name] = i
    if all(s.eval_only for s in sources):
        raise c.fail(
            "sources", "every source is validation-only (weight 0 / eval_only); at least one needs a weight > 0"
        )
    return MixtureConfig(path=path, seed=seed, sources=sources, holdout=holdout)


def config_document(cfg: MixtureConfig) -> dict:
    """The YAML document that `parse_mixture_config` reads back to `cfg`, its local paths absolute (and
    URLs as they are): the file means the same mixture wherever it is written."""
    sources = []
    for s in cfg.sources:
        entry: dict[str, Any] = {"name": s.name, "shards": _absolute(s.shards)}
        if s.eval_only:
            entry["eval_only"] = True
        else:
            entry["weight"] = s.weight
        if s.max_epochs is not None:
            entry["max_epochs"] = s.max_epochs
        if s.replay is not None:
            entry["replay"] = {"from": _absolute(s.replay.from_path), "mode": s.replay.mode}
        sources.append(entry)
    return {"seed": cfg.seed, "holdout": asdict(cfg.holdout), "sources": sources}


def _absolute(path: Path | str) -> str:
    return str(path) if is_url(path) else str(Path(path).resolve())


def _parse_holdout(c: _Checker, raw: Any) -> HoldoutConfig:
    m = c.mapping(raw, "holdout", _HOLDOUT_KEYS)
    default = HoldoutConfig()
    fraction = c.number(m.get("fraction", default.fraction), "holdout.fraction", minimum=0, inclusive=True)
    if fraction >= 0.5:
        raise c.fail("holdout.fraction", f"must be < 0.5, got {quoted(fraction)}")
    min_tokens = c.integer(m.get("min_tokens", default.min_tokens), "holdout.min_tokens", minimum=0)
    return HoldoutConfig(fraction=fraction, min_tokens=min_tokens)


def _parse_source(c: _Checker, raw: Any, key: str, base: Path | str) -> SourceConfig:
    m = c.mapping(raw, key, _SOURCE_KEYS)
    for required in ("name", "shards"):
        if required not in m:
            raise c.fail(f"{key}.{required}", "missing required key")
    name = c.string(m["name"], f"{key}.name")
    shards: Path | str = c.string(m["shards"], f"{key}.shards")
    if isinstance(base, str) and not is_url(shards) and not Path(shards).is_absolute():
        shards = _beside(c, base, shards, f"{key}.shards")
    if not is_url(shards):  # a URL's shard set is fetched when the mixture is loaded (mixtures/mixture.py)
        shards = Path(base) / shards
        if not shards.is_dir():
            raise c.fail(f"{key}.shards", f"shard directory {shards} does not exist")
    eval_only = m.get("eval_only", False)
    if not isinstance(eval_only, bool):
        raise c.fail(f"{key}.eval_only", f"expected true or false, got {quoted(eval_only)}")
    if eval_only:
        if m.get("weight", 0) != 0:
            raise c.fail(f"{key}.weight", "an eval_only source must have no weight (or weight 0)")
        weight = 0.0
    elif "weight" not in m:
        raise c.fail(
            f"{key}.weight", "missing required key (use weight: 0 or eval_only: true for a validation-only source)"
        )
    else:
        weight = c.number(m["weight"], f"{key}.weight", minimum=0, inclusive=True)
    max_epochs = None
    if m.get("max_epochs") is not None:
        max_epochs = c.number(m["max_epochs"], f"{key}.max_epochs", minimum=0, inclusive=False)
    replay = None
    if m.get("replay") is not None:
        replay = _parse_replay(c, m["replay"], f"{key}.replay", base)
        if weight == 0:
            raise c.fail(f"{key}.replay", "a validation-only source (weight 0) cannot replay")
    return SourceConfig(name=name, shards=shards, weight=weight, max_epochs=max_epochs, replay=replay)


def _beside(c: _Checker, folder: str, relative: str, key: str) -> str:
    """The URL of `relative` (`../tokens/web`) in the bucket folder `folder` (a mixture file's)."""
    try:
        return beside(folder, relative)
    except ValueError as e:
        raise c.fail(key, str(e)) from None


def _parse_replay(c: _Checker, raw: Any, key: str, base: Path | str) -> ReplayConfig:
    m = c.mapping(raw, key, _REPLAY_KEYS)
    if "from" not in m:
        raise c.fail(f"{key}.from", "missing required key (a base run directory or checkpoint)")
    given = c.string(m["from"], f"{key}.from")
    if is_url(given):
        from_path: Path | str = given.rstrip("/")
    elif isinstance(base, str):
        from_path = _beside(c, base, given, f"{key}.from")
    else:
        from_path = base / given
    mode = m.get("mode", "continue")
    if mode not in REPLAY_MODES:
        raise c.fail(f"{key}.mode", f"expected one of {', '.join(REPLAY_MODES)}, got {quoted(mode)}")
    return ReplayConfig(from_path=from_path, mode=mode)
