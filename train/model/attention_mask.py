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
  train there. The tiles have static shapes, so `torch.compile` handles them without graph breaks.
- CUDA: FlexAttention with a `BlockMask` (torchtitan's choice: blocks with no allowed key are
  skipped, memory O(t^2 / 128^2)), `flex_attention` compiled once per process. Prepared, not yet
  run on a GPU.
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import BlockMask, create_block_mask, flex_attention

QUERY_TILE = 256  # measured: 128 and 512 were 4% slower at 2048

AttentionMask = torch.Tensor | BlockMask  # dense bool [batch or 1, 1, t, t] (CPU) or a BlockMask (CUDA)


def attention_mask(
    seq_len: int, device: torch.device, documents: torch.Tensor | None = None, window: int | None = None
) -> AttentionMask | None:
    """The mask for `seq_len` positions starting at 0; None for plain causal attention."""
    if documents is None and window is None:
        return None
    if window is not None and window < 1:
        raise ValueError(f"window must be >= 1, got {window}")
    if device.type == "cuda":
        return _block_mask(seq_len, device, documents, window)
    i = torch.arange(seq_len, device=device)
    allowed = i[None, :] <= i[:, None]
    if window is not None:
        allowed = allowed & (i[:, None] - i[None, :] < window)
    if documents is not None:
        allowed = allowed & (documents[:, :, None] == documents[:, None, :])
    else:
        allowed = allowed[None]
    return allowed[:, None]


def _block_mask(seq_len: int, device: torch.device, documents: torch.Tensor | None, window: int | None) -> BlockMask:
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
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttentionMask | None, enable_gqa: bool
) -> torch.Tensor:
    """Attention of q [b, h, t, d] over k, v [b, kv, t, d] (the same t) under `mask` (see `attention_mask`)."""
    if mask is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=enable_gqa)
    if isinstance(mask, BlockMask):
        return _compiled_flex_attention()(q, k, v, block_mask=mask, enable_gqa=enable_gqa)
    t = q.shape[2]
    tiles = [
        F.scaled_dot_product_attention(
            q[:, :, lo : lo + QUERY_TILE],
            k[:, :, : lo + QUERY_TILE],
            v[:, :, : lo + QUERY_TILE],
            attn_mask=mask[:, :, lo : lo + QUERY_TILE, : lo + QUERY_TILE],
            enable_gqa=enable_gqa,
        )
        for lo in range(0, t, QUERY_TILE)
    ]
    return tiles[0] if len(tiles) == 1 else torch.cat(tiles, dim=2)


def document_rope(cos: torch.Tensor, sin: torch.Tensor, documents: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE tables [t, d/2] for positions 0..t-1 turned into [b, 1, t, d/2] ones whose positions restart
    at 0 where each document starts, so a document packed after others is rotated as if it ran alone."""
    t = documents.shape[1]
    i = torch.arange(t, device=documents.device).expand_as(documents)
    starts = torch.ones_like(documents, dtype=torch.bool)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    # The position of the latest document start at or before each token.
    first = torch.where(starts, i, torch.zeros_like(i)).cummax(dim=1).values
    positions = i - first
    return cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
