"""Loads a Hugging Face directory as the trainer does (meta device, FSDP2, init, sliced reads) and
reports how much this process's resident memory grew; launched by the tests under torchrun.

    python -m torch.distributed.run --standalone --nproc_per_node 2 tests/train/model/hf_load_worker.py HF_DIR OUT_DIR

Each rank writes OUT_DIR/rank<r>.json: `peak_growth` (bytes: the peak resident set, VmHWM, reset just
before the model is built, minus the resident set then; after the same steps on a tiny model, so that
one-time library set-up is not counted as the model's memory), `local_bytes` (its parameter shards) and
`checksum` (the sum of the full parameters, gathered, to compare with one process).
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from pretrainkit.train.config import ParallelConfig  # noqa: E402
from pretrainkit.train.model.hf_adapter import HFWeights, model_config_from_hf, read_hf_config  # noqa: E402
from pretrainkit.train.model.llama import ModelConfig, Transformer  # noqa: E402
from pretrainkit.train.model.materialize import init_weights, load_hf_weights  # noqa: E402
from pretrainkit.train.parallel.data_parallel import parallelize  # noqa: E402
from pretrainkit.train.parallel.distributed import DistEnv, exit_process, init_distributed, shutdown  # noqa: E402
from pretrainkit.train.parallel.mesh import ParallelMesh, layout_of  # noqa: E402


def status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def build(cfg: ModelConfig, env: DistEnv) -> torch.nn.Module:
    """As the Trainer builds its model: on the meta device, sharded, then initialized shard by shard."""
    with torch.device("meta"):
        model = Transformer(cfg)
    parallel = ParallelConfig(data="fsdp")
    mesh = ParallelMesh(layout_of(parallel, env.world_size, "hf_load_worker"), parallel.data, env.device.type)
    model = parallelize(model, parallel, mesh, env.device)
    init_weights(model, cfg, seed=0)
    return model


def main() -> None:
    directory, out = Path(sys.argv[1]), Path(sys.argv[2])
    env = init_distributed("cpu")
    cfg = model_config_from_hf(read_hf_config(directory), str(directory))
    build(
        replace(cfg, n_layers=1, vocab_size=64, d_model=64, ffn_hidden=64, head_dim=None, n_heads=8, n_kv_heads=4), env
    )
    Path("/proc/self/clear_refs").write_text("5")  # VmHWM := VmRSS from here on
    before = status_kib("VmRSS")
    model = build(cfg, env)
    load_hf_weights(model, cfg, HFWeights(directory))
    peak = status_kib("VmHWM")
    local = sum(p.to_local().numel() * p.element_size() for p in model.parameters())
    with torch.no_grad():
        checksum = sum(float(p.full_tensor().double().abs().sum()) for p in model.parameters())
    row = {"peak_growth": (peak - before) * 1024, "local_bytes": local, "checksum": checksum}
    (out / f"rank{env.rank}.json").write_text(json.dumps(row))
    shutdown()


if __name__ == "__main__":
    main()
    exit_process(0)
