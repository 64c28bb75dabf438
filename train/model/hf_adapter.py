"""The Hugging Face layout: `config.json` <-> ModelConfig, parameter names, and the q/k RoPE permutation.

    cfg = model_config_from_hf(json.load(open("llama/config.json")), "llama/config.json")
    hf_name("layers.0.attention.wq.weight", cfg)       # "model.layers.0.self_attn.q_proj.weight"
    weights = HFWeights("llama/")                      # model.safetensors or an index with shards
    block = weights.read_native("layers.0.attention.wq.weight", cfg, (slice(0, 64), slice(None)))
    tensors = to_hf_state_dict(model.state_dict(), cfg)  # HF names and row order, for export
    config = hf_config(cfg, bos_id=1, eos_id=2, dtype="float32")

Families (MODEL_TYPES: the HF model_type of each): llama (Llama 2/3/3.1/3.2), mistral, qwen2 (q/k/v
biases), qwen3 (per-head q/k norms), olmo2 (norms after attention and FFN, q/k norms over the whole
projection), gemma2 (sandwich norms, GeGLU, alternating sliding and full layers, soft-capped
attention scores and logits) and gemma3 (`gemma3_text`, Gemma3ForCausalLM: Gemma 2's settings with
per-head q/k norms, sliding and full layers with their own RoPE bases, no attention cap), and the
mixtures of experts qwen3_moe, olmoe (q/k norms over the whole projection) and mixtral, whose experts'
per-expert tensors (`mlp.experts.N.{gate,up,down}_proj`, Mixtral's `block_sparse_moe.experts.N.w{1,3,2}`)
are the rows of the model's stacked expert weights (`hf_names`; the router is `mlp.gate` or
`block_sparse_moe.gate`). Which HF
norm a native norm is depends on where the family puts its norms (`_NORM_NAMES`): Llama's
`post_attention_layernorm` is the norm before the FFN, OLMo 2's and Gemma's the one on the attention
output.

The project's RoPE rotates interleaved pairs (x[2i], x[2i+1]), Hugging Face's rotates halves (x[i],
x[i + head_dim/2]); inside every head, native row 2i is HF row i and native row 2i+1 is HF row
i + head_dim/2, for the q and k projections' weights and biases, and for the q/k norms' weights
(applied before RoPE: per head one head's permutation, over the projection every head's). This is
the only module that knows HF names; loading (any shard of any tensor, read straight from the
safetensors files) and export both go through it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import torch

from pretrainkit.errors import UserError
from pretrainkit.files import read_json_object
from pretrainkit.train.model.llama import FAMILIES, ROPE_SCALING_KEYS, ModelConfig
from pretrainkit.train.model.safetensors_rows import SafetensorsFile

CONFIG_FILE = "config.json"
SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
MODEL_TYPES = {family: family for family in FAMILIES} | {"gemma3": "gemma3_text"}
FAMILY_OF = {model_type: family for family, model_type in MODEL_TYPES.items()}
ARCHITECTURES = {
    "llama": "LlamaForCausalLM",
    "mistral": "MistralForCausalLM",
    "qwen2": "Qwen2ForCausalLM",
    "qwen3": "Qwen3ForCausalLM",
    "olmo2": "Olmo2ForCausalLM",
    "gemma2": "Gemma2ForCausalLM",
    "gemma3": "Gemma3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM",
    "olmoe": "OlmoeForCausalLM",
    "mixtral": "MixtralForCausalLM",
}
GEMMA_ACTIVATIONS = ("gelu_pytorch_tanh", "gelu_tanh")  # the same function under two names

_BLOCK_NAMES = {
    "attention.wq": "self_attn.q_proj",
    "attention.wk": "self_attn.k_proj",
    "attention.wv": "self_attn.v_proj",
    "attention.wo": "self_attn.o_proj",
    "feed_forward.w1": "mlp.gate_proj",
    "feed_forward.w2": "mlp.down_proj",
    "feed_forward.w3": "mlp.up_proj",
    "attention.q_norm": "self_attn.q_norm",
    "attention.k_norm": "self_attn.k_norm",
}
# Block norms by the family's norm placement (FamilySettings.norm_placement).
_NORM_NAMES = {
    "pre": {"attention_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm"},
    "post": {"attention_post_norm": "post_attention_layernorm", "ffn_post_norm": "post_feedforward_layernorm"},
    "sandwich": {
        "attention_norm": "input_layernorm",
        "attention_post_norm": "post_attention_layernorm",
        "ffn_norm": "pre_feedforward_layernorm",
        "ffn_post_norm": "post_feedforward_layernorm",
    },
}
# A sparse layer's router, and the prefix of its experts' HF names (`experts.N.<name>`; names by native w1, w2, w3).
_MOE_PREFIX = {"qwen3_moe": "mlp", "olmoe": "mlp", "mixtral": "block_sparse_moe"}
_EXPERT_NAMES = {
    "qwen3_moe": {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"},
    "olmoe": {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"},
    "mixtral": {"w1": "w1", "w2": "w2", "w3": "w3"},
}
# transformers' defaults where a config.json leaves a key out.
_AUX_LOSS_COEF = {"qwen3_moe": 0.001, "olmoe": 0.01, "mixtral": 0.001}
_TOP_NAMES = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK = re.compile(r"layers\.(\d+)\.(\w+\.\w+|\w+)\.(weight|bias)")
_EXPERTS = re.compile(r"layers\.(\d+)\.feed_forward\.experts\.(w[123])")


def is_hf_model_dir(path: str | Path) -> bool:
    """A directory with a Hugging Face `config.json` (one naming a `model_type`)."""
    config = Path(path) / CONFIG_FILE
    if not config.is_file():
        return False
    try:
        return "model_type" in json.loads(config.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False


def read_hf_config(path: str | Path) -> dict:
    return read_json_object(Path(path) / CONFIG_FILE, "a Hugging Face model config")


def model_config_from_hf(hf: dict, where: str) -> ModelConfig:
    """The ModelConfig of a Hugging Face `config.json`; UserError naming `where` and the key for what
    this model cannot represent. max_seq_len is max_position_embeddings (Mistral: at most its
    sliding window, up to which full attention is the same model)."""
    model_type = hf.get("model_type")
    family = FAMILY_OF.get(model_type)
    if family is None:
        raise UserError(
            f"{where}: model_type {model_type!r} is not supported (supported: {', '.join(MODEL_TYPES.values())})"
        )

    def need(key: str, ok: bool, what: str) -> None:
        if not ok:
            raise UserError(f"{where}: {key}: {hf.get(key)!r} is not supported ({what})")

    if family in ("gemma2", "gemma3"):
        need("hidden_activation", hf.get("hidden_activation", GEMMA_ACTIVATIONS[0]) in GEMMA_ACTIVATIONS, "GeGLU")
        need("use_bidirectional_attention", not hf.get("use_bidirectional_attention"), "causal attention only")
    if family == "gemma3":  # transformers' Gemma 3 ignores the key: a value there is not the model it runs
        need("attn_logit_softcapping", hf.get("attn_logit_softcapping") is None, "no attention soft-capping")
    else:
        need("hidden_act", hf.get("hidden_act", "silu") == "silu", "only silu, SwiGLU")
    need("mlp_bias", not hf.get("mlp_bias", False), "no feed-forward biases")
    need("attention_bias", not hf.get("attention_bias", False), "no attention output bias")
    need("use_sliding_window", not hf.get("use_sliding_window", False), "full attention only")
    need("clip_qkv", hf.get("clip_qkv") is None, "no q/k/v clipping")
    need("router_jitter_noise", not hf.get("router_jitter_noise"), "no router jitter")
    theta, scaling, window = _rope(hf, family, where)
    max_seq_len = int(hf.get("max_position_embeddings", 2048))
    if family in ("mistral", "mixtral") and hf.get("sliding_window"):
        max_seq_len = min(max_seq_len, int(hf["sliding_window"]))
    try:
        return ModelConfig(
            vocab_size=int(hf["vocab_size"]),
            d_model=int(hf["hidden_size"]),
            n_layers=int(hf["num_hidden_layers"]),
            n_heads=int(hf["num_attention_heads"]),
            n_kv_heads=hf.get("num_key_value_heads"),
            max_seq_len=max_seq_len,
            ffn_hidden=int(hf["intermediate_size"]),
            # Gemma ties by default, the other families' configs untie by default.
            tie_embeddings=bool(hf.get("tie_word_embeddings", family in ("gemma2", "gemma3"))),
            norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            init_std=float(hf.get("initializer_range", 0.02)),
            head_dim=hf.get("head_dim", 256 if family in ("gemma2", "gemma3") else None),
            qkv_bias=family == "qwen2",
            rope_scaling=scaling,
            family=family,
            **window,
            **_experts(hf, family),
        )
    except KeyError as e:
        raise UserError(f"{where}: required key {e.args[0]} is missing") from None
    except (TypeError, ValueError) as e:
        raise UserError(f"{where}: {e}") from None


def _experts(hf: dict, family: str) -> dict:
    """The mixture-of-experts settings of a config.json (none for a dense family). Qwen3-MoE's
    `intermediate_size` is its dense layers', `moe_intermediate_size` an expert's; OLMoE's and
    Mixtral's `intermediate_size` is an expert's. Mixtral always renormalizes its top-k weights."""
    if family not in _MOE_PREFIX:
        return {}
    out = {
        "n_experts": int(hf["num_experts"] if "num_experts" in hf else hf["num_local_experts"]),
        "experts_per_token": int(hf["num_experts_per_tok"]),
        "norm_topk_prob": family == "mixtral" or bool(hf.get("norm_topk_prob", False)),
        "router_aux_loss_coef": float(hf.get("router_aux_loss_coef", _AUX_LOSS_COEF[family])),
    }
    if family == "qwen3_moe":
        out["moe_ffn_dim"] = int(hf["moe_intermediate_size"])
        out["mlp_only_layers"] = tuple(hf.get("mlp_only_layers") or ())
        out["decoder_sparse_step"] = int(hf.get("decoder_sparse_step", 1))
    return out


def _rope(hf: dict, family: str, where: str) -> tuple[float, dict | None, dict]:
    """(rope_theta, rope_scaling, the attention-window settings) of a config.json.

    Gemma's sliding layers follow `layer_types`, or else every `sliding_window_pattern`-th layer is a
    full one (Gemma 2: every 2nd, Gemma 3: every 6th by default). Gemma 3 keeps one RoPE per layer type
    (transformers 5: `rope_parameters` keyed by full_attention and sliding_attention; 4.x: `rope_theta`
    and `rope_local_base_freq`). Gemma 2 caps attention scores and logits by default, Gemma 3 neither."""
    params = hf.get("rope_parameters") or {}
    window: dict = {}
    if family in ("gemma2", "gemma3"):
        gemma3 = family == "gemma3"
        n = int(hf.get("num_hidden_layers", 0))
        pattern = int(hf.get("sliding_window_pattern", 6 if gemma3 else 2))
        layer_types = hf.get("layer_types") or [
            "sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)
        ]
        local = (params.get("sliding_attention") or {}) if gemma3 else {}
        params = (params.get("full_attention") or {}) if gemma3 else params
        if gemma3 and (hf.get("rope_scaling") is not None or local.get("rope_type", "default") != "default"):
            raise UserError(f"{where}: rope_scaling: {hf.get('rope_scaling')!r} is not supported (default RoPE only)")
        window = {
            "layer_types": tuple(layer_types),
            "sliding_window": hf.get("sliding_window", 4096),
            "query_scale": int(hf.get("query_pre_attn_scalar", 256)),
            "final_softcap": hf.get("final_logit_softcapping", None if gemma3 else 30.0),
        }
        if gemma3:
            window["rope_local_theta"] = float(local.get("rope_theta", hf.get("rope_local_base_freq", 10000.0)))
        else:
            window["attn_softcap"] = hf.get("attn_logit_softcapping", 50.0)
    rope = params or hf.get("rope_scaling") or {}
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    theta = float(rope.get("rope_theta", hf.get("rope_theta", 1e6 if family == "gemma3" else 10000.0)))
    scaling = None
    if rope_type == "llama3":
        scaling = {"rope_type": "llama3", **{k: rope[k] for k in ROPE_SCALING_KEYS if k in rope}}
    elif rope_type != "default":
        raise UserError(f"{where}: rope type {rope_type!r} is not supported (supported: default, llama3)")
    return theta, scaling, window


def hf_config(cfg: ModelConfig, bos_id: int | None, eos_id: int | None, dtype: str) -> dict:
    """A `config.json` that transformers reads as exactly this model."""
    rope = (
        {"rope_type": "default", "rope_theta": cfg.rope_theta}
        if cfg.rope_scaling is None
        else {**cfg.rope_scaling, "rope_theta": cfg.rope_theta}
    )
    out = {
        "architectures": [ARCHITECTURES[cfg.family]],
        "model_type": MODEL_TYPES[cfg.family],
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.d_model,
        "intermediate_size": cfg.ffn_hidden_size,
        "num_hidden_layers": cfg.n_layers,
        "num_attention_heads": cfg.n_heads,
        "num_key_value_heads": cfg.kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_seq_len,
        "rms_norm_eps": cfg.norm_eps,
        "initializer_range": cfg.init_std,
        "tie_word_embeddings": cfg.tie_embeddings,
        # Both spellings: transformers >= 5 reads rope_parameters, 4.x rope_theta and rope_scaling.
        "rope_parameters": rope,
        "rope_theta": cfg.rope_theta,
        "rope_scaling": cfg.rope_scaling,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": dtype,
        "use_cache": True,
    }
    if cfg.family in _MOE_PREFIX:
        out.update(_moe_config(cfg))
    elif cfg.family in ("llama", "olmo2"):
        out.update(attention_bias=False, mlp_bias=False)
    elif cfg.family in ("gemma2", "gemma3"):
        out.update(_gemma_config(cfg))
        del out["hidden_act"]
    else:
        out.update(sliding_window=None, use_sliding_window=False)
    return out


def _moe_config(cfg: ModelConfig) -> dict:
    """The mixture-of-experts keys of qwen3_moe, olmoe and mixtral (see `_experts`)."""
    out = {
        "num_experts_per_tok": cfg.experts_per_token,
        "router_aux_loss_coef": cfg.router_aux_loss_coef,
        "attention_bias": False,
        "sliding_window": None,
        "output_router_logits": False,
    }
    if cfg.family == "mixtral":
        return out | {"num_local_experts": cfg.n_experts, "intermediate_size": cfg.moe_ffn_size}
    out |= {"num_experts": cfg.n_experts, "norm_topk_prob": cfg.norm_topk_prob}
    if cfg.family == "olmoe":
        return out | {"intermediate_size": cfg.moe_ffn_size, "clip_qkv": None}
    return out | {
        "moe_intermediate_size": cfg.moe_ffn_size,
        "mlp_only_layers": list(cfg.mlp_only_layers),
        "decoder_sparse_step": cfg.decoder_sparse_step,
        "use_sliding_window": False,
    }


def _gemma_config(cfg: ModelConfig) -> dict:
    """Gemma's own keys: activation, layer types and window, query scale, soft caps; Gemma 3's per-layer-type RoPE."""
    out = {
        "hidden_activation": GEMMA_ACTIVATIONS[0],
        "layer_types": [cfg.layer_type(i) for i in range(cfg.n_layers)],
        # transformers builds the sliding mask whether or not a layer uses it: a window is always given.
        "sliding_window": cfg.sliding_window or cfg.max_seq_len,
        "query_pre_attn_scalar": cfg.head_dim if cfg.query_scale is None else cfg.query_scale,
        "final_logit_softcapping": cfg.final_softcap,
        "attn_logit_softcapping": cfg.attn_softcap,
        "attention_bias": False,
        "use_bidirectional_attention": False,
    }
    if cfg.family == "gemma3":
        local_theta = cfg.rope_theta_of("sliding_attention")
        out["rope_parameters"] = {
            "full_attention": {"rope_type": "default", "rope_theta": cfg.rope_theta},
            "sliding_attention": {"rope_type": "default", "rope_theta": local_theta},
        }
        out["rope_local_base_freq"] = local_theta
    return out


def is_stacked_experts(name: str) -> bool:
    """Whether native parameter `name` is a sparse layer's stacked expert weights (one HF tensor per expert)."""
    return _EXPERTS.fullmatch(name) is not None


