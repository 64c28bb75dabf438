"""The run's one device mesh: named dimensions (pp, dp_replicate, dp_shard, tp), built once, and the layout checks.

    layout = layout_of(cfg.parallel, world_size=8, where="run.yaml")   # Layout(pp=2, dp_replicate=1, dp_shard=2, tp=2)
    mesh = ParallelMesh(layout, data="fsdp", device_type="cuda")
    mesh.dp_rank, mesh.dp_size     # which rows of the global batch this process trains on
    mesh.tp_mesh, mesh.dp_mesh     # what tensor parallelism and FSDP are applied over; mesh.pp_group
    mesh.ep_mesh, mesh.expert_dp_mesh  # under parallel.ep: what the experts are split over, and FSDP-sharded over

The data-parallel size is what `tp x pp` leave of the world size; under `hsdp` it is `dp_replicate`
replicas of `dp_shard` shards, under every other data mode `dp_shard` (ZeRO and FSDP shard over all
of it; DDP replicates over it). Ranks are laid out with tp innermost (tensor-parallel peers are
neighbours, so on one node they share the fastest links), then dp_shard, dp_replicate, pp.

Expert parallelism borrows its ranks from `dp_shard`, as torchtitan and OLMo-core do: `dp_shard` is
also seen as `dp_shard_mod_ep x ep` (ep innermost, `mesh.expert_mesh`), so the ep ranks still train on
different rows, every other parameter is FSDP-sharded over all of `dp_shard` as before, and each
expert over `dp_shard_mod_ep` (with `dp_replicate` under hsdp): the ranks outside its ep group.

Every process of one data-parallel group (same dp coordinates, any tp or pp coordinate) reads that
group's rows of the global batch; the token count and the loss are taken from one process per group
(`counts_batch`), so tensor-parallel peers and pipeline stages are not counted twice.
Impossible layouts are `UserError`s naming the key and the divisor, before any process group is split.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.distributed as dist
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from pretrainkit.errors import UserError
from pretrainkit.train.config import ParallelConfig, TrainConfig
from pretrainkit.train.model.llama import ModelConfig

MESH_DIMS = ("pp", "dp_replicate", "dp_shard", "tp")
FSDP_MODES = ("zero2", "fsdp", "hsdp")  # the data modes built on FSDP2


@dataclass(frozen=True)
class Layout:
    pp: int
    dp_replicate: int
    dp_shard: int
    tp: int
    ep: int = 1  # of dp_shard: the ranks each sparse layer's experts are split over

    @property
    def dp(self) -> int:
        return self.dp_replicate * self.dp_shard

    @property
    def world_size(self) -> int:
        return self.pp * self.dp * self.tp


def layout_of(p: ParallelConfig, world_size: int, where: str) -> Layout:
    """The mesh shape of `parallel` on `world_size` processes; UserError naming the numbers if it does not divide."""
    split = p.tp * p.pp
    if world_size % split:
        raise UserError(
            f"{where}: parallel: tp x pp = {p.tp} x {p.pp} = {split} does not divide the {world_size} processes"
        )
    dp = world_size // split
    if dp % p.dp_replicate:
        raise UserError(
            f"{where}: parallel.dp_replicate: {p.dp_replicate} does not divide the data-parallel size "
            f"{dp} (= {world_size} processes / tp {p.tp} / pp {p.pp})"
        )
    if dp > 1 and p.data in ("ddp", "zero1") and split > 1:
        raise UserError(
            f"{where}: parallel.data: {p.data} does not compose with tp or pp over {dp} data-parallel "
            f"groups (DDP cannot hold split weights); use fsdp, zero2 or hsdp"
        )
    dp_shard = dp // p.dp_replicate
    if dp_shard % p.ep:
        raise UserError(
            f"{where}: parallel.ep: {p.ep} does not divide the data-parallel shard size {dp_shard} "
            f"(= {world_size} processes / tp {p.tp} / pp {p.pp} / dp_replicate {p.dp_replicate})"
        )
    return Layout(pp=p.pp, dp_replicate=p.dp_replicate, dp_shard=dp_shard, tp=p.tp, ep=p.ep)


def check_layout(cfg: TrainConfig, model: ModelConfig, world_size: int, where: str) -> tuple[Layout, int]:
    """Every layout check at once: the mesh shape, the model's split and the batch's; the layout and
    the micro-batches per step of one data-parallel group."""
    check_model_split(cfg.parallel, model, where)
    layout = layout_of(cfg.parallel, world_size, where)
    return layout, pipeline_microbatches(cfg, layout, where)


def check_model_split(p: ParallelConfig, model: ModelConfig, where: str) -> None:
    """Heads, kv heads and the FFN width must split over tp; layers over pp x stages_per_rank."""
    for key, value in (
        ("model.n_heads", model.n_heads),
        ("model.n_kv_heads", model.kv_heads),
        ("model.ffn_hidden", model.ffn_hidden_size),
    ):
        if value % p.tp:
            raise UserError(f"{where}: {key}: {value} does not split over parallel.tp = {p.tp}")
    if p.ep > 1 and (model.n_experts is None or model.n_experts % p.ep):
        raise UserError(
            f"{where}: model.n_experts: {model.n_experts} does not split over parallel.ep = {p.ep}"
            + (" (a dense model has no experts)" if model.n_experts is None else "")
        )
    if p.tp > 1 and model.n_experts is not None:
        raise UserError(
            f"{where}: parallel.tp: {p.tp} does not split a mixture of experts (model.n_experts: "
            f"{model.n_experts}); use tp: 1 with ddp, zero or fsdp"
        )
    if p.pp > 1 and model.n_experts is not None:  # its aux loss pools the routing of every stage's layers
        raise UserError(
            f"{where}: parallel.pp: {p.pp} cannot compute the routers' load-balancing loss, which pools every "
            f"sparse layer's routing, across pipeline stages (model.n_experts: {model.n_experts}); use pp: 1"
        )
    stages = p.pp * p.stages
    if model.n_layers % stages:
        raise UserError(
            f"{where}: model.n_layers: {model.n_layers} does not split into parallel.pp x "
            f"stages_per_rank = {p.pp} x {p.stages} = {stages} pipeline stages"
        )
    if p.pp > 1 and model.tie_embeddings:
        raise UserError(
            f"{where}: model.tie_embeddings: the embedding and the output head live on different "
            f"pipeline stages under parallel.pp = {p.pp}; set model.tie_embeddings: false"
        )


def pipeline_microbatches(cfg: TrainConfig, layout: Layout, where: str) -> int:
    """Micro-batches per step in one data-parallel group; under pp, what the pipeline schedule runs."""
    p, b = cfg.parallel, cfg.batch
    if b.global_size % (b.micro_size * layout.dp):
        raise UserError(
            f"{where}: batch.global_size: {b.global_size} is not a multiple of batch.micro_size x "
            f"data-parallel groups ({b.micro_size} x {layout.dp})"
        )
    rows = b.global_size // layout.dp
    n = p.pp_microbatches or rows // b.micro_size
    if rows % n:
        raise UserError(
            f"{where}: parallel.pp_microbatches: {n} does not divide the {rows} rows of a "
            f"data-parallel group (batch.global_size {b.global_size} / {layout.dp} groups)"
        )
    if p.pp > 1 and p.pp_schedule != "gpipe" and n < p.pp:
        raise UserError(
            f"{where}: parallel.pp_microbatches: {p.pp_schedule} needs at least pp = {p.pp} "
            f"micro-batches per step, got {n} (batch.global_size / (batch.micro_size x {layout.dp}))"
        )
    rounds = max(1, n // p.pp)  # torch's interleaved schedule runs the micro-batches in rounds of about pp
    if p.pp > 1 and p.pp_schedule == "interleaved_1f1b" and n % rounds:
        raise UserError(
            f"{where}: parallel.pp_microbatches: interleaved_1f1b runs {n} micro-batches in {rounds} "
            f"rounds (micro-batches // pp {p.pp}), which must divide them"
        )
    return n


class ParallelMesh:
    """The named DeviceMesh and this process's coordinates on it.

    Only the dimensions of size > 1 are built (and `dp_shard` whenever FSDP needs a mesh), as
    torchtitan does: a mesh of one dimension over every process is the default process group
    itself, while each extra dimension adds a process group per slice, each with its own threads.
    """

    def __init__(self, layout: Layout, data: str, device_type: str) -> None:
        self.layout, self.data = layout, data
        sizes = dict(zip(MESH_DIMS, (layout.pp, layout.dp_replicate, layout.dp_shard, layout.tp)))
        self.dims = tuple(d for d in MESH_DIMS if sizes[d] > 1 or (d == "dp_shard" and data in FSDP_MODES))
        self.dims = self.dims or ("dp_shard",)
        self.mesh: DeviceMesh = init_device_mesh(
            device_type, tuple(sizes[d] for d in self.dims), mesh_dim_names=self.dims
        )
        # Under expert parallelism (which needs FSDP, so dp_shard is built): dp_shard seen as its two
        # factors, ep innermost, on the same devices; FSDP shards the experts over the first even when it
        # has one rank.
        self.expert_mesh: DeviceMesh | None = None
        if layout.ep > 1:
            factors, names = (layout.dp_shard // layout.ep, layout.ep), ("dp_shard_mod_ep", "ep")
            self.expert_mesh = self.mesh._unflatten("dp_shard", factors, names)
        self.pp_rank = self._local_rank("pp")
        self.tp_rank = self._local_rank("tp")
        self.dp_rank = self._local_rank("dp_replicate") * layout.dp_shard + self._local_rank("dp_shard")

    def _local_rank(self, dim: str) -> int:
        return self.mesh.get_local_rank(dim) if dim in self.dims else 0

    @property
    def dp_size(self) -> int:
        return self.layout.dp

    @property
    def tp_mesh(self) -> DeviceMesh:
        return self.mesh["tp"]

    @property
    def dp_mesh(self) -> DeviceMesh:
        """FSDP's mesh: 2-D (replicate, shard) under hsdp, else the shard dimension."""
        return self.mesh["dp_replicate", "dp_shard"] if "dp_replicate" in self.dims else self.mesh["dp_shard"]

    @property
    def ep_mesh(self) -> DeviceMesh:
        return self.expert_mesh["ep"]

    @property
    def expert_dp_mesh(self) -> DeviceMesh:
        """FSDP's mesh for the experts under expert parallelism: the data-parallel ranks outside an ep group."""
        if "dp_replicate" in self.dims:
            return self.expert_mesh["dp_replicate", "dp_shard_mod_ep"]
        return self.expert_mesh["dp_shard_mod_ep"]

    @property
    def pp_group(self) -> dist.ProcessGroup:
        return self.mesh.get_group("pp")

    @property
    def counts_batch(self) -> bool:
        """The one process of its data-parallel group whose token count (and, on the last stage, loss) is summed."""
        return self.tp_rank == 0 and self.pp_rank == self.layout.pp - 1
