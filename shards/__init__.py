"""shards: zstd Arrow IPC and WebDataset token shards, their manifest, readers and checks.

    from shards import ShardSet, write_shards
    ss = ShardSet.open("shards/")
"""

from shards.reader import ShardSet
from shards.writer import ShardWriter, write_shards

__all__ = ["ShardSet", "ShardWriter", "write_shards"]
