"""The Llama-style decoder: one config dataclass, then the blocks top-down; nothing about distribution.

    cfg = ModelConfig(vocab_size=8192, d_model=256, n_layers=4, n_heads=8, n_kv_heads=2, max_seq_len=256)
    model = Transformer(cfg, seed=0)
    logits = model(tokens)                     # tokens int64 [batch, seq] -> float [batch, seq, vocab]
    logits = model(next_tokens, cache=cache)   # with a KVCache (train/model/generate.py): new positions only
    logits = model(tokens, documents=doc_ids)  # packed documents: block-causal (train/model/attention_mask.py)
    cfg.num_params(), cfg.flops_per_token(256)

RMSNorm (pre-norm), rotary position embeddings, SwiGLU feed-forward, grouped-query attention at any
ratio (`n_kv_heads` divides `n_heads`) through `scaled_dot_product_attention`, tied or untied output
embedding. What Llama 2/3/3.1/3.2, Mistral and Qwen2 need is a setting: `norm_eps`, `rope_theta`,
`rope_scaling` of type llama3, q/k/v biases (`qkv_bias`, Qwen2), an explicit `head_dim`, an exact
`ffn_hidden`. The feed-forward hidden size follows Llama otherwise: `8/3 * d_model` rounded up to a
multiple of `ffn_multiple_of`.

RoPE rotates interleaved pairs (x[2i], x[2i+1]); Hugging Face checkpoints rotate halves, which is the
same model once q/k rows are permuted (train/model/hf_adapter.py). Initial values depend only on
(seed, parameter name) (`initial_value`), so a model built on the meta device and initialized shard
by shard (train/model/materialize.py) equals one built here, whatever the world size.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from pretrainkit.train.model.attention_mask import AttentionMask, attend, attention_mask, document_rope

FAMILIES = ("llama", "mistral", "qwen2")  # the Hugging Face model_type this model is exported as
ROPE_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")


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
    head_dim: int | None = None  # None: d_model // n_heads (resolved at construction)
    qkv_bias: bool = False  # biases on the q, k and v projections (Qwen2)
    rope_scaling: dict | None = (
        None  # {"rope_type": "llama3", factor, low/high_freq_factor, original_max_position_embeddings}
    )
    family: str = "llama"

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "max_seq_len", "ffn_multiple_of"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads}), or head_dim given"
                )
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        if self.head_dim < 2 or self.head_dim % 2:
            raise ValueError(f"head_dim ({self.head_dim}) must be even for rotary embeddings")
        if self.kv_heads < 1 or self.n_heads % self.kv_heads:
            raise ValueError(f"n_heads ({self.n_heads}) must be a multiple of n_kv_heads ({self.n_kv_heads})")
        if self.ffn_hidden is not None and self.ffn_hidden < 1:
            raise ValueError(f"ffn_hidden must be >= 1, got {self.ffn_hidden}")
        if self.family not in FAMILIES:
            raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {self.family!r}")
        if self.qkv_bias != (self.family == "qwen2"):
            raise ValueError(
                f"qkv_bias {self.qkv_bias} does not fit family {self.family} (only qwen2 has q/k/v biases)"
            )
        if self.rope_scaling is not None:
            scaling = self.rope_scaling
            if scaling.get("rope_type") != "llama3" or sorted(k for k in scaling if k != "rope_type") != sorted(
                ROPE_SCALING_KEYS
            ):
                raise ValueError(
                    f"rope_scaling must be {{rope_type: llama3, {', '.join(ROPE_SCALING_KEYS)}}}, got {scaling}"
                )

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
        d, q, kv = self.d_model, self.n_heads * self.head_dim, self.kv_heads * self.head_dim
        attention = d * q * 2 + d * kv * 2 + ((q + 2 * kv) if self.qkv_bias else 0)  # wq, wo, wk, wv (+ biases)
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
        return 6.0 * self.num_params(embeddings=False) + 12.0 * self.n_layers * self.n_heads * self.head_dim * t


INIT_BLOCK_ROWS = 256  # rows drawn from one generator: a shard draws only the blocks it overlaps


def initial_value(cfg: ModelConfig, name: str, shape: torch.Size, seed: int, rows: slice | None = None) -> torch.Tensor:
    """Rows `rows` (default: all) of the initial value of parameter `name` (see `fill_initial`)."""
    rows = slice(0, shape[0]) if rows is None else rows
    out = torch.empty(rows.stop - rows.start, *shape[1:])
    fill_initial(cfg, name, shape, seed, rows, out)
    return out


@torch.no_grad()
def fill_initial(cfg: ModelConfig, name: str, shape: torch.Size, seed: int, rows: slice, out: torch.Tensor) -> None:
    """Write rows `rows` of parameter `name`'s initial value into `out` (contiguous, those rows): a
    pure function of (seed, name, shape), however the rows are split between processes.

    GPT-2 initialisation: N(0, init_std), output projections scaled by 1/sqrt(2 n_layers), norms at
    1, biases at 0. Every block of INIT_BLOCK_ROWS rows has its own generator, so a process holding
    some rows draws only the blocks it overlaps, straight into place, and gets the same numbers.
    """
    if name.endswith(".bias"):
        out.zero_()
        return
    if len(shape) == 1:
        out.fill_(1.0)
        return
    std = cfg.init_std / math.sqrt(2 * cfg.n_layers) if name.endswith(("wo.weight", "w2.weight")) else cfg.init_std
    for b in range(rows.start // INIT_BLOCK_ROWS, -(-rows.stop // INIT_BLOCK_ROWS)):
        lo, hi = b * INIT_BLOCK_ROWS, min((b + 1) * INIT_BLOCK_ROWS, shape[0])
        a, z = max(lo, rows.start), min(hi, rows.stop)
        digest = hashlib.sha256(f"{seed}:{name}:{b}".encode()).digest()
        gen = torch.Generator().manual_seed(int.from_bytes(digest[:8], "little") >> 1)
        dest = out[a - rows.start : z - rows.start]
        if (a, z) == (lo, hi):
            dest.normal_(0.0, std, generator=gen)
        else:  # a block this process holds only part of: draw it whole, keep the part
            dest.copy_(torch.empty(hi - lo, *shape[1:]).normal_(0.0, std, generator=gen)[a - lo : z - lo])


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


def rope_frequencies(head_dim: int, theta: float, scaling: dict | None = None) -> torch.Tensor:
    """Per-pair rotation frequencies [head_dim/2] (float64), with Llama 3.1's long-context rescaling.

    llama3 scaling (Meta's reference code): wavelengths longer than the original context / low_freq_factor
    are slowed by `factor`, shorter than original / high_freq_factor kept, and those between interpolated.
    """
    # On the CPU explicitly: a model built under `torch.device("meta")` still needs real frequencies.
    freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64, device="cpu") / head_dim))
    if scaling is None:
        return freq
    factor, low, high = scaling["factor"], scaling["low_freq_factor"], scaling["high_freq_factor"]
    original = scaling["original_max_position_embeddings"]
    wavelen = 2 * math.pi / freq
    smooth = ((original / wavelen - low) / (high - low)).clamp(0.0, 1.0)
    scaled = (1 - smooth) * freq / factor + smooth * freq
    return torch.where(wavelen > original / low, freq / factor, torch.where(wavelen < original / high, freq, scaled))


def rope_tables(
    freq: torch.Tensor, start: int, seq_len: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin tables [seq_len, head_dim/2] for positions start .. start+seq_len-1."""
    angles = torch.outer(torch.arange(start, start + seq_len, dtype=torch.float64, device="cpu"), freq)
    return angles.cos().float().to(device), angles.sin().float().to(device)


def document_attention(
    freq: torch.Tensor, start: int, seq_len: int, device: torch.device, documents: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor, AttentionMask | None]:
    """RoPE cos and sin and the attention mask for positions start.. (with `documents`: block-causal, positions
    restarting per document); what a whole model and a pipeline stage compute before their blocks."""
    cos, sin = rope_tables(freq, start, seq_len, device)
    if documents is None:
        return cos, sin, None
    cos, sin = document_rope(cos, sin, documents.to(device))
    return cos, sin, attention_mask(seq_len, device, documents.to(device))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x [batch, heads, seq, head_dim] by the position angle."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.type_as(x)


class LayerCache(Protocol):
    """Keys and values of the positions seen so far, for one layer (train/model/generate.py: KVCache)."""

    length: int  # positions cached before this call

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.n_heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: LayerCache | None = None,
        mask: AttentionMask | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.wq(x).view(b, t, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.update(k, v)
        gqa = self.kv_heads != self.n_heads
        if past == 0:  # causal over these positions, within `mask` (documents, a window) if any
            y = attend(q, k, v, mask, gqa)
        else:
            seen = None
            if t > 1:  # new positions see every cached one and the new ones before them
                seen = torch.arange(past + t, device=x.device) <= torch.arange(past, past + t, device=x.device)[:, None]
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, enable_gqa=gqa)
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

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: LayerCache | None = None,
        mask: AttentionMask | None = None,
    ) -> torch.Tensor:
        # mask by keyword: the tensor-parallel plan lays out attention's positional inputs only
        x = x + self.attention(self.attention_norm(x), cos, sin, cache, mask=mask)
        return x + self.feed_forward(self.ffn_norm(x))


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        # A plain tensor, not a buffer: derived from the config, never in a checkpoint, never on the meta device.
        self.rope_freq = rope_frequencies(cfg.head_dim, cfg.rope_theta, cfg.rope_scaling)
        self.reset_parameters(seed)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Every parameter to `initial_value` (nothing to do on the meta device: materialize.py does it there)."""
        for name, p in self.named_parameters():
            if not p.is_meta:
                p.copy_(initial_value(self.cfg, name, p.shape, seed))

    def forward(
        self, tokens: torch.Tensor, cache: list[LayerCache] | None = None, documents: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Logits; with `documents` (int [batch, seq], equal within a packed document) each document
        attends to itself only and its RoPE positions restart at 0 (train/model/attention_mask.py)."""
        start = 0 if cache is None else cache[0].length
        t = tokens.shape[1]
        if start + t > self.cfg.max_seq_len:
            raise ValueError(f"sequence length {start + t} exceeds max_seq_len {self.cfg.max_seq_len}")
        if documents is not None and cache is not None:
            raise ValueError("documents are for training and scoring, not with a KV cache")
        cos, sin, mask = document_attention(self.rope_freq, start, t, tokens.device, documents)
        h = self.tok_embeddings(tokens)
        for i, layer in enumerate(self.layers):
            h = layer(h, cos, sin, None if cache is None else cache[i], mask=mask)
        return self.output(self.norm(h))
