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

A mixture of experts (`ExpertShape`) holds every expert's weights, but `parallel.ep` splits each
sparse layer's experts over ep of the data-parallel devices (the expert-parallel group is carved out of
data parallelism, as in torchtitan): a device keeps n_experts/ep of them, and the ZeRO stage shards
those over the devices/ep data-parallel copies of its expert group, so that a sharded state costs
total/devices either way and ep saves memory where a state is not sharded (DDP's weights, gradients
and optimizer state; ZeRO-1's weights and gradients; ZeRO-2's weights) and in the bf16 copies of the
weights that autocast makes (a device casts only its experts). The experts are taken to spread evenly
over pipeline stages.

Tensor and pipeline parallelism (`Split`): with tp, every block's matrices, the embedding and the
output head are divided by tp (the norms are replicated); with pp, a device holds n_layers/pp blocks,
the first stage the embedding and the last the final norm and head, and the planner reports the
largest stage. Data parallelism then shards what a device holds as its ZeRO stage says.

Activations are the tensors autograd saves for backward in `train/model/llama.py`'s decoder, counted per
token, plus the logits and their gradient at the loss (where a step peaks); a family's q/k norms,
Gemma's two extra norms per block and the logit soft cap add theirs (`ActivationShape.from_model_config`
reads them from the family's settings). The coefficients were
derived by listing the saved tensors of each operation (tests/train/planning/test_memory_model.py checks
them against `torch.autograd.graph.saved_tensors_hooks` on the real model). With per-block
activation checkpointing only each block's input is kept, and one block at a time is recomputed
during backward. Under tensor parallelism with sequence parallelism every saved tensor of a block is
split over tp (by heads, hidden units or positions), except the all-gathered full-sequence inputs
of attention and of the FFN, which their first linear layers keep; the logits are gathered, so the
loss's tensors are whole on every tp rank. Under pipeline parallelism a stage holds the activations
of every micro-batch it has run forward and not yet backward: under GPipe all of them, under 1F1B
at most pp - stage on stage `stage`, under interleaved 1F1B what torch's warm-up runs (several
chunks of n_layers/(pp x stages_per_rank) blocks). Not counted: the unsharded copy of one block
that ZeRO-3 gathers for compute, communication buckets, pipeline send/receive buffers, and
allocator fragmentation.

A sparse layer's feed-forward saves the SwiGLU tensors of the experts_per_token experts each token
is sent to, and the routing's own: the router's fp32 probabilities, the top-k indices and weights,
the token rows gathered for the experts and the experts' outputs (`ROUTING_COEFFICIENTS`, checked
against the real model like the others). The count does not depend on how evenly the experts are
loaded: every token sends k rows whichever experts take them.
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


