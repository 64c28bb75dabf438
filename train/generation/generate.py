"""Text continuation with a key/value cache: each new token costs one position of compute.

    ids = generate(model, prompt_ids, max_new_tokens=64)                        # greedy
    ids = generate(model, prompt_ids, 64, temperature=0.8, top_p=0.95, seed=1, eos_id=eos)

The prompt is run once (prefill) and its keys and values kept per layer (KVCache); then every step
feeds only the newest token. temperature 0 is greedy (argmax; the same tokens as transformers'
`generate(do_sample=False)`); otherwise sampling from softmax(logits / temperature), restricted to
the smallest set of tokens whose probability reaches `top_p`, with a generator seeded by `seed`.
Generation stops after `max_new_tokens` or at `eos_id` (which is returned last).
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import torch

from pretrainkit.train.model.llama import Transformer


class KVCache:
    """One layer's keys and values [batch, kv_heads, positions, head_dim], preallocated to `capacity`."""

    def __init__(
        self, batch: int, kv_heads: int, capacity: int, head_dim: int, dtype: torch.dtype, device: torch.device
    ) -> None:
        self.k = torch.empty(batch, kv_heads, capacity, head_dim, dtype=dtype, device=device)
        self.v = torch.empty_like(self.k)
        self.length = 0

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        end = self.length + k.shape[2]
        self.k[:, :, self.length : end] = k
        self.v[:, :, self.length : end] = v
        self.length = end
        return self.k[:, :, :end], self.v[:, :, :end]


def pick_token(logits: torch.Tensor, temperature: float, top_p: float, generator: torch.Generator) -> int:
    """The next token from one position's logits [vocab]."""
    if temperature == 0:
        return int(logits.argmax())
    probs = torch.softmax(logits.float() / temperature, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(descending=True)
        before = sorted_probs.cumsum(0) - sorted_probs  # probability mass ahead of each token
        sorted_probs[before >= top_p] = 0.0  # the first token is always kept
        probs = torch.zeros_like(probs).scatter_(0, order, sorted_probs)
    return int(torch.multinomial(probs.cpu(), 1, generator=generator))


def stream(
    model: Transformer,
    prompt: list[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    eos_id: int | None = None,
) -> Iterator[int]:
    """The new tokens one at a time (see the module docstring). The arguments are checked here, at
    the call (ValueError), not at the first token: a caller can refuse them before printing anything."""
    if not prompt:
        raise ValueError("the prompt must hold at least one token")
    if not (math.isfinite(temperature) and temperature >= 0 and 0 < top_p <= 1):  # nan fails every comparison
        raise ValueError(f"temperature must be >= 0 and top_p in (0, 1], got {temperature} and {top_p}")
    cfg = model.cfg
    capacity = len(prompt) + max_new_tokens
    if capacity > cfg.max_seq_len:
        raise ValueError(
            f"prompt ({len(prompt)} tokens) + max_new_tokens ({max_new_tokens}) exceeds the model's "
            f"context of {cfg.max_seq_len} positions"
        )
    return _tokens(model, prompt, max_new_tokens, temperature, top_p, seed, eos_id)


@torch.no_grad()
def _tokens(
    model: Transformer,
    prompt: list[int],
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int,
    eos_id: int | None,
) -> Iterator[int]:
    cfg = model.cfg
    capacity = len(prompt) + max_new_tokens
    model.eval()
    weight = model.tok_embeddings.weight
    cache = [KVCache(1, cfg.kv_heads, capacity, cfg.head_dim, weight.dtype, weight.device) for _ in range(cfg.n_layers)]
    generator = torch.Generator().manual_seed(seed)
    logits = model(torch.tensor([prompt], device=weight.device), cache=cache)[0, -1]
    for _ in range(max_new_tokens):
        token = pick_token(logits, temperature, top_p, generator)
        yield token
        if token == eos_id:
            return
        logits = model(torch.tensor([[token]], device=weight.device), cache=cache)[0, -1]


def generate(
    model: Transformer,
    prompt: list[int],
    max_new_tokens: int,
    temperature: float = 0.0,
    top_p: float = 1.0,
    seed: int = 0,
    eos_id: int | None = None,
) -> list[int]:
    """The new tokens (not the prompt), as a list."""
    return list(stream(model, prompt, max_new_tokens, temperature, top_p, seed, eos_id))
