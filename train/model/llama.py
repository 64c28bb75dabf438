"""The Llama-style decoder: one config dataclass, then the blocks top-down; nothing about distribution.

    cfg = ModelConfig(vocab_size=8192, d_model=256, n_layers=4, n_heads=8, n_kv_heads=2, max_seq_len=256)
    model = Transformer(cfg, seed=0)
    logits = model(tokens)                     # tokens int64 [batch, seq] -> float [batch, seq, vocab]
    logits = model(next_tokens, cache=cache)   # with a KVCache (train/generation/generate.py): new positions only
    logits = model(tokens, documents=doc_ids)  # packed documents: block-causal (train/model/attention_mask.py)
    cfg.num_params(), cfg.flops_per_token(256)

RMSNorm, rotary position embeddings, a gated feed-forward, grouped-query attention at any ratio
(`n_kv_heads` divides `n_heads`) through `scaled_dot_product_attention`, tied or untied output
embedding. What Llama 2/3/3.1/3.2, Mistral, Qwen2, Qwen3, Gemma 2 and 3 and OLMo 2 need is a setting:
`norm_eps`, `rope_theta`, `rope_scaling` of type llama3, q/k/v biases (`qkv_bias`, Qwen2), an explicit
`head_dim`, an exact `ffn_hidden`, and per layer a sliding attention window (`layer_types`,
`sliding_window`; `rope_local_theta`: Gemma 3). The feed-forward hidden size follows Llama otherwise:
`8/3 * d_model` rounded up to a multiple of `ffn_multiple_of`. Qwen3-MoE, OLMoE and Mixtral replace
the feed-forward of their sparse layers by a mixture of experts (train/model/moe.py: `n_experts`,
`experts_per_token`, `moe_ffn_dim`, `norm_topk_prob`; Qwen3-MoE's dense layers by `mlp_only_layers`
and `decoder_sparse_step`).

What a family fixes is its `FamilySettings` (FAMILY_SETTINGS): where the norms sit (`pre`: before
attention and FFN, Llama; `post`: on their outputs, OLMo 2; `sandwich`: both, Gemma), q/k RMSNorm
(`head`: over each head's head_dim, before RoPE, Qwen3 and Gemma 3; `projection`: over the whole q or
k projection, OLMo 2), the norm weight's offset (Gemma's `x * (1 + w)`) and whether it multiplies
before the cast back from fp32, the activation (SwiGLU or Gemma's GeGLU with tanh-approximated
GELU) and the sqrt(d_model) embedding scale. `query_scale` (Gemma's query_pre_attn_scalar) sets the
softmax scale to query_scale**-0.5; `final_softcap` caps the logits at `cap * tanh(logits / cap)`,
`attn_softcap` the attention scores (Gemma 2: `capped_attention`, the one attention not run by SDPA).

RoPE rotates interleaved pairs (x[2i], x[2i+1]); Hugging Face checkpoints rotate halves, which is the
same model once q/k rows are permuted (train/model/hf_adapter.py). Initial values depend only on
(seed, parameter name) (`initial_value`), so a model built on the meta device and initialized shard
by shard (train/model/materialize.py) equals one built here, whatever the world size.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, replace
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from pretrainkit.train.model.attention_mask import AttentionMask, TiledMask, attend, attention_mask, document_rope
from pretrainkit.train.model.moe import MoEFeedForward

ROPE_SCALING_KEYS = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")
LAYER_TYPES = ("full_attention", "sliding_attention")  # Hugging Face's names, as in config.json's layer_types


@dataclass(frozen=True)
class FamilySettings:
    """What a family's decoder does differently; every family is these settings of the one decoder below."""

    norm_placement: str = "pre"  # pre | post | sandwich
    qk_norm: str | None = None  # None | head | projection
    norm_offset: float = 0.0  # the norm multiplies by (norm_offset + weight): Gemma stores w around 0
    norm_scale_in_fp32: bool = False  # weight applied before the cast back to the input dtype (OLMo 2, Gemma)
    activation: str = "silu"  # silu (SwiGLU) | gelu_tanh (GeGLU)
    embedding_scale: bool = False  # embeddings multiplied by sqrt(d_model) (Gemma)
    sliding_layers: bool = False  # per-layer sliding window attention may be configured (Gemma 2 and 3)
    local_rope: bool = False  # sliding layers may have their own RoPE base (Gemma 3)
    attention_softcap: bool = False  # attention scores may be soft-capped (Gemma 2)
    moe: bool = False  # sparse mixture-of-experts feed-forwards (`n_experts`; train/model/moe.py)


