"""The training config: one YAML file validated into dataclasses, with `--set key.path=value` overrides.

    cfg = load_config("run.yaml", overrides=["optim.lr=1e-3", "parallel=fsdp"])
    cfg.optim.lr, cfg.model.d_model, cfg.batch.global_size

Unknown keys, wrong types and impossible values raise `UserError` naming the file and the key
(`run.yaml: optim.schedule: must be one of cosine, wsd, got 'linear'`). Relative paths (`run_dir`,
`data.mixture`, `eval.tokenizer`, each `eval.tasks[i].path`) written in the file are relative to the
file; those given with `--set` are relative to the current directory. `load_config` also reads the
task files and the tokenizer `eval` names (train/task_files.py), so a bad one stops the run
before it starts. `to_dict(cfg)` is the resolved config written to `RUN_DIR/config.yaml`.
"""

from __future__ import annotations

import dataclasses
import os
import re
import typing
from argparse import ArgumentTypeError
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pretrainkit.errors import UserError, quoted, shortened
from pretrainkit.quantities import config_number, quantity
from pretrainkit.remote.urls import is_url
from pretrainkit.shards.set_copies import ShardCache
from pretrainkit.user_yaml import DuplicateKeyError, load_user_yaml, read_user_yaml

SCHEDULES = ("cosine", "wsd")
DATA_PARALLEL_MODES = ("ddp", "zero1", "zero2", "fsdp", "hsdp")
PP_SCHEDULES = ("gpipe", "1f1b", "interleaved_1f1b")
PRECISIONS = ("fp32", "bf16")
DEVICES = ("auto", "cpu", "cuda")
SPIKE_ACTIONS = ("none", "skip", "rollback")
WANDB_MODES = ("offline", "online")
PATH_KEYS = (("run_dir",), ("data", "mixture"), ("init_from",), ("data", "cache", "dir"), ("eval", "tokenizer"))
# Names a task may not take: its `NAME/acc` would land among the trackers' own groups.
RESERVED_TASK_NAMES = ("train", "val_loss", "spikes")


@dataclass
class CacheConfig:
    """The local cache of shard sets in a bucket (shards/streamed.py): the explicit
    form of `PTK_CACHE_DIR` and `PTK_SHARD_CACHE_BYTES`, which stay the defaults of unset keys. Given
    to the mixture as `shard_cache()`, whose shard sets carry it into the loader's workers."""

    dir: str | None = None
    max_bytes: str | None = None  # a size in bytes, K/M/G suffixes allowed: 2000000000, 50G

    def shard_cache(self) -> ShardCache:
        return ShardCache.configured(self.dir, self.max_bytes)


@dataclass
class DataConfig:
    mixture: str
    seq_len: int = 512
    # Resume although the mixture changed since the checkpoint (weights, sources): each source then
    # continues where it stopped, and the new order starts at the saved batch.
    allow_mixture_change: bool = False
    # Each packed document attends only to itself, RoPE positions restarting at its start, and the
    # target of the EOS ending it is not trained on (train/loop/documents.py). False for configs that
    # do not say (they keep training as they did); `ptk init` writes true.
    document_masking: bool = False
    cache: CacheConfig = field(default_factory=CacheConfig)


@dataclass
class ModelSection:
    """The settable keys of `ModelConfig` (train/model/llama.py); an unset key (None) takes ModelConfig's default,
    or a Hugging Face init_from's config.json value (train/model/resolve.py)."""

    d_model: int | None = None
    n_layers: int | None = None
    n_heads: int | None = None
    n_kv_heads: int | None = None
    ffn_hidden: int | None = None
    tie_embeddings: bool | None = None
    rope_theta: float | None = None
    head_dim: int | None = None
    qkv_bias: bool | None = None
    norm_eps: float | None = None
    rope_scaling: dict | None = None
    family: str | None = None
    # Gemma's attention window (families gemma2, gemma3): one of full_attention / sliding_attention per layer.
    sliding_window: int | None = None
    layer_types: tuple[str, ...] | None = None
    rope_local_theta: float | None = None
    query_scale: int | None = None
    final_softcap: float | None = None
    attn_softcap: float | None = None
    # A mixture of experts (families qwen3_moe, olmoe, mixtral; train/model/moe.py).
    n_experts: int | None = None
    experts_per_token: int | None = None
    moe_ffn_dim: int | None = None
    norm_topk_prob: bool | None = None
    mlp_only_layers: tuple[int, ...] | None = None
    decoder_sparse_step: int | None = None
    router_aux_loss_coef: float | None = None


