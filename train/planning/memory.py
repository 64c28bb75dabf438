"""Memory per device of a training run: model states under DDP and ZeRO stages, and activations.

    states = model_states(7.5e9, devices=64, strategy="zero1")      # ZeRO paper, figure 1
    states.total / 1e9                                               # 31.4 (GB)
    acts = activation_bytes(ActivationShape.from_model_config(cfg), micro_batch=8, seq_len=1024,
                            dtype="bf16", checkpointing=True)

Model states follow Rajbhandari et al. 2020 (ZeRO), section 3: with Adam, each parameter costs
`param` bytes for the weights, `grad` for the gradient and K bytes of optimizer state. Mixed
precision (fp16/bf16 weights and gradients, fp32 master weights, momentum and variance) is 2 + 2 +
12; the project's own trainer keeps fp32 weights even under bf16 autocast, so 4 + 4 + 8. Stage 1
shards the optimizer state over the data-parallel devices, stage 2 also the gradients, stage 3
(FSDP) also the weights.

Activations are the tensors autograd saves for backward in `train/model.py`'s decoder, counted per
token, plus the logits and their gradient at the loss (where a step peaks). The coefficients were
derived by listing the saved tensors of each operation (tests/train/test_memory_model.py checks
them against `torch.autograd.graph.saved_tensors_hooks` on the real model). With per-block
activation checkpointing only each block's input is kept, and one block at a time is recomputed
during backward. Not counted: the unsharded copy of one block that ZeRO-3 gathers for compute,
communication buckets, and allocator fragmentation.
"""

from __future__ import annotations

from dataclasses import dataclass

STRATEGIES = ("ddp", "zero1", "zero2", "zero3")
STRATEGY_LABELS = {"ddp": "DDP", "zero1": "ZeRO-1", "zero2": "ZeRO-2", "zero3": "ZeRO-3/FSDP"}
# The training config's `parallel` values and the ZeRO stage each one is.
PARALLEL_STRATEGY = {"ddp": "ddp", "zero1": "zero1", "zero2": "zero2", "fsdp": "zero3", "hsdp": "zero3"}


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter for the weights, the gradient and the optimizer state (K)."""

    param: int
    grad: int
    optimizer: int


STATE_BYTES = {
    "mixed": StateBytes(param=2, grad=2, optimizer=12),  # the ZeRO paper's mixed-precision Adam
    "fp32": StateBytes(param=4, grad=4, optimizer=8),  # fp32 weights, gradients, Adam moments
}


@dataclass(frozen=True)
class ModelStates:
    """Bytes per device for weights, gradients and optimizer state."""

    params: float
    grads: float
    optimizer: float

    @property
    def total(self) -> float:
        return self.params + self.grads + self.optimizer


def model_states(num_params: float, devices: int, strategy: str, state_bytes: str = "mixed") -> ModelStates:
    """Model states per device for `num_params` parameters data-parallel over `devices` devices."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if devices < 1:
        raise ValueError(f"devices must be >= 1, got {devices}")
    b = STATE_BYTES[state_bytes]
    stage = STRATEGIES.index(strategy)  # 0 = DDP, 1..3 = ZeRO stage
    return ModelStates(
        params=num_params * b.param / (devices if stage >= 3 else 1),
        grads=num_params * b.grad / (devices if stage >= 2 else 1),
        optimizer=num_params * b.optimizer / (devices if stage >= 1 else 1),
    )


@dataclass(frozen=True)
class ActivationShape:
    """The dimensions of the decoder that activation memory depends on."""

    d_model: int
    n_layers: int
    n_heads: int
    kv_dim: int  # n_kv_heads * head_dim
    ffn_hidden: int
    vocab_size: int
    matmul_params: int  # weights that bf16 autocast keeps a cast copy of during forward and backward

    @classmethod
    def from_model_config(cls, cfg) -> "ActivationShape":
        """From `train.model.llama.ModelConfig`."""
        return cls(
            d_model=cfg.d_model,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            kv_dim=cfg.kv_heads * cfg.head_dim,
            ffn_hidden=cfg.ffn_hidden_size,
            vocab_size=cfg.vocab_size,
            matmul_params=cfg.num_params(embeddings=False),
        )


