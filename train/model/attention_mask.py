"""Which keys each query may attend to: causal, block-causal over packed documents, optionally a sliding window.

    mask = attention_mask(seq_len, device, documents=doc_ids)        # doc_ids int64 [batch, seq]
    mask = attention_mask(seq_len, device, window=4096)              # causal within a sliding window
    y = attend(q, k, v, mask, enable_gqa=True)                        # q [b, h, t, d], k and v [b, kv, t, d]
    cos, sin = document_rope(cos, sin, doc_ids)                      # RoPE positions restart at each document

`attention_mask` returns None when neither documents nor a window restrict plain causal attention:
`attend` then calls `scaled_dot_product_attention(is_causal=True)`, the fastest kernel. Otherwise a
query at position i sees key j <= i of the same document (`documents[i] == documents[j]`) and, with
`window`, only i - j < window.

Two representations, chosen by device, measured on this project's 2-core CPU (attention alone,
forward and backward, 4 x 2048 tokens, 8 heads of 32, GQA 2:1; docs/training-and-layouts.md has the
whole-model figures from bench/train_step.py):
- CPU: a dense boolean [batch, 1, t, t] mask, and SDPA over query tiles of QUERY_TILE positions,
  each with only the keys up to its last query (the tile's causal part): 0.348 s against 0.286 s
  for `is_causal=True`, where SDPA with the whole mask at once costs 0.549 s (it computes every
  score above the diagonal too). FlexAttention has no backward on CPU in torch 2.13, so it cannot
  train there. In eager mode a tile also skips the keys before the earliest document start (or
  window start) of its queries (`TiledMask.key_starts`); compiled, the tiles keep static shapes
  (keys from 0), so `torch.compile` handles them without graph breaks or recompiles.
- CUDA: FlexAttention with a `BlockMask` (torchtitan's choice: blocks with no allowed key are
  skipped, memory O(t^2 / 128^2)), `flex_attention` compiled once per process. Prepared, not yet
  run on a GPU; its mask rule is checked on CPU through FlexAttention's eager forward.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

QUERY_TILE = 256  # measured: 128 and 512 were 4% slower at 2048


@dataclass(frozen=True)
class TiledMask:
    """The CPU form: which keys each query sees, and per query tile the first key any of its queries sees."""

    allowed: torch.Tensor  # bool [batch or 1, 1, t, t]
    key_starts: tuple[int, ...]  # per tile of QUERY_TILE queries; keys before it are masked for all of them


AttentionMask = TiledMask | BlockMask


def attention_mask(
    seq_len: int,
    device: torch.device,
    documents: torch.Tensor | None = None,
    window: int | None = None,
    dense: bool = False,
) -> AttentionMask | None:
    """The mask for `seq_len` positions starting at 0; None for plain causal attention. `dense`: the CPU
    form on any device (for attention written out, Gemma 2's soft-capped scores)."""
    if documents is None and window is None:
        return None
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if device.type == "cuda" and not dense:
        return block_mask(seq_len, device, documents, window)
    i = torch.arange(seq_len, device=device)
    allowed = i[None, :] <= i[:, None]
    tiles = range(0, seq_len, QUERY_TILE)
    starts = [0] * len(tiles)
    if window is not None:
        allowed = allowed & (i[:, None] - i[None, :] < window)
        starts = [max(0, lo - window + 1) for lo in tiles]
    if documents is not None:
        allowed = allowed & (documents[:, :, None] == documents[:, None, :])
        # A tile's first query starts the latest document of the tile's earliest one (starts never decrease).
        firsts = document_starts(documents)[:, list(tiles)].amin(dim=0).tolist()
        starts = [max(a, b) for a, b in zip(starts, firsts)]
    else:
        allowed = allowed[None]
    return TiledMask(allowed[:, None], tuple(starts))


def block_mask(seq_len: int, device: torch.device, documents: torch.Tensor | None, window: int | None) -> BlockMask:
    """The CUDA form: FlexAttention's BlockMask of the same rule (built on any device; a test checks it on CPU)."""

    def mask_mod(b, h, q, k):
        allowed = k <= q
        if window is not None:
            allowed = allowed & (q - k < window)
        if documents is not None:
            allowed = allowed & (documents[b, q] == documents[b, k])
        return allowed

    batch = None if documents is None else documents.shape[0]
    return create_block_mask(mask_mod, batch, None, seq_len, seq_len, device=device)


@functools.cache
def _compiled_flex_attention():
    # FlexAttention is only fast compiled; one compiled function per process, as torchtitan does.
    return torch.compile(flex_attention)


def attend(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: AttentionMask | None,
    enable_gqa: bool,
    scale: float | None = None,
) -> torch.Tensor:
    """Attention of q [b, h, t, d] over k, v [b, kv, t, d] (the same t) under `mask` (see `attention_mask`);
    scores scaled by `scale` (None: 1/sqrt(d))."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, enable_gqa=enable_gqa)
    if isinstance(mask, BlockMask):
        return _compiled_flex_attention()(q, k, v, block_mask=mask, scale=scale, enable_gqa=enable_gqa)
    # Compiled code takes every tile's keys from 0: data-dependent slices would recompile for each batch.
    starts = (0,) * len(mask.key_starts) if torch.compiler.is_compiling() else mask.key_starts
    tiles = [
        F.scaled_dot_product_attention(
            q[:, :, lo : lo + QUERY_TILE],
            k[:, :, first : lo + QUERY_TILE],
            v[:, :, first : lo + QUERY_TILE],
            attn_mask=mask.allowed[:, :, lo : lo + QUERY_TILE, first : lo + QUERY_TILE],
            scale=scale,
            enable_gqa=enable_gqa,
        )
        for lo, first in zip(range(0, q.shape[2], QUERY_TILE), starts)
    ]
    return tiles[0] if len(tiles) == 1 else torch.cat(tiles, dim=2)


def document_starts(documents: torch.Tensor) -> torch.Tensor:
    """int64 [b, t]: the position where the document of each token starts (documents [b, t], contiguous runs)."""
    i = torch.arange(documents.shape[1], device=documents.device).expand_as(documents)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    return torch.where(starts, i, torch.zeros_like(i)).cummax(dim=1).values


def document_rope(cos: torch.Tensor, sin: torch.Tensor, documents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables [t, d/2] for positions 0..t-1 turned into [b, 1, t, d/2] ones whose positions restart
    at 0 where each document starts, so a document packed after others is rotated as if it ran alone."""
    positions = torch.arange(documents.shape[1], device=documents.device) - document_starts(documents)
    return cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