GEMMA2 = FamilySettings(
    norm_placement="sandwich",
    norm_offset=1.0,
    norm_scale_in_fp32=True,
    activation="gelu_tanh",
    embedding_scale=True,
    sliding_layers=True,
    attention_softcap=True,
)
FAMILY_SETTINGS = {
    "llama": FamilySettings(),
    "mistral": FamilySettings(),
    "qwen2": FamilySettings(),
    "qwen3": FamilySettings(qk_norm="head"),
    "olmo2": FamilySettings(norm_placement="post", qk_norm="projection", norm_scale_in_fp32=True),
    "gemma2": GEMMA2,
    # Gemma 3: Gemma 2 with per-head q/k norms and a RoPE base of its own for sliding layers, no attention cap.
    "gemma3": replace(GEMMA2, qk_norm="head", local_rope=True, attention_softcap=False),
    # Mixtures of experts, each with the attention of a dense family: Qwen3's (per-head q/k norms), OLMo 2's
    # q/k norms over the whole projection but Llama's norm placement (OLMoE), Mistral's.
    "qwen3_moe": FamilySettings(qk_norm="head", moe=True),
    "olmoe": FamilySettings(qk_norm="projection", moe=True),
    "mixtral": FamilySettings(moe=True),
}
FAMILIES = tuple(FAMILY_SETTINGS)  # exported as Hugging Face's model of that family (hf_adapter.MODEL_TYPES)


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
    sliding_window: int | None = None  # keys a sliding layer's query at i sees: i - window < j <= i
    layer_types: tuple[str, ...] | None = None  # one of LAYER_TYPES per layer; None: every layer full attention
    rope_local_theta: float | None = None  # RoPE base of the sliding layers (None: rope_theta)
    query_scale: int | None = None  # attention scores scaled by query_scale**-0.5 (None: head_dim)
    final_softcap: float | None = None  # logits = cap * tanh(logits / cap)
    attn_softcap: float | None = None  # attention scores = cap * tanh(scores / cap) (Gemma 2)
    # Mixture of experts (families qwen3_moe, olmoe, mixtral; train/model/moe.py): None is a dense model.
    n_experts: int | None = None  # experts of each sparse layer
    experts_per_token: int | None = None  # top-k: the experts each token is sent to
    moe_ffn_dim: int | None = None  # one expert's hidden size (None: ffn_hidden_size)
    norm_topk_prob: bool = False  # the top-k routing weights renormalized to sum to 1 (Qwen3-MoE, Mixtral)
    mlp_only_layers: tuple[int, ...] = ()  # layers with the dense feed-forward (Qwen3-MoE)
    decoder_sparse_step: int = 1  # layer i is sparse when (i + 1) % step == 0 and not in mlp_only_layers
    router_aux_loss_coef: float = 0.0  # weight of the router's load-balancing loss in the objective

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
        self._check_attention_window()
        self._check_experts()

    def _check_attention_window(self) -> None:
        if self.layer_types is not None:
            object.__setattr__(self, "layer_types", tuple(self.layer_types))  # a list from JSON
            if len(self.layer_types) != self.n_layers or not set(self.layer_types) <= set(LAYER_TYPES):
                raise ValueError(
                    f"layer_types must name one of {', '.join(LAYER_TYPES)} for each of the {self.n_layers} layers, "
                    f"got {list(self.layer_types)}"
                )
        sliding = self.layer_types is not None and "sliding_attention" in self.layer_types
        for name, given, allowed, families in (
            (
                "sliding_window and sliding layer_types",
                sliding or self.sliding_window is not None,
                "sliding_layers",
                "gemma2 or gemma3",
            ),
            ("rope_local_theta", self.rope_local_theta is not None, "local_rope", "gemma3"),
            ("attn_softcap", self.attn_softcap is not None, "attention_softcap", "gemma2"),
        ):
            if given and not getattr(self.settings, allowed):
                raise ValueError(f"{name}: only with family {families}, got {self.family}")
        if sliding and (self.sliding_window is None or self.sliding_window < 1):
            raise ValueError(f"sliding_attention layers need sliding_window >= 1, got {self.sliding_window}")
        for name in ("query_scale", "final_softcap", "attn_softcap", "rope_local_theta"):
            if getattr(self, name) is not None and not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")

    def _check_experts(self) -> None:
        object.__setattr__(self, "mlp_only_layers", tuple(self.mlp_only_layers))  # a list from JSON
        if self.settings.moe != (self.n_experts is not None):
            raise ValueError(
                f"n_experts: {self.n_experts} does not fit family {self.family} "
                "(mixture-of-experts families qwen3_moe, olmoe, mixtral need it, the others take none)"
            )
        if self.router_aux_loss_coef < 0:
            raise ValueError(f"router_aux_loss_coef must be >= 0, got {self.router_aux_loss_coef}")
        if self.n_experts is None:
            return
        for name in ("n_experts", "moe_ffn_dim", "decoder_sparse_step"):
            if getattr(self, name) is not None and getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        k = self.experts_per_token
        if k is None or not 1 <= k <= self.n_experts:
            raise ValueError(f"experts_per_token must be in [1, n_experts = {self.n_experts}], got {k}")
        if not all(0 <= i < self.n_layers for i in self.mlp_only_layers):
            raise ValueError(f"mlp_only_layers must be layers 0..{self.n_layers - 1}, got {list(self.mlp_only_layers)}")
        if self.family != "qwen3_moe" and (self.mlp_only_layers or self.decoder_sparse_step != 1):
            raise ValueError(f"mlp_only_layers and decoder_sparse_step: only with family qwen3_moe, got {self.family}")
        if self.family == "mixtral" and not self.norm_topk_prob:
            raise ValueError("norm_topk_prob: family mixtral always renormalizes its top-k weights, got false")
        if self.family == "olmoe" and self.head_dim * self.n_heads != self.d_model:
            raise ValueError(f"head_dim: family olmoe needs d_model / n_heads = {self.d_model // self.n_heads}")

    def sparse_layer(self, layer: int) -> bool:
        """Whether `layer`'s feed-forward is the mixture of experts (Qwen3-MoE's rule for dense layers)."""
        return (
            self.n_experts is not None
            and layer not in self.mlp_only_layers
            and (layer + 1) % self.decoder_sparse_step == 0
        )

    @property
    def moe_ffn_size(self) -> int:
        return self.ffn_hidden_size if self.moe_ffn_dim is None else self.moe_ffn_dim

    @property
    def settings(self) -> FamilySettings:
        return FAMILY_SETTINGS[self.family]

    def layer_type(self, layer: int) -> str:
        return "full_attention" if self.layer_types is None else self.layer_types[layer]

    def window(self, layer: int) -> int | None:
        """How many positions (itself included) a query of `layer` sees; None: all before it."""
        return self.sliding_window if self.layer_type(layer) == "sliding_attention" else None

    def rope_theta_of(self, layer_type: str) -> float:
        local = layer_type == "sliding_attention" and self.rope_local_theta is not None
        return self.rope_local_theta if local else self.rope_theta

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def ffn_hidden_size(self) -> int:
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        m = self.ffn_multiple_of
        return m * math.ceil(int(8 * self.d_model / 3) / m)

    def block_params(self, layer: int = 0, active: bool = False) -> int:
        """Parameters of transformer block `layer` (attention, q/k norms, feed-forward, two or four norms);
        `active`: of a sparse layer only the experts one token runs (router and experts_per_token experts)."""
        d, q, kv = self.d_model, self.n_heads * self.head_dim, self.kv_heads * self.head_dim
        attention = d * q * 2 + d * kv * 2 + ((q + 2 * kv) if self.qkv_bias else 0)  # wq, wo, wk, wv (+ biases)
        ffn = 3 * d * self.ffn_hidden_size
        if self.sparse_layer(layer):
            experts = self.experts_per_token if active else self.n_experts
            ffn = d * self.n_experts + experts * 3 * d * self.moe_ffn_size  # router, experts
        return attention + ffn + self.block_norm_params()

    def block_norm_params(self) -> int:
        """Parameters of one block's norms, q/k norms included (what tensor parallelism replicates)."""
        q, kv = self.n_heads * self.head_dim, self.kv_heads * self.head_dim
        qk_norm = {None: 0, "head": 2 * self.head_dim, "projection": q + kv}[self.settings.qk_norm]
        return qk_norm + (4 if self.settings.norm_placement == "sandwich" else 2) * self.d_model

    def num_params(self, embeddings: bool = True, active: bool = False) -> int:
        """Parameter count; `embeddings=False` leaves out the input embedding table (not the output head),
        `active=True` the experts a token does not run."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        body = sum(self.block_params(i, active) for i in range(self.n_layers)) + self.d_model + head
        table = self.vocab_size * self.d_model
        if embeddings:
            return body + table
        # With tied weights the table is also the output head, which does matmul work.
        return body + (table if self.tie_embeddings else 0)

    def flops_per_token(self, seq_len: int | None = None) -> float:
        """Training FLOPs per token (forward + backward), PaLM appendix B: 6N + 12 L d T.

        N counts every parameter that does a matmul for a token (so the output head, not the lookup
        table, and of a sparse layer the router and the experts_per_token experts); the attention term
        counts the full T x T score matrix, as PaLM and nanoGPT do.
        """
        t = self.max_seq_len if seq_len is None else seq_len
        return (
            6.0 * self.num_params(embeddings=False, active=True)
            + 12.0 * self.n_layers * self.n_heads * self.head_dim * t
        )


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
    if len(shape) == 1:  # a norm's weight: multiplying by 1
        out.fill_(1.0 - cfg.settings.norm_offset)
        return
    output = name.endswith(("wo.weight", "w2.weight", "experts.w2"))  # projections back into the residual
    std = cfg.init_std / math.sqrt(2 * cfg.n_layers) if output else cfg.init_std
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
    """x / rms(x) * (offset + weight) over the last dimension, in the family's order of cast and multiply."""

    def __init__(self, dim: int, cfg: ModelConfig) -> None:
        super().__init__()
        self.eps, self.offset, self.scale_in_fp32 = (
            cfg.norm_eps,
            cfg.settings.norm_offset,
            cfg.settings.norm_scale_in_fp32,
        )
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32 so that bf16 activations do not lose the mean-square.
        xf = x.float()
        out = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        weight = self.weight.float() if self.scale_in_fp32 else self.weight
        if self.offset:  # a new tensor, which autograd keeps: only where the family has an offset
            weight = weight + self.offset
        return (out * weight).type_as(x) if self.scale_in_fp32 else out.type_as(x) * weight


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


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x [batch, heads, seq, head_dim] by the position angle."""
    x1, x2 = x.float().unflatten(-1, (-1, 2)).unbind(-1)
    out = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)
    return out.type_as(x)


def causal_mask(q_positions: torch.Tensor, k_positions: torch.Tensor, window: int | None) -> torch.Tensor:
    """Which keys each query sees [queries, keys] (True: attend): those at or before it and, with a
    window, the last `window` of them (key j for query i when i - window < j <= i, as Hugging Face's
    sliding window)."""
    q, k = q_positions[:, None], k_positions[None, :]
    seen = k <= q
    return seen if window is None else seen & (k > q - window)


def capped_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float, cap: float
) -> torch.Tensor:
    """Attention whose scores are soft-capped, cap * tanh(scores / cap), before the mask (Gemma 2);
    scaled_dot_product_attention has no cap, so this one keeps the [queries, keys] scores of every head."""
    groups = q.shape[1] // k.shape[1]  # grouped-query: kv head h // groups serves query head h
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    scores = torch.tanh((q @ k.transpose(-2, -1)) * scale / cap) * cap
    scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores.float(), dim=-1).to(q.dtype) @ v


class LayerCache(Protocol):
    """Keys and values of the positions seen so far, for one layer (train/generation/generate.py: KVCache)."""

    length: int  # positions cached before this call

    def update(self, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def qk_norms(cfg: ModelConfig) -> tuple[nn.Module, nn.Module]:
    """The q and k norms of the family: over head_dim (applied per head) or over the whole projection."""
    if cfg.settings.qk_norm is None:
        return nn.Identity(), nn.Identity()
    if cfg.settings.qk_norm == "head":
        return RMSNorm(cfg.head_dim, cfg), RMSNorm(cfg.head_dim, cfg)
    return RMSNorm(cfg.n_heads * cfg.head_dim, cfg), RMSNorm(cfg.kv_heads * cfg.head_dim, cfg)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        self.n_heads, self.kv_heads, self.head_dim = cfg.n_heads, cfg.kv_heads, cfg.head_dim
        self.wq = nn.Linear(cfg.d_model, cfg.n_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wk = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wv = nn.Linear(cfg.d_model, cfg.kv_heads * cfg.head_dim, bias=cfg.qkv_bias)
        self.wo = nn.Linear(cfg.n_heads * cfg.head_dim, cfg.d_model, bias=False)
        self.q_norm, self.k_norm = qk_norms(cfg)
        self.per_head_norm = cfg.settings.qk_norm == "head"
        self.window = cfg.window(layer)
        self.scale = None if cfg.query_scale is None else cfg.query_scale**-0.5
        self.softcap = cfg.attn_softcap

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: LayerCache | None = None,
        mask: AttentionMask | None = None,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q, k, v = self.wq(x), self.wk(x), self.wv(x)
        if not self.per_head_norm:  # over the whole projection (or none)
            q, k = self.q_norm(q), self.k_norm(k)
        q = q.view(b, t, self.n_heads, self.head_dim)
        k = k.view(b, t, self.kv_heads, self.head_dim)
        if self.per_head_norm:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = q.transpose(1, 2), k.transpose(1, 2)
        v = v.view(b, t, self.kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        past = 0
        if cache is not None:
            past = cache.length
            k, v = cache.update(k, v)
        gqa = self.kv_heads != self.n_heads
        if self.softcap is not None:  # Gemma 2: the scores written out, capped, then masked
            if isinstance(mask, TiledMask):  # the model's (dense) mask: documents, this layer's window
                seen = mask.allowed
            else:
                seen = causal_mask(
                    torch.arange(past, past + t, device=x.device), torch.arange(past + t, device=x.device), self.window
                )
            scale = self.head_dim**-0.5 if self.scale is None else self.scale
            y = capped_attention(q, k, v, seen, scale, self.softcap)
        elif past == 0:  # causal over these positions, within the model's `mask` (documents, a window) if any
            y = attend(q, k, v, mask, gqa, scale=self.scale)
        else:  # after cached positions: every cached one (within the window) and the new ones before them
            seen = None
            if t > 1 or (self.window is not None and past + t > self.window):
                seen = causal_mask(
                    torch.arange(past, past + t, device=x.device), torch.arange(past + t, device=x.device), self.window
                )
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=seen, scale=self.scale, enable_gqa=gqa)
        return self.wo(y.transpose(1, 2).reshape(b, t, -1))


class FeedForward(nn.Module):
    """Gated: w2(act(w1 x) * w3 x), SwiGLU (silu) or GeGLU (tanh-approximated gelu)."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.d_model, cfg.ffn_hidden_size, bias=False)
        self.w3 = nn.Linear(cfg.d_model, cfg.ffn_hidden_size, bias=False)
        self.w2 = nn.Linear(cfg.ffn_hidden_size, cfg.d_model, bias=False)
        self.gelu = cfg.settings.activation == "gelu_tanh"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate = F.gelu(self.w1(x), approximate="tanh") if self.gelu else F.silu(self.w1(x))
        return self.w2(gate * self.w3(x))


