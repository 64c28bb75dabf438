"""Compute-optimal sizing: the loss law L(N, D) = E + A/N^alpha + B/D^beta and training budgets.

    law = LAWS["besiroglu"]
    n, d = law.optimal_split(1e21)          # parameters and tokens for 1e21 FLOPs
    budget = resolve_budget(law, flops=1e21, params=None, tokens=None)
    budget.tokens_per_param, budget.loss, budget.optimal_loss

Training compute is C = 6 N D (forward + backward, Kaplan et al. 2020). Minimising the law under
that constraint gives N* = G (C/6)^(beta/(alpha+beta)) and D* = (C/6)^(alpha/(alpha+beta)) / G with
G = (alpha A / (beta B))^(1/(alpha+beta)) (Hoffmann et al. 2022, appendix D.2).
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

from pretrainkit.errors import UserError
from pretrainkit.files import read_json_object

FLOPS_PER_PARAM_TOKEN = 6.0


@dataclass(frozen=True)
class LossLaw:
    """L(N, D) = E + A / N^alpha + B / D^beta, N parameters and D training tokens."""

    E: float
    A: float
    B: float
    alpha: float
    beta: float
    name: str = "custom"
    # What the losses it predicts are losses of: the data and tokenizer of the runs it was fitted on,
    # and the range of N and D they covered (None: unknown).
    data: str = "the data and tokenizer of the runs it was fitted on"
    params_range: tuple[float, float] | None = None
    tokens_range: tuple[float, float] | None = None

    def __post_init__(self) -> None:
        for key in ("E", "A", "B", "alpha", "beta"):
            value = getattr(self, key)
            if not (math.isfinite(value) and value > 0):
                raise UserError(f"loss law '{self.name}': {key} must be a positive number, got {value!r}")

    def covers(self, params: float, tokens: float) -> bool:
        """Whether (params, tokens) lies inside the range of runs the law was fitted on (True if unknown)."""
        if self.params_range is None or self.tokens_range is None:
            return True
        (n_lo, n_hi), (d_lo, d_hi) = self.params_range, self.tokens_range
        return n_lo <= params <= n_hi and d_lo <= tokens <= d_hi

    def loss(self, params: float, tokens: float) -> float:
        return self.E + self.A / params**self.alpha + self.B / tokens**self.beta

    def _g(self) -> float:
        return (self.alpha * self.A / (self.beta * self.B)) ** (1.0 / (self.alpha + self.beta))

    def optimal_split(self, flops: float) -> tuple[float, float]:
        """The (params, tokens) minimising the loss for `flops` = 6 N D."""
        s = self.alpha + self.beta
        c6 = flops / FLOPS_PER_PARAM_TOKEN
        g = self._g()
        return g * c6 ** (self.beta / s), c6 ** (self.alpha / s) / g

    def optimal_tokens(self, params: float) -> float:
        """The token count for which a `params`-sized model is compute-optimal."""
        c6 = (params / self._g()) ** ((self.alpha + self.beta) / self.beta)
        return c6 / params

    def optimal_params(self, tokens: float) -> float:
        """The model size for which `tokens` training tokens are compute-optimal."""
        c6 = (tokens * self._g()) ** ((self.alpha + self.beta) / self.alpha)
        return c6 / tokens

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True) + "\n"


# Besiroglu et al. 2024, "Chinchilla Scaling: A replication attempt" (refit of Hoffmann's approach 3).
# Hoffmann et al. 2022, "Training Compute-Optimal Large Language Models", equation 10.
# Both fit Hoffmann et al.'s runs: 70M to 16B parameters on 5B to 500B tokens of MassiveText, in
# nats per token of their 32K SentencePiece tokenizer.
CHINCHILLA = {
    "data": "MassiveText with Chinchilla's 32K SentencePiece tokenizer",
    "params_range": (7e7, 1.6e10),
    "tokens_range": (5e9, 5e11),
}
LAWS: dict[str, LossLaw] = {
    "besiroglu": LossLaw(E=1.8172, A=482.01, B=2085.43, alpha=0.3478, beta=0.3658, name="besiroglu", **CHINCHILLA),
    "hoffmann": LossLaw(E=1.69, A=406.4, B=410.7, alpha=0.34, beta=0.28, name="hoffmann", **CHINCHILLA),
}


def load_law(spec: str) -> LossLaw:
    """A law by name (`besiroglu`, `hoffmann`) or from a JSON file written by `ptk scaling fit -o`."""
    if spec in LAWS:
        return LAWS[spec]
    path = Path(spec)
    if not path.is_file():
        raise UserError(f"--law {spec}: neither a known law ({', '.join(LAWS)}) nor a JSON file")
    data = read_json_object(path, "a loss-law JSON file (keys E, A, B, alpha, beta)")
    missing = [k for k in ("E", "A", "B", "alpha", "beta") if k not in data]
    if missing:
        raise UserError(f"{path}: missing key(s) {', '.join(missing)}")
    try:
        values = {k: float(data[k]) for k in ("E", "A", "B", "alpha", "beta")}
    except (TypeError, ValueError) as e:
        raise UserError(f"{path}: coefficients must be numbers ({e})") from None
    ranges = {}
    for key in ("params_range", "tokens_range"):
        if data.get(key) is not None:
            try:
                lo, hi = (float(v) for v in data[key])
            except (TypeError, ValueError) as e:
                raise UserError(f"{path}: {key} must be two numbers ({e})") from None
            ranges[key] = (lo, hi)
    extra = {"data": str(data["data"])} if data.get("data") else {}
    return LossLaw(**values, name=str(data.get("name", path.stem)), **extra, **ranges)


@dataclass(frozen=True)
class Budget:
    """A training run's size, what was given and what was derived, and where it sits on the law."""

    flops: float
    params: float
    tokens: float
    given: tuple[str, ...]
    law: LossLaw

    @property
    def tokens_per_param(self) -> float:
        return self.tokens / self.params

    @property
    def loss(self) -> float:
        return self.law.loss(self.params, self.tokens)

    @property
    def optimal(self) -> tuple[float, float]:
        return self.law.optimal_split(self.flops)

    @property
    def optimal_loss(self) -> float:
        return self.law.loss(*self.optimal)


