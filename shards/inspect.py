"""A human-readable report on a shard set: counts, document-length histogram, a few documents.

print("\n".join(inspect_lines(ShardSet.open("shards/"), decode=tokenizer.decode, samples=3)))
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pretrainkit.errors import quoted
from pretrainkit.shards.reader import ShardSet

BAR_WIDTH = 40


def inspect_lines(
    ss: ShardSet, decode: Callable[[list[int]], str] | None = None, samples: int = 3, chars: int = 200
) -> list[str]:
    m, t = ss.manifest, ss.manifest["totals"]
    tok = m["tokenizer"]
    lines = [
        f"{ss.path}: {m['format']} v{m['version']}, {t['shards']} shards, {t['docs']} documents, {t['tokens']} tokens, "
        f"{t['bytes']} bytes ({t['bytes'] / max(t['tokens'], 1):.2f} bytes/token), dtype {m['dtype']}",
        (
            f"tokenizer: sha256 {tok['sha256'][:16]}, vocab {tok['vocab_size']}, "
            f"EOS {tok['eos_id']} ({tok.get('eos_token', '?')!r})"
        ),
        f"fingerprint: {ss.fingerprint}",
    ]
    records = m.get("provenance", {}).get("records")
    if records:
        lines.append(
            f"records: {records['input']} input, {records['tokenized']} tokenized, {records['rejected']} rejected"
        )
    lengths = ss.doc_lengths()
    if len(lengths) == 0:
        return lines + ["no documents"]
    lines.append(
        f"document length (tokens): min {lengths.min()}, median {int(np.median(lengths))}, "
        f"mean {lengths.mean():.1f}, max {lengths.max()}"
    )
    lines += length_histogram(lengths)
    picks = (
        np.unique(np.linspace(0, len(lengths) - 1, num=min(samples, len(lengths))).astype(int)) if samples > 0 else []
    )
    if len(picks):
        lines.append("sample documents:")
    for i in picks:
        tokens = ss.document(int(i))
        shown = repr(decode(tokens.tolist())[:chars]) if decode else " ".join(map(str, tokens[:24].tolist()))
        lines.append(f"  [{i}] id {quoted(ss.document_id(int(i)))}, {len(tokens)} tokens: {shown}")
    return lines


def length_histogram(lengths: np.ndarray) -> list[str]:
    """One line per power-of-two bucket [2^k, 2^(k+1)) that holds documents, with a bar."""
    buckets = np.floor(np.log2(np.maximum(lengths, 1))).astype(int)
    counts = np.bincount(buckets)
    top = counts.max()
    out = []
    for k, n in enumerate(counts):
        if n:
            out.append(f"  [{2**k:>8}, {2 ** (k + 1):>8})  {n:>9}  {'#' * max(1, round(BAR_WIDTH * n / top))}")
    return out