def hf_names(name: str, cfg: ModelConfig) -> list[str]:
    """The Hugging Face tensors of a native parameter: its one name, or for a sparse layer's stacked
    expert weights (`feed_forward.experts.w1` [n_experts, ...]) one per expert, in expert order."""
    m = _EXPERTS.fullmatch(name)
    if m is None:
        return [hf_name(name, cfg)]
    layer, proj = m.group(1), _EXPERT_NAMES[cfg.family][m.group(2)]
    prefix = f"model.layers.{layer}.{_MOE_PREFIX[cfg.family]}.experts"
    return [f"{prefix}.{e}.{proj}.weight" for e in range(cfg.n_experts)]


def hf_name(name: str, cfg: ModelConfig) -> str:
    """The Hugging Face name of a native parameter name (not a stacked expert weight: `hf_names`)."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _BLOCK.fullmatch(name)
    names = _BLOCK_NAMES | _NORM_NAMES[cfg.settings.norm_placement]
    if cfg.family in _MOE_PREFIX:
        names = names | {"feed_forward.router": f"{_MOE_PREFIX[cfg.family]}.gate"}
    if m is None or m.group(2) not in names:
        raise KeyError(f"no Hugging Face name for parameter {name!r}")
    return f"model.layers.{m.group(1)}.{names[m.group(2)]}.{m.group(3)}"


def rope_rows(name: str, cfg: ModelConfig) -> torch.Tensor | None:
    """For q/k projections and q/k norms: the HF row of every native row (index tensor); None for other tensors."""
    per_head = cfg.settings.qk_norm == "head"
    if ".attention.wq." in name or (".attention.q_norm." in name and not per_head):
        heads = cfg.n_heads
    elif ".attention.wk." in name or (".attention.k_norm." in name and not per_head):
        heads = cfg.kv_heads
    elif ".attention.q_norm." in name or ".attention.k_norm." in name:
        heads = 1
    else:
        return None
    hd = cfg.head_dim
    i = torch.arange(hd)
    within = i // 2 + (i % 2) * (hd // 2)
    return (torch.arange(heads)[:, None] * hd + within).flatten()


def to_hf_state_dict(state: dict[str, torch.Tensor], cfg: ModelConfig) -> dict[str, torch.Tensor]:
    """Native full tensors -> HF names and row order (a tied output head is left out, as HF saves it)."""
    out = {}
    for name, t in state.items():
        if cfg.tie_embeddings and name == "output.weight":
            continue
        rows = rope_rows(name, cfg)
        if rows is not None:
            t = torch.empty_like(t).index_copy_(0, rows, t)
        if is_stacked_experts(name):  # stacked experts: each its own tensor (copies: safetensors refuses shared memory)
            out.update((hf, t[e].clone()) for e, hf in enumerate(hf_names(name, cfg)))
        else:
            out[hf_name(name, cfg)] = t.contiguous()
    return out


class HFWeights:
    """The tensors of a Hugging Face model directory (`model.safetensors`, or an index and its shards),
    read by region: only the bytes asked for are read from disk."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)
        index = self.dir / INDEX_FILE
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
                self.files = {k: self.dir / v for k, v in weight_map.items()}
            except (OSError, ValueError, KeyError, TypeError) as e:
                raise UserError(f"{index}: not a safetensors index ({e})") from None
        elif (self.dir / SINGLE_FILE).is_file():
            self.files = dict.fromkeys(SafetensorsFile(self.dir / SINGLE_FILE).names(), self.dir / SINGLE_FILE)
        else:
            raise UserError(f"{self.dir}: no {SINGLE_FILE} or {INDEX_FILE} (only safetensors weights are read)")
        self._opened: dict[Path, SafetensorsFile] = {}

    def _file(self, hf: str) -> SafetensorsFile:
        path = self.files[hf]
        if path not in self._opened:
            self._opened[path] = SafetensorsFile(path)
        if hf not in self._opened[path].entries:
            raise UserError(f"{path}: tensor {hf} is missing (the index names this file)")
        return self._opened[path]

    def names(self) -> set[str]:
        """Every tensor name the directory holds."""
        return set(self.files)

    def shape_of(self, hf: str) -> list[int]:
        return self._file(hf).shape(hf)

    def read_native(self, name: str, cfg: ModelConfig, region: tuple[slice, ...]) -> torch.Tensor:
        """Native tensor `name`, the part `region` (one slice per dim) of it, in float32."""
        if is_stacked_experts(name):  # the experts of region[0], each read from its own tensor
            experts = hf_names(name, cfg)[region[0]]
            return torch.stack([self._file(hf).read(hf, region[1:]) for hf in experts])
        hf = hf_name(name, cfg)
        rows = rope_rows(name, cfg)
        if rows is None:
            return self._file(hf).read(hf, region)
        wanted = rows[region[0]]
        lo, hi = int(wanted.min()), int(wanted.max()) + 1  # whole heads around the native rows asked for
        return self._file(hf).read(hf, (slice(lo, hi), *region[1:]))[wanted - lo]
