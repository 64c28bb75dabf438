"""shards: zstd Arrow IPC and WebDataset token shards, their manifest, readers and checks."""