@dataclass(frozen=True)
class ActivationCoefficients:
    """Saved bytes per token: per block a*d_model + b*kv_dim + c*ffn_hidden + d*n_heads + e, and at the head."""

    d_model: int
    kv_dim: int
    ffn: int
    heads: int
    const: int
    head_d_model: int
    logits: int  # log-softmax output kept for the loss
    logit_buffers: int  # the fp32 gradients of the log-softmax output and of the logits, during the loss backward
    weight_copy: int  # bytes per matmul weight of the autocast cast copy


# fp32: each RMSNorm keeps its input, x*rsqrt (and rsqrt itself) and its output; attention keeps
# q, k, v, the output and the log-sum-exp; SwiGLU keeps w1 x, silu(w1 x), w3 x and the product.
# bf16 autocast: the residual stream and the norms stay fp32, but every linear keeps its own bf16
# copy of its input, and matmul outputs are bf16.
ACTIVATION_COEFFICIENTS = {
    "fp32": ActivationCoefficients(36, 8, 16, 4, 8, 12, 4, 8, 0),
    "bf16": ActivationCoefficients(32, 4, 8, 4, 8, 10, 4, 8, 2),
}
RESIDUAL_BYTES = 4  # the residual stream stays fp32 under autocast: a checkpointed block's input


def _per_token(shape: ActivationShape, c: ActivationCoefficients) -> tuple[int, int]:
    """Bytes saved per token by one block, and by the final norm and the loss."""
    block = (c.d_model * shape.d_model + c.kv_dim * shape.kv_dim + c.ffn * shape.ffn_hidden
             + c.heads * shape.n_heads + c.const)
    return block, c.head_d_model * shape.d_model + c.logits * shape.vocab_size


def saved_activation_bytes(shape: ActivationShape, micro_batch: int, seq_len: int, dtype: str) -> float:
    """What autograd holds for backward after one micro-batch's forward, without checkpointing."""
    c = ACTIVATION_COEFFICIENTS[dtype]
    block, head = _per_token(shape, c)
    return micro_batch * seq_len * (shape.n_layers * block + head) + c.weight_copy * shape.matmul_params


def activation_bytes(shape: ActivationShape, micro_batch: int, seq_len: int, dtype: str, checkpointing: bool) -> float:
    """Peak activation memory of one micro-batch's forward and backward, in bytes."""
    c = ACTIVATION_COEFFICIENTS[dtype]
    block, head = _per_token(shape, c)
    # The loss backward is where a step peaks: the logits and their gradients join what is saved.
    head += c.logit_buffers * shape.vocab_size
    if checkpointing:
        per_token = shape.n_layers * RESIDUAL_BYTES * shape.d_model + max(head, block)
    else:
        per_token = shape.n_layers * block + head
    return micro_batch * seq_len * per_token + c.weight_copy * shape.matmul_params


@dataclass(frozen=True)
class DeviceMemory:
    """One strategy's memory per device, without and with activation checkpointing."""

    strategy: str
    states: ModelStates
    activations: float | None
    activations_checkpointed: float | None

    @property
    def total(self) -> float | None:
        return None if self.activations is None else self.states.total + self.activations

    @property
    def total_checkpointed(self) -> float | None:
        if self.activations_checkpointed is None:
            return None
        return self.states.total + self.activations_checkpointed


def memory_table(num_params: float, devices: int, state_bytes: str, shape: ActivationShape | None,
                 micro_batch: int, seq_len: int, dtype: str) -> list[DeviceMemory]:
    """Memory per device under every strategy; activations only when the model's shape is known."""
    acts = ckpt = None
    if shape is not None:
        acts = activation_bytes(shape, micro_batch, seq_len, dtype, checkpointing=False)
        ckpt = activation_bytes(shape, micro_batch, seq_len, dtype, checkpointing=True)
    return [DeviceMemory(s, model_states(num_params, devices, s, state_bytes), acts, ckpt) for s in STRATEGIES]