class Block(nn.Module):
    """x + attention, then + feed-forward, each with its norms where the family puts them: before
    (`attention_norm`, `ffn_norm`), after (`attention_post_norm`, `ffn_post_norm`) or both."""

    def __init__(self, cfg: ModelConfig, layer: int = 0) -> None:
        super().__init__()
        placement = cfg.settings.norm_placement
        pre, post = placement in ("pre", "sandwich"), placement in ("post", "sandwich")
        self.attention_norm = RMSNorm(cfg.d_model, cfg) if pre else nn.Identity()
        self.attention = Attention(cfg, layer)
        self.attention_post_norm = RMSNorm(cfg.d_model, cfg) if post else nn.Identity()
        self.ffn_norm = RMSNorm(cfg.d_model, cfg) if pre else nn.Identity()
        self.feed_forward = MoEFeedForward(cfg) if cfg.sparse_layer(layer) else FeedForward(cfg)
        self.ffn_post_norm = RMSNorm(cfg.d_model, cfg) if post else nn.Identity()

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        cache: LayerCache | None = None,
        mask: AttentionMask | None = None,
    ) -> torch.Tensor:
        # mask by keyword: the tensor-parallel plan lays out attention's positional inputs only
        x = x + self.attention_post_norm(self.attention(self.attention_norm(x), cos, sin, cache, mask=mask))
        return x + self.ffn_post_norm(self.feed_forward(self.ffn_norm(x)))