# What `ptk plan` sizes: at least one parameter and one token, and at most ~1000x beyond the largest
# runs published (N ~ 1e12, D ~ 1e15, C ~ 1e26). Further out the numbers only describe float overflow.
LIMITS = {
    "flops": ("C", "FLOPs", FLOPS_PER_PARAM_TOKEN, 1e34),
    "params": ("N", "parameters", 1.0, 1e15),
    "tokens": ("D", "tokens", 1.0, 1e18),
}


def _limits_text(name: str) -> str:
    _, unit, lo, hi = LIMITS[name]
    return f"ptk plan sizes runs of {lo:g} to {hi:g} {unit}"


def _in_limits(name: str, value: float) -> bool:
    _, _, lo, hi = LIMITS[name]
    return math.isfinite(value) and lo <= value <= hi


def resolve_budget(
    law: LossLaw,
    flops: float | None,
    params: float | None,
    tokens: float | None,
    labels: dict[str, str] | None = None,
) -> Budget:
    """Fill in the third of (flops, params, tokens) from two via C = 6ND; from one, use the law's optimum.
    `labels` names where a given quantity came from in messages (default `--params 7.5e+09`)."""
    given = tuple(name for name, v in (("flops", flops), ("params", params), ("tokens", tokens)) if v is not None)
    values = {"flops": flops, "params": params, "tokens": tokens}
    label = {name: f"--{name} {values[name]:g}" for name in given} | (labels or {})
    for name in given:
        if not (math.isfinite(values[name]) and values[name] > 0):
            raise UserError(f"--{name} must be a positive number, got {values[name]!r}")
    if len(given) == 3:
        raise UserError("give at most two of --flops, --params/--config, --tokens (the third follows from C = 6ND)")
    if not given:
        raise UserError("give --flops, --params (or --config), or --tokens (any one or two of them)")
    for name in given:
        if not _in_limits(name, values[name]):
            raise UserError(f"{label[name]}: out of range; {_limits_text(name)}")
    k = FLOPS_PER_PARAM_TOKEN
    if given == ("flops",):
        params, tokens = law.optimal_split(flops)
    elif given == ("params",):
        tokens = law.optimal_tokens(params)
    elif given == ("tokens",):
        params = law.optimal_params(tokens)
    elif flops is None:
        flops = k * params * tokens
    elif params is None:
        params = flops / (k * tokens)
    else:
        tokens = flops / (k * params)
    if flops is None:
        flops = k * params * tokens
    for name, value in (("flops", flops), ("params", params), ("tokens", tokens)):
        if name not in given and not _in_limits(name, value):
            symbol, unit = LIMITS[name][:2]
            raise UserError(
                f"{' and '.join(label[g] for g in given)} give {symbol} = {value:.3g} {unit}; {_limits_text(name)}"
            )
    return Budget(flops=flops, params=params, tokens=tokens, given=given, law=law)


def training_seconds(flops: float, devices: int, peak_flops: float, mfu: float) -> float:
    """Wall time of `flops` on `devices` devices of `peak_flops` FLOP/s each, at model FLOPs utilisation `mfu`."""
    return flops / (devices * peak_flops * mfu)
