"""mixtures: YAML mixtures of shard sets and the deterministic, resumable sequence sampler."""