def model_states(
    num_params: float,
    devices: int,
    strategy: str,
    state_bytes: str = "mixed",
    expert_params: float = 0.0,
    ep: int = 1,
) -> ModelStates:
    """Model states per device for `num_params` parameters data-parallel over `devices` devices, of which
    `expert_params` are experts split over `ep` of those devices (see the module docstring)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; expected one of {', '.join(STRATEGIES)}")
    if devices < 1 or devices % ep:
        raise ValueError(f"devices must be >= 1 and a multiple of ep = {ep}, got {devices}")
    b = STATE_BYTES[state_bytes]
    stage = STRATEGIES.index(strategy)  # 0 = DDP, 1..3 = ZeRO stage
    # A state sharded from ZeRO stage `first` on: the dense part over `devices`, each expert group's over
    # devices/ep, which is total/devices again; unsharded: the dense part whole and 1/ep of the experts.
    held = {
        first: num_params / devices if stage >= first else num_params - expert_params + expert_params / ep
        for first in (1, 2, 3)
    }
    return ModelStates(params=held[3] * b.param, grads=held[2] * b.grad, optimizer=held[1] * b.optimizer)


@dataclass(frozen=True)
class ExpertShape:
    """A mixture of experts' dimensions (train/model/moe.py) that memory depends on."""

    n_experts: int
    experts_per_token: int
    ffn_hidden: int  # one expert's hidden size
    sparse_layers: int  # the layers whose feed-forward is the mixture
    params: int  # every expert weight of every sparse layer: what parallel.ep splits

    @classmethod
    def from_model_config(cls, cfg) -> ExpertShape | None:
        """From `train.model.llama.ModelConfig`; None for a dense model."""
        if cfg.n_experts is None:
            return None
        sparse = sum(cfg.sparse_layer(i) for i in range(cfg.n_layers))
        return cls(
            n_experts=cfg.n_experts,
            experts_per_token=cfg.experts_per_token,
            ffn_hidden=cfg.moe_ffn_size,
            sparse_layers=sparse,
            params=sparse * cfg.n_experts * 3 * cfg.d_model * cfg.moe_ffn_size,
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
    tie_embeddings: bool = True
    # What a family adds to Llama's block (train/model/llama.py FamilySettings), all 0 for Llama:
    qk_norm_dim: int = 0  # entries the q/k norms normalize per token: (n_heads + n_kv_heads) * head_dim
    qk_norm_rows: int = 0  # the mean squares they take per token: one per head, or one per projection
    norms_in_fp32: bool = False  # norm weights applied before the cast back (OLMo 2, Gemma): fp32 outputs
    sandwich_norms: bool = False  # two more d_model norms per block, on the attention and FFN outputs (Gemma)
    block_norm_params: int = 0  # one block's norm weights, replicated under tensor parallelism (0: 2 x d_model)
    softcap: bool = False  # the logits' soft cap keeps its tanh
    capped_attention: bool = False  # attention scores soft-capped (Gemma 2): every head's scores kept, not SDPA's
    experts: ExpertShape | None = None  # a mixture of experts' sparse layers (None: every layer dense)

    @classmethod
    def from_model_config(cls, cfg) -> ActivationShape:
        """From `train.model.llama.ModelConfig`."""
        s = cfg.settings
        qk_rows = {None: 0, "head": cfg.n_heads + cfg.kv_heads, "projection": 2}[s.qk_norm]
        sandwich = s.norm_placement == "sandwich"
        qk_dim = 0 if s.qk_norm is None else (cfg.n_heads + cfg.kv_heads) * cfg.head_dim
        return cls(
            d_model=cfg.d_model,
            n_layers=cfg.n_layers,
            n_heads=cfg.n_heads,
            kv_dim=cfg.kv_heads * cfg.head_dim,
            ffn_hidden=cfg.ffn_hidden_size,
            vocab_size=cfg.vocab_size,
            matmul_params=cfg.num_params(embeddings=False),
            tie_embeddings=cfg.tie_embeddings,
            qk_norm_dim=qk_dim,
            qk_norm_rows=qk_rows,
            norms_in_fp32=s.norm_scale_in_fp32,
            sandwich_norms=sandwich,
            # A q/k norm over the whole projection is split by heads like the projection.
            block_norm_params=cfg.block_norm_params() - (qk_dim if s.qk_norm == "projection" else 0),
            softcap=cfg.final_softcap is not None,
            capped_attention=cfg.attn_softcap is not None,
            experts=ExpertShape.from_model_config(cfg),
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
    norm_entry: int  # per entry of a norm the families add (q/k, Gemma's extra two), its weight applied after the cast
    logit_entry: int  # per logit of the soft cap's tanh


NORM_ENTRY_FP32_WEIGHT = 8  # a norm whose weight is applied before the cast keeps its fp32 input and normalized value


# fp32: each RMSNorm keeps its input, x*rsqrt (and rsqrt itself) and its output; attention keeps
# q, k, v, the output and the log-sum-exp; SwiGLU keeps w1 x, silu(w1 x), w3 x and the product.
# bf16 autocast: the residual stream and the norms stay fp32, but every linear keeps its own bf16
# copy of its input, and matmul outputs are bf16.
ACTIVATION_COEFFICIENTS = {
    "fp32": ActivationCoefficients(36, 8, 16, 4, 8, 12, 4, 8, 0, 8, 4),
    "bf16": ActivationCoefficients(32, 4, 8, 4, 8, 10, 4, 8, 2, 6, 2),
}
RESIDUAL_BYTES = 4  # the residual stream stays fp32 under autocast: a checkpointed block's input


@dataclass(frozen=True)
class RoutingCoefficients:
    """Saved bytes per token of a sparse layer's routing, k = experts_per_token: a*d_model + b*k*d_model + c*n_experts
    + d*k + e."""

    d_model: int  # bf16: the FFN input is cast once, for the router, where the dense w1 and w3 cast it twice
    pair_d_model: int  # the rows gathered for the experts and the experts' weighted outputs
    expert: int  # the router's fp32 probabilities
    pair: int  # the top-k indices, sort order and token indices (int64) and the top-k weights
    const: int  # the renormalization's sum


# fp32 listed from moe.py's saved tensors; bf16's pair_d_model fitted to measured bytes (the listing gives 12).
# Checked on tiny mixtures: within 0.6% of the whole model's saved bytes (tests/train/planning/test_memory_model.py).
ROUTING_COEFFICIENTS = {"fp32": RoutingCoefficients(0, 12, 4, 32, 4), "bf16": RoutingCoefficients(-2, 10, 4, 32, 4)}


CAPPED_SCORE_BYTES = 8  # per head and key: the capped scores' tanh and the fp32 softmax (measured within 3%)


def _per_token(shape: ActivationShape, c: ActivationCoefficients, seq_len: int, dtype: str) -> tuple[float, float, int]:
    """Bytes saved per token by one block on average over the layers, by the largest block, and by the
    final norm and the loss."""
    block = (
        c.d_model * shape.d_model
        + c.kv_dim * shape.kv_dim
        + c.ffn * shape.ffn_hidden
        + c.heads * shape.n_heads
        + c.const
    )
    # Listed like the coefficients: a q/k norm keeps its entries (norm_entry each) and its mean squares
    # (4 bytes each); Gemma's two extra norms the same over d_model; the soft cap its tanh.
    entry = NORM_ENTRY_FP32_WEIGHT if shape.norms_in_fp32 else c.norm_entry
    block += entry * shape.qk_norm_dim + 4 * shape.qk_norm_rows
    if shape.sandwich_norms:
        block += 2 * (entry * shape.d_model + 4)
    if shape.capped_attention:  # a [queries, keys] score matrix per head: per query, seq_len keys
        block += CAPPED_SCORE_BYTES * shape.n_heads * seq_len
    head = c.head_d_model * shape.d_model + c.logits * shape.vocab_size
    head += c.logit_entry * shape.vocab_size if shape.softcap else 0
    x = shape.experts
    if x is None:
        return block, block, head
    r = ROUTING_COEFFICIENTS[dtype]
    k = x.experts_per_token
    sparse = block + c.ffn * (k * x.ffn_hidden - shape.ffn_hidden)
    sparse += (
        r.d_model * shape.d_model + r.pair_d_model * k * shape.d_model + r.expert * x.n_experts + r.pair * k + r.const
    )
    average = (block * (shape.n_layers - x.sparse_layers) + sparse * x.sparse_layers) / shape.n_layers
    return average, max(block, sparse), head


def activation_bytes(shape: ActivationShape, micro_batch: int, seq_len: int, dtype: str, checkpointing: bool) -> float:
    """Peak activation memory of one micro-batch's forward and backward on one device, in bytes."""
    return stage_activation_bytes(shape, micro_batch, seq_len, dtype, checkpointing, Split(), 0)


@dataclass(frozen=True)
class Split:
    """The model's split besides data parallelism (train/parallel/): tp, pp and the pipeline schedule."""

    tp: int = 1
    pp: int = 1
    ep: int = 1  # expert parallelism: each sparse layer's experts over ep of the data-parallel devices
    stages_per_rank: int = 1
    schedule: str = "1f1b"  # gpipe | 1f1b | interleaved_1f1b
    microbatches: int = 1  # pipeline micro-batches per step


def stage_params(shape: ActivationShape, split: Split, pp_rank: int) -> float:
    """Parameters held by one device of pipeline rank `pp_rank` (tensor-parallel shard included)."""
    d, v, L = shape.d_model, shape.vocab_size, shape.n_layers
    table = v * d
    head = d + table  # final norm and output head (the table itself when tied)
    block = (shape.matmul_params - head) / L
    norms = shape.block_norm_params or 2 * d
    embedding = 0 if shape.tie_embeddings else table
    if split.pp > 1:
        embedding = embedding if pp_rank == 0 else 0
        head = head if pp_rank == split.pp - 1 else 0
    blocks = L / split.pp * ((block - norms) / split.tp + norms)
    return blocks + embedding / split.tp + (head - d) / split.tp + (d if head else 0)


def in_flight_chunks(split: Split, pp_rank: int) -> int:
    """Chunks (n_layers / (pp x stages_per_rank) blocks, one micro-batch) whose activations a rank holds at once."""
    n, pp, v = split.microbatches, split.pp, split.stages_per_rank
    if pp == 1:
        return 1
    if split.schedule == "gpipe":
        return n
    if split.schedule == "1f1b":
        return min(n, pp - pp_rank)
    per_round = n // max(1, n // pp)  # torch's ScheduleInterleaved1F1B warm-up, then one forward per backward
    return min((v - 1) * per_round + 2 * (pp - 1 - pp_rank) + 1, n * v)


def stage_activation_bytes(
    shape: ActivationShape, micro_batch: int, seq_len: int, dtype: str, checkpointing: bool, split: Split, pp_rank: int
) -> float:
    """Peak activation memory of one device of pipeline rank `pp_rank` during a step, in bytes."""
    c = ACTIVATION_COEFFICIENTS[dtype]
    block, largest, head = _per_token(shape, c, seq_len, dtype)
    if split.tp > 1:
        gathered = 2 * (2 if dtype == "bf16" else 4) * shape.d_model
        block, largest = ((b - gathered) / split.tp + gathered for b in (block, largest))
    loss = 0.0
    if pp_rank == split.pp - 1:  # GPipe's last stage keeps every micro-batch's loss inputs until its backwards
        heads = split.microbatches if split.pp > 1 and split.schedule == "gpipe" else 1
        # The loss backward is where a step peaks: the logits' gradients join what is saved.
        loss = heads * head + c.logit_buffers * shape.vocab_size
    chunk_layers = shape.n_layers / (split.pp * split.stages_per_rank)
    chunks = in_flight_chunks(split, pp_rank)
    if checkpointing:
        per_token = chunks * chunk_layers * RESIDUAL_BYTES * shape.d_model / split.tp + max(loss, largest)
    else:
        per_token = chunks * chunk_layers * block + loss
    matmul = shape.matmul_params
    if shape.experts is not None:  # a device casts only the experts it holds
        matmul -= shape.experts.params * (1 - 1 / split.ep)
    weights = c.weight_copy * matmul / (split.tp * split.pp)
    return micro_batch * seq_len * per_token + weights


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


def memory_table(
    num_params: float,
    devices: int,
    state_bytes: str,
    shape: ActivationShape | None,
    micro_batch: int,
    seq_len: int,
    dtype: str,
    split: Split = Split(),
) -> list[DeviceMemory]:
    """Memory per device under every strategy over `devices` data-parallel devices (each also split by
    `split`); activations only when the model's shape is known. Each figure is the largest pipeline stage's."""
    stages = range(split.pp)
    params = num_params
    if split.tp > 1 or split.pp > 1:
        if shape is None:
            raise ValueError("tensor or pipeline parallel memory needs the model's shape")
        params = max(stage_params(shape, split, r) for r in stages)
    experts = 0.0 if shape is None or shape.experts is None else shape.experts.params / split.pp
    acts = ckpt = None
    if shape is not None:
        acts = max(stage_activation_bytes(shape, micro_batch, seq_len, dtype, False, split, r) for r in stages)
        ckpt = max(stage_activation_bytes(shape, micro_batch, seq_len, dtype, True, split, r) for r in stages)
    return [
        DeviceMemory(s, model_states(params, devices, s, state_bytes, experts, split.ep), acts, ckpt)
        for s in STRATEGIES
    ]
