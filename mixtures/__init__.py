"""mixtures: YAML mixtures of shard sets and the deterministic, resumable sequence sampler.

    from pretrainkit.mixtures import load_mixture, MixtureSampler, TrainLoader
    mix = load_mixture("mixtures/examples/demo.yaml")
    sampler = MixtureSampler(mix, seq_len=256, global_batch_size=32)
    loader = TrainLoader(sampler, rank=0, world_size=1, micro_size=8)

Modules: `config` (YAML schema), `holdout` (validation split), `schedule` (interleaving of
sources), `stream` (packing one source), `mixture` (loaded mixture, replay starts), `sampler`
(global order), `loader` (PyTorch loader and its state), `inspect` and `cli` (`ptk mix inspect`).
"""

from pretrainkit.mixtures.mixture import Mixture, Source, StreamStart, load_mixture

__all__ = ["Mixture", "MixtureSampler", "Source", "StreamStart", "TrainLoader", "load_mixture"]


def __getattr__(name: str):
    # The torch-backed classes load on first use, so that `ptk` starts without importing torch.
    if name == "MixtureSampler":
        from pretrainkit.mixtures.sampler import MixtureSampler

        return MixtureSampler
    if name == "TrainLoader":
        from pretrainkit.mixtures.loader import TrainLoader

        return TrainLoader
    raise AttributeError(f"module 'mixtures' has no attribute {name!r}")