def embed(cfg: ModelConfig, embeddings: nn.Embedding, tokens: torch.Tensor) -> torch.Tensor:
    """The input embeddings, scaled by sqrt(d_model) where the family does (the scale rounded to their dtype)."""
    h = embeddings(tokens)
    if cfg.settings.embedding_scale:
        h = h * torch.tensor(cfg.d_model**0.5, dtype=h.dtype)
    return h


def head(cfg: ModelConfig, norm: nn.Module, output: nn.Module, h: torch.Tensor) -> torch.Tensor:
    """The logits of the last hidden states: final norm, output head, soft cap."""
    logits = output(norm(h))
    if cfg.final_softcap is not None:
        logits = torch.tanh(logits / cfg.final_softcap) * cfg.final_softcap
    return logits


class RopeTables:
    """The RoPE frequencies of each layer type (two bases with sliding layers), and their cos/sin tables."""

    def __init__(self, cfg: ModelConfig) -> None:
        self.cfg = cfg
        # Plain tensors, not buffers: derived from the config, never in a checkpoint, never on the meta device.
        self.freq = {
            kind: rope_frequencies(cfg.head_dim, cfg.rope_theta_of(kind), cfg.rope_scaling)
            for kind in sorted({cfg.layer_type(i) for i in range(cfg.n_layers)})
        }

    def per_layer(
        self, start: int, seq_len: int, device: torch.device, documents: torch.Tensor | None = None
    ) -> dict[int, tuple[torch.Tensor, torch.Tensor, AttentionMask | None]]:
        """Layer index -> (cos, sin, mask) for positions start .. start+seq_len-1: the layer type's RoPE
        tables and, from position 0, its mask (`attention_mask`: with `documents` block-causal with
        positions restarting per document; on a sliding layer within its window)."""
        inputs = {}
        for kind, freq in self.freq.items():
            cos, sin = rope_tables(freq, start, seq_len, device)
            if documents is not None:
                cos, sin = document_rope(cos, sin, documents.to(device))
            sliding = kind == "sliding_attention" and self.cfg.sliding_window < start + seq_len
            window = self.cfg.sliding_window if sliding else None  # one that hides no key is no mask
            # After cached positions the layers write their mask out over the positions (`causal_mask`).
            dense = self.cfg.attn_softcap is not None  # capped attention reads the mask as a tensor
            mask = attention_mask(seq_len, device, None if documents is None else documents.to(device), window, dense)
            inputs[kind] = (cos, sin, mask if start == 0 else None)
        return {i: inputs[self.cfg.layer_type(i)] for i in range(self.cfg.n_layers)}


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, seed: int = 0) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.layers = nn.ModuleList(Block(cfg, i) for i in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg)
        self.output = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.rope = RopeTables(cfg)
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
        inputs = self.rope.per_layer(start, t, tokens.device, documents)
        h = embed(self.cfg, self.tok_embeddings, tokens)
        for i, layer in enumerate(self.layers):
            cos, sin, mask = inputs[i]
            h = layer(h, cos, sin, None if cache is None else cache[i], mask=mask)
        return head(self.cfg, self.norm, self.output, h)
