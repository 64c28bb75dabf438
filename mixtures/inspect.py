"""What a mixture will do for a token budget: per-source shares, tokens, epochs, and warnings.

    report = inspect_mixture(mix, tokens=10_000_000, seq_len=1024)
    print(format_report(mix, report))
    report.over_limit      # sources that would exceed max_epochs (training would stop)

Counts are exact, not estimates: the number of sequences each source gives to the first
ceil(tokens / seq_len) sequences of the global order comes from the same `InterleaveSchedule` the
sampler uses. Tokens drawn count every stream token a sequence takes (seq_len + 1 each).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from pretrainkit.mixtures.mixture import Mixture, Source
from pretrainkit.mixtures.schedule import InterleaveSchedule
from pretrainkit.remote.transfer import exists
from pretrainkit.remote.urls import is_url

EPOCHS_WARNING = 4.0  # beyond about four epochs repeated data adds little (Muennighoff et al., 2023)
UPSAMPLING_WARNING = 10.0  # a share this many times a source's share of the tokens


@dataclass
class SourceReport:
    source: Source
    share: float  # of training sequences (exact schedule share); 0 for validation-only
    train_docs: int
    heldout_docs: int
    epoch_tokens: int  # tokens (with EOS) in one pass over the training documents
    heldout_tokens: int
    drawn_tokens: int | None = None  # for the budget
    epochs: float | None = None


@dataclass
class MixtureReport:
    tokens: int | None
    seq_len: int
    sequences: int | None
    rows: list[SourceReport]
    warnings: list[str] = field(default_factory=list)
    over_limit: list[str] = field(default_factory=list)
    missing_replays: list[str] = field(default_factory=list)  # training would stop: nothing to replay from

    @property
    def would_stop(self) -> bool:
        return bool(self.over_limit or self.missing_replays)


def inspect_mixture(mix: Mixture, tokens: int | None, seq_len: int) -> MixtureReport:
    train = mix.train_sources
    schedule = InterleaveSchedule.from_weights([s.weight for s in train])
    shares = dict(zip((s.name for s in train), schedule.shares))
    sequences = math.ceil(tokens / seq_len) if tokens is not None else None
    drawn = dict(zip((s.name for s in train), schedule.counts(sequences) * (seq_len + 1))) if sequences else {}
    report = MixtureReport(tokens, seq_len, sequences, [])
    total_tokens = sum(s.train_tokens for s in train)
    for s in mix.sources:
        row = SourceReport(
            s,
            shares.get(s.name, 0.0),
            s.split.train.num_docs,
            s.split.heldout.num_docs,
            s.train_tokens,
            s.heldout_tokens,
        )
        if s.name in drawn:
            row.drawn_tokens = int(drawn[s.name])
            row.epochs = (s.start.token + row.drawn_tokens) / row.epoch_tokens
        report.rows.append(row)
        _warn(report, row, total_tokens)
    return report


def _warn(report: MixtureReport, row: SourceReport, total_tokens: int) -> None:
    s = row.source
    if row.heldout_docs == 0:
        report.warnings.append(
            f"{s.name}: no held-out documents ({row.train_docs + row.heldout_docs} in all): no validation loss for it"
        )
    if s.eval_only:
        return
    if s.replay is not None and not run_exists(s.replay.from_path):
        report.missing_replays.append(s.name)
        report.warnings.append(
            f"{s.name}: sources[{s.index}].replay.from: {s.replay.from_path} does not exist: "
            "training would stop with an error"
        )
    elif s.replay is not None:
        report.warnings.append(
            f"{s.name}: replays {s.replay.from_path} ({s.replay.mode}); "
            "its start is resolved at train time, epochs shown from the stream's beginning"
        )
    natural = row.epoch_tokens / total_tokens
    if row.share / natural >= UPSAMPLING_WARNING:
        report.warnings.append(
            f"{s.name}: share {row.share:.1%} but only {natural:.1%} of the training tokens: "
            f"upsampled {row.share / natural:.0f}x"
        )
    if row.epochs is None:
        return
    if s.max_epochs is not None and row.epochs > s.max_epochs:
        report.over_limit.append(s.name)
        report.warnings.append(
            f"{s.name}: needs {row.epochs:.2f} epochs for this budget, over max_epochs={s.max_epochs:g}: "
            "training would stop with an error"
        )
    elif s.max_epochs is None and row.epochs > EPOCHS_WARNING:
        report.warnings.append(
            f"{s.name}: repeated {row.epochs:.1f} times; "
            f"beyond ~{EPOCHS_WARNING:g} epochs repeated data adds little (set max_epochs to cap it)"
        )


def format_report(mix: Mixture, report: MixtureReport) -> str:
    lines = [
        f"mixture      {mix.path}",
        (
            f"seed {mix.seed}, tokenizer {mix.tokenizer.sha256[:12]} "
            f"(vocab {mix.tokenizer.vocab_size}, EOS {mix.tokenizer.eos_id}), fingerprint {mix.fingerprint[:12]}"
        ),
    ]
    if report.tokens is not None:
        lines.append(
            f"budget       {report.tokens:,} tokens = {report.sequences:,} sequences of {report.seq_len} (+1) tokens"
        )
    head = (
        f"{'source':<16} {'weight':>7} {'share':>8} {'docs':>8} {'train tokens':>13} {'held-out':>8} {'val tokens':>11}"
    )
    if report.tokens is not None:
        head += f" {'drawn':>13} {'epochs':>7}"
    lines += ["", head + f" {'max_epochs':>10}"]
    for r in report.rows:
        s = r.source
        share, train = ("-", "-") if s.eval_only else (f"{r.share:.2%}", f"{r.epoch_tokens:,}")
        line = (
            f"{s.name:<16} {s.weight:>7g} {share:>8} {r.train_docs + r.heldout_docs:>8,} {train:>13} "
            f"{r.heldout_docs:>8,} {r.heldout_tokens:>11,}"
        )
        if report.tokens is not None:
            line += f" {r.drawn_tokens:>13,} {r.epochs:>7.2f}" if r.drawn_tokens is not None else f" {'-':>13} {'-':>7}"
        line += f" {'-' if s.max_epochs is None else format(s.max_epochs, 'g'):>10}"
        lines.append(line + ("  (validation only)" if s.eval_only else ""))
    lines += ["", "warnings:" if report.warnings else "warnings: none"]
    lines += [f"  {w}" for w in report.warnings]
    return "\n".join(lines)


def run_exists(path: Path | str) -> bool:
    """A replayed run (or checkpoint) is there: a local folder, or objects under a URL."""
    return exists(path) if is_url(path) else Path(path).exists()
