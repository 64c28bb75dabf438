"""shards: zstd Arrow IPC and WebDataset token shards, their manifest, readers and checks; the
tokenizer that gives their tokens (`tokenizer`, for dataprep and train alike); shard sets in a bucket
copied whole or streamed one record batch at a time (`streamed`).

from pretrainkit.shards import ShardSet, write_shards
ss = ShardSet.open("shards/")
"""

from pretrainkit.shards.reader import ShardSet
from pretrainkit.shards.writer import ShardWriter, write_shards

__all__ = ["ShardSet", "ShardWriter", "write_shards"]