@dataclass
class ParallelConfig:
    """The layout: `parallel: fsdp` is `parallel: {data: fsdp}`; the data-parallel size is what tp x pp leave."""

    data: str = "ddp"  # ddp | zero1 | zero2 | fsdp | hsdp (dp_replicate x dp_shard)
    tp: int = 1
    pp: int = 1
    dp_replicate: int = 1  # hsdp: replicas (across nodes); each shards over data-parallel size / dp_replicate
    ep: int = 1  # expert parallel: each sparse layer's experts split over ep of the data-parallel shard ranks
    pp_schedule: str = "1f1b"
    pp_microbatches: int | None = None  # None: the accumulation micro-batches
    stages_per_rank: int | None = None  # None: 2 under interleaved_1f1b, else 1

    @property
    def stages(self) -> int:
        if self.stages_per_rank is not None:
            return self.stages_per_rank
        return 2 if self.pp_schedule == "interleaved_1f1b" else 1


@dataclass
class BatchConfig:
    global_size: int = 32  # sequences per optimizer step, over all processes
    micro_size: int = 8  # sequences per forward/backward on one process


@dataclass
class OptimConfig:
    lr: float = 3e-4
    min_lr: float = 3e-5
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 100
    schedule: str = "cosine"
    decay_fraction: float = 0.2  # wsd: the last fraction of max_steps decays linearly to min_lr
    clip: float = 1.0  # global grad-norm bound; 0 disables clipping (the norm is still logged)


@dataclass
class CheckpointConfig:
    every: int = 0  # steps between checkpoints; 0: only at the end
    keep: int = 2


@dataclass
class TaskConfig:
    """A multiple-choice task scored at each evaluation (train/evaluation/tasks.py): `NAME/acc`, `NAME/acc_norm`."""

    name: str
    path: str  # JSON lines of {context, choices, label} (train/task_files.py)


@dataclass
class EvalConfig:
    every: int = 0  # steps between validation passes; 0: never
    batches: int = 4  # validation batches of batch.global_size sequences, per source
    tasks: tuple[TaskConfig, ...] = ()
    tokenizer: str | None = None  # the mixture's tokenizer.json (or HF directory): how tasks' text is tokenized


@dataclass
class SpikeConfig:
    action: str = "skip"  # none | skip (drop the update) | rollback (last checkpoint, skip the batches)
    window: int = 50  # accepted steps the statistics are taken over
    min_history: int = 10  # steps in the window before loss / grad-norm tests start
    loss_sigmas: float = 6.0
    loss_rise: float = 0.1  # and the loss must exceed the window mean by this fraction of it
    grad_factor: float = 10.0  # grad norm above this multiple of the window median; 0: off
    max_rollbacks: int = 3  # more spikes than this under `rollback` stop the run
    max_consecutive_skips: int = 5  # this many dropped updates in a row stop the run (it has diverged)
    skip_batches: int = 1  # rollback skips this many global batches, ending with the spike's


@dataclass
class WandbConfig:
    project: str
    mode: str = "offline"  # offline: a run dir under RUN_DIR/wandb/ (`wandb sync` uploads it); online
    entity: str | None = None
    name: str | None = None  # the W&B run's display name; default: run_dir's name


@dataclass
class LoggingConfig:
    tensorboard: bool = False  # event files under RUN_DIR/tb/
    wandb: WandbConfig | None = None


