"""The Llama-style decoder: one config dataclass, then the blocks top-down; nothing about distribution.

    cfg = ModelConfig(vocab_size=8192, d_model=256, n_layers=4, n_heads=8, n_kv_heads=2, max_seq_len=256)
    model = Transformer(cfg)
    logits = model(tokens)                     # tokens int64 [batch, seq] -> float [batch, seq, vocab]
    cfg.num_params(), cfg.flops_per_token(256)

RMSNorm (pre-norm), rotary position embeddings, SwiGLU feed-forward, optional grouped-query attention
(`n_kv_heads < n_heads`) through `scaled_dot_product_attention`, tied or untied output embedding.
There are no biases anywhere. The feed-forward hidden size follows Llama: `8/3 * d_model` rounded up to
a multiple of `ffn_multiple_of`, unless `ffn_hidden` is given.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    vocab_size: int
    d_model: int = 512
    n_layers: int = 8
    n_heads: int = 8
    n_kv_heads: int | None = None  # None: as many as n_heads (plain multi-head attention)
    max_seq_len: int = 1024
    ffn_hidden: int | None = None  # None: the Llama rule below
    ffn_multiple_of: int = 64
    tie_embeddings: bool = True
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    init_std: float = 0.02

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len", "ffn_multiple_of"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if self.head_dim % 2:
            raise ValueError(f"head size d_model/n_heads ({self.head_dim}) must be even for rotary embeddings")
        if self.kv_heads < 1 or self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.ffn_hidden is not None and self.ffn_hidden < 1:
            raise ValueError(f"ffn_hidden must be >= 1, got {self.ffn_hidden}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn_hidden_size(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        m = self.ffn_multiple_of
        return m * math.ceil(int(8 * self.d_model / 3) / m)

    def block_params(self) -> int:
        """Parameters of one transformer block (attention, feed-forward, two norms)."""
        d, kv = self.d_model, self.kv_heads * self.head_dim
        attention = d * d * 2 + d * kv * 2  # wq, wo, wk, wv
        return attention + 3 * d * self.ffn_hidden_size + 2 * d

    def num_params(self, embeddings: bool = True) -> int:
        """Parameter count; `embeddings=False` leaves out the input embedding table (not the output head)."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        body = self.n_layers * self.block_params() + self.d_model + head
        table = self.vocab_size * self.d_model
        if embeddings:
            return body + table
        # With tied weights the table is also the output head, which does matmul work.
        return body + (table if self.tie_embeddings else 0)

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token (forward + backward), PaLM appendix B: 6N + 12 L d T.

        N counts every parameter that does a matmul (so the output head, not the lookup table);
        the attention term counts the full T x T score matrix, as PaLM and nanoGPT do.
        """
        t = self.max_seq_len if seq_len is None else seq_len
        return 6.0 * self.num_params(embeddings=False) + 12.0 * self.n_layers * self.d_model * t


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32 so that bf16 activations do not lose the mean-square.
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return out.type_as(x) * self.weight


def rope_tables(head_dim: int, seq_len: int, theta: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [seq_len, head_dim/2] for rotary embeddings."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x [batch, heads, seq, head_dim] by the position angle."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.type_as(x)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=False)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=False)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv_heads != self.n_heads)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """SwiGLU: w2(silu(w1 x) * w3 x)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn_hidden_size, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.ffn_hidden_size, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden_size, cfg.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        cos, sin = rope_tables(cfg.head_dim, cfg.max_seq_len, cfg.rope_theta)
        # Not persistent: derived from the config, so never part of a checkpoint.
        self.register_buffer("rope_cos", cos, persistent=False)
        self.register_buffer("rope_sin", sin, persistent=False)
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """GPT-2 initialisation: N(0, std), output projections scaled by 1/sqrt(2 n_layers), norms at 1."""
        std = self.cfg.init_std
        for name, p in self.named_parameters():
            if p.ndim == 1:
                p.fill_(1.0)
            elif name.endswith(("wo.weight", "w2.weight")):
                p.normal_(0.0, std / math.sqrt(2 * self.cfg.n_layers))
            else:
                p.normal_(0.0, std)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        t = tokens.shape[1]
        if t > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {t} exceeds max_seq_len {self.cfg.max_seq_len}")
        cos, sin = self.rope_cos[:t], self.rope_sin[:t]
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, cos, sin)
        return self.output(self.norm(h))