@dataclass
class TrainConfig:
    run_dir: str
    data: DataConfig
    max_steps: int
    seed: int = 0
    model: ModelSection = field(default_factory=ModelSection)
    batch: BatchConfig = field(default_factory=BatchConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    parallel: ParallelConfig = field(default_factory=ParallelConfig)
    precision: str = "fp32"
    activation_checkpointing: bool = False
    compile: bool = False
    device: str = "auto"
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    spikes: SpikeConfig = field(default_factory=SpikeConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)
    init_from: str | None = None  # run dir, checkpoint dir or exported model: weights for a fresh run
    init_optimizer: bool = False  # with init_from (a checkpoint): AdamW moments too


def load_config(path: str | os.PathLike, overrides: list[str] = (), read_tasks: bool = True) -> TrainConfig:
    """`read_tasks`: validate the files `eval.tasks` and `eval.tokenizer` name (False for a command that
    only reads a run's data order, such as `ptk trace`, which needs neither)."""
    path = Path(path)
    raw = read_user_yaml(path, "config")
    if not isinstance(raw, dict):
        raise UserError(f"{path}: the config must be a mapping of keys to values")
    _resolve_paths(raw, path.parent)
    _parallel_as_mapping(raw)
    for item in overrides:
        _apply_override(raw, item, path)
    cfg = config_from_dict(raw, str(path))
    if read_tasks:
        check_task_files(cfg, str(path))
    return cfg


def check_task_files(cfg: TrainConfig, where: str) -> None:
    """Every task file read and validated, and the tokenizer loaded: one line naming the key, file and problem."""
    from pretrainkit.shards.tokenizer import load_tokenizer
    from pretrainkit.train.task_files import read_task_file

    for i, task in enumerate(cfg.eval.tasks):
        read_task_file(task.path, f"{where}: eval.tasks[{i}].path")
    if cfg.eval.tokenizer is not None:
        try:
            load_tokenizer(cfg.eval.tokenizer)
        except UserError as e:
            raise UserError(f"{where}: eval.tokenizer: {e}") from None


def config_from_dict(raw: dict, where: str) -> TrainConfig:
    raw = dict(raw)
    _parallel_as_mapping(raw)
    cache = raw.get("data", {}).get("cache") if isinstance(raw.get("data"), dict) else None
    if isinstance(cache, dict) and isinstance(cache.get("max_bytes"), int) and not isinstance(cache["max_bytes"], bool):
        raw["data"] = {**raw["data"], "cache": {**cache, "max_bytes": str(cache["max_bytes"])}}  # a plain byte count
    cfg = _build(TrainConfig, raw, where, "")
    _check_values(cfg, where)
    return cfg


def to_dict(cfg: TrainConfig) -> dict:
    def plain(v: Any) -> Any:
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        if isinstance(v, (tuple, list)):
            return [plain(x) for x in v]
        return v

    return plain(dataclasses.asdict(cfg))


def _resolve_paths(raw: dict, base: Path) -> None:
    for keys in PATH_KEYS:
        node = raw
        for k in keys[:-1]:
            node = node.get(k) if isinstance(node, dict) else None
        if isinstance(node, dict) and isinstance(node.get(keys[-1]), str) and not is_url(node[keys[-1]]):
            node[keys[-1]] = str((base / node[keys[-1]]).resolve())
    if isinstance(raw.get("eval"), dict):
        _resolve_task_paths(raw["eval"].get("tasks"), base)


def _resolve_task_paths(tasks: Any, base: Path) -> None:
    """Each `eval.tasks` entry's `path`, relative to `base` (the config's folder, or the current one for --set)."""
    for task in tasks if isinstance(tasks, list) else ():
        if isinstance(task, dict) and isinstance(task.get("path"), str):
            task["path"] = str((base / task["path"]).resolve())


def _parallel_as_mapping(raw: dict) -> None:
    """The string form `parallel: fsdp` is the mapping `{data: fsdp}`."""
    if isinstance(raw.get("parallel"), str):
        raw["parallel"] = {"data": raw["parallel"]}


def _apply_override(raw: dict, item: str, path: Path) -> None:
    key, sep, text = item.partition("=")
    if not sep or not key:
        raise UserError(f"--set {item}: expected key.path=value")
    keys = key.split(".")
    node = raw
    for k in keys[:-1]:
        node = node.setdefault(k, {})
        if not isinstance(node, dict):
            raise UserError(f"--set {item}: {k} is not a section")
    try:
        value = load_user_yaml(text)
    except DuplicateKeyError as e:
        raise UserError(f"--set {item}: {e.problem}") from None
    except yaml.YAMLError:  # not YAML: the text as it is
        value = text
    if tuple(keys) in PATH_KEYS and isinstance(value, str) and not is_url(value):
        value = str(Path(value).resolve())
    if tuple(keys) == ("eval", "tasks"):
        _resolve_task_paths(value, Path.cwd())
    node[keys[-1]] = value
    _parallel_as_mapping(raw)


def _build(cls: type, raw: Any, where: str, prefix: str) -> Any:
    if not isinstance(raw, dict):
        raise UserError(f"{where}: {prefix.rstrip('.') or 'config'}: must be a mapping")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    for k in raw:
        if k not in names:
            raise UserError(f"{where}: {prefix}{shortened(str(k))}: unknown key (known: {', '.join(sorted(names))})")
    values = {}
    for f in dataclasses.fields(cls):
        key = prefix + f.name
        if f.name not in raw:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise UserError(f"{where}: {key}: required key is missing")
            continue
        values[f.name] = _coerce(hints[f.name], raw[f.name], where, key)
    return cls(**values)


def _coerce(tp: Any, v: Any, where: str, key: str) -> Any:
    if dataclasses.is_dataclass(tp):
        return _build(tp, v, where, key + ".")
    args = typing.get_args(tp)
    if type(None) in args:  # Optional[X]
        return None if v is None else _coerce(next(a for a in args if a is not type(None)), v, where, key)
    if typing.get_origin(tp) is tuple and args[-1] is Ellipsis:  # tuple[X, ...]: a list of any length
        if not isinstance(v, (list, tuple)):
            raise UserError(f"{where}: {key}: expected a list, got {quoted(v)}")
        return tuple(_coerce(args[0], x, where, f"{key}[{i}]") for i, x in enumerate(v))
    if typing.get_origin(tp) is tuple:
        if not isinstance(v, (list, tuple)) or len(v) != len(args):
            raise UserError(f"{where}: {key}: expected a list of {len(args)} values, got {quoted(v)}")
        return tuple(_coerce(a, x, where, f"{key}[{i}]") for i, (a, x) in enumerate(zip(args, v)))
    if tp is bool:
        if isinstance(v, bool):
            return v
    elif tp is int:
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    elif tp is float:
        if (number := config_number(v)) is not None:
            return number
    elif tp is str:
        if isinstance(v, str):
            return v
    elif tp is dict:
        if isinstance(v, dict):
            return v
    raise UserError(f"{where}: {key}: expected {getattr(tp, '__name__', tp)}, got {quoted(v)}")


def _check_values(cfg: TrainConfig, where: str) -> None:
    def require(ok: bool, key: str, msg: str) -> None:
        if not ok:
            raise UserError(f"{where}: {key}: {msg}")

    def choice(key: str, value: str, allowed: tuple[str, ...]) -> None:
        require(value in allowed, key, f"must be one of {', '.join(allowed)}, got {quoted(value)}")

    if cfg.data.cache.max_bytes is not None:
        try:
            size = quantity(cfg.data.cache.max_bytes)
        except ArgumentTypeError:
            size = 0
        require(
            size >= 1,
            "data.cache.max_bytes",
            f"must be a size in bytes (K/M/G suffixes), e.g. 50G; got {quoted(cfg.data.cache.max_bytes)}",
        )
    p = cfg.parallel
    choice("parallel.data", p.data, DATA_PARALLEL_MODES)
    choice("parallel.pp_schedule", p.pp_schedule, PP_SCHEDULES)
    choice("precision", cfg.precision, PRECISIONS)
    choice("device", cfg.device, DEVICES)
    choice("optim.schedule", cfg.optim.schedule, SCHEDULES)
    choice("spikes.action", cfg.spikes.action, SPIKE_ACTIONS)
    if cfg.logging.wandb is not None:
        choice("logging.wandb.mode", cfg.logging.wandb.mode, WANDB_MODES)
    for key in (
        "max_steps",
        "data.seq_len",
        "batch.global_size",
        "batch.micro_size",
        "checkpoint.keep",
        "eval.batches",
        "spikes.window",
        "spikes.skip_batches",
        "spikes.max_consecutive_skips",
        "parallel.tp",
        "parallel.pp",
        "parallel.dp_replicate",
        "parallel.ep",
    ):
        require(_get(cfg, key) >= 1, key, f"must be >= 1, got {_get(cfg, key)}")
    for key in (
        "optim.warmup_steps",
        "checkpoint.every",
        "eval.every",
        "seed",
        "optim.weight_decay",
        "optim.clip",
        "optim.min_lr",
        "spikes.min_history",
        "spikes.loss_sigmas",
        "spikes.loss_rise",
        "spikes.grad_factor",
        "spikes.max_rollbacks",
    ):
        require(_get(cfg, key) >= 0, key, f"must be >= 0, got {_get(cfg, key)}")
    require(cfg.optim.lr > 0, "optim.lr", f"must be > 0, got {cfg.optim.lr}")
    require(cfg.optim.min_lr <= cfg.optim.lr, "optim.min_lr", f"must be <= optim.lr ({cfg.optim.lr})")
    require(all(0 <= b < 1 for b in cfg.optim.betas), "optim.betas", f"must lie in [0, 1), got {cfg.optim.betas}")
    require(0 <= cfg.optim.decay_fraction <= 1, "optim.decay_fraction", "must lie in [0, 1]")
    require(cfg.optim.warmup_steps <= cfg.max_steps, "optim.warmup_steps", f"must be <= max_steps ({cfg.max_steps})")
    if cfg.optim.schedule == "wsd":
        decay = round(cfg.optim.decay_fraction * cfg.max_steps)
        after_warmup = cfg.max_steps - cfg.optim.warmup_steps
        require(
            decay <= after_warmup,
            "optim.decay_fraction",
            f"the decay phase ({decay} steps) is longer than the {after_warmup} steps after warmup "
            f"(max_steps {cfg.max_steps} - optim.warmup_steps {cfg.optim.warmup_steps}); "
            "decay would start inside warmup",
        )
    # A deque of `window` accepted steps never holds more: detection would be silently off.
    require(
        cfg.spikes.min_history <= cfg.spikes.window,
        "spikes.min_history",
        f"must be <= spikes.window ({cfg.spikes.window}), got {cfg.spikes.min_history}",
    )
    require(cfg.init_from is not None or not cfg.init_optimizer, "init_optimizer", "needs init_from")
    _check_tasks(cfg, require)
    require(
        cfg.batch.global_size % cfg.batch.micro_size == 0,
        "batch.global_size",
        f"must be a multiple of batch.micro_size ({cfg.batch.micro_size})",
    )
    require(p.stages >= 1, "parallel.stages_per_rank", f"must be >= 1, got {p.stages}")
    require(
        p.pp_microbatches is None or p.pp_microbatches >= 1,
        "parallel.pp_microbatches",
        f"must be >= 1, got {p.pp_microbatches}",
    )
    require(p.dp_replicate == 1 or p.data == "hsdp", "parallel.dp_replicate", f"needs data: hsdp, got {p.data!r}")
    # The experts outside an ep group are FSDP-sharded over the other data-parallel ranks (train/parallel/expert.py);
    # DDP would all-reduce every rank's different experts together.
    require(
        p.ep == 1 or p.data in ("zero2", "fsdp", "hsdp"),
        "parallel.ep",
        f"needs data: fsdp, zero2 or hsdp (the experts are FSDP-sharded), got {p.data!r}",
    )
    require(p.ep == 1 or p.tp == 1, "parallel.ep", f"does not compose with parallel.tp ({p.tp}); use tp: 1")
    require(p.ep == 1 or p.pp == 1, "parallel.ep", f"does not compose with parallel.pp ({p.pp}); use pp: 1")
    require(
        p.stages == 1 or p.pp_schedule == "interleaved_1f1b",
        "parallel.stages_per_rank",
        f"more than one stage per rank needs pp_schedule: interleaved_1f1b, got {p.pp_schedule!r}",
    )
    require(
        p.stages >= 2 or p.pp_schedule != "interleaved_1f1b",
        "parallel.stages_per_rank",
        "interleaved_1f1b needs at least 2 stages per rank",
    )


def _check_tasks(cfg: TrainConfig, require: Callable[[bool, str, str], None]) -> None:
    tasks = cfg.eval.tasks
    if not tasks:
        return
    require(cfg.eval.every >= 1, "eval.tasks", "are scored at each evaluation: set eval.every >= 1")
    require(cfg.eval.tokenizer is not None, "eval.tokenizer", "required with eval.tasks (the mixture's tokenizer.json)")
    require(
        cfg.parallel.pp == 1, "eval.tasks", f"not supported under pipeline parallelism (parallel.pp {cfg.parallel.pp})"
    )
    seen = set()
    for i, task in enumerate(tasks):
        key = f"eval.tasks[{i}].name"
        require(
            re.fullmatch(r"[A-Za-z0-9_.-]+", task.name) is not None,
            key,
            f"letters, digits, '_', '.' and '-' only (it becomes NAME/acc), got {quoted(task.name)}",
        )
        require(task.name not in RESERVED_TASK_NAMES, key, f"{task.name!r} is reserved (the trackers' own group)")
        require(task.name not in seen, key, f"{task.name!r} is given twice")
        seen.add(task.name)


def _get(cfg: TrainConfig, key: str) -> Any:
    obj: Any = cfg
    for k in key.split("."):
        obj = getattr(obj, k)
    return obj
