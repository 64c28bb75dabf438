"""verify and open refuse damaged or partial shard sets, naming each bad file."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pretrainkit.errors import UserError
from pretrainkit.shards import ShardSet, write_shards
from pretrainkit.shards.verify import verify_shards
from pretrainkit.shards.writer import prepare_output_dir, write_shard


@pytest.fixture()
def shard_dir(tmp_path, wikitext_docs):
    ss = write_shards(wikitext_docs, tmp_path / "s", vocab_size=257, eos_id=256, shard_tokens=100_000)
    assert len(ss.manifest["shards"]) >= 3
    return ss.path


def _shard(shard_dir, i):
    return shard_dir / f"shard-{i:05d}.arrow"


def test_whole_set_verifies(shard_dir):
    assert verify_shards(shard_dir) == [] and ShardSet.open(shard_dir).verify() == []


def test_truncated_flipped_and_missing_shards_are_each_named(shard_dir):
    data = _shard(shard_dir, 0).read_bytes()
    _shard(shard_dir, 0).write_bytes(data[: len(data) // 2])
    flipped = bytearray(_shard(shard_dir, 1).read_bytes())
    flipped[len(flipped) // 2] ^= 0x01
    _shard(shard_dir, 1).write_bytes(bytes(flipped))
    _shard(shard_dir, 2).unlink()
    problems = verify_shards(shard_dir)
    assert len(problems) == 3
    assert "shard-00000.arrow: truncated" in problems[0]
    assert "shard-00001.arrow: altered" in problems[1]
    assert "shard-00002.arrow: missing" in problems[2]


def test_open_refuses_truncated_and_missing_shards(shard_dir):
    data = _shard(shard_dir, 1).read_bytes()
    _shard(shard_dir, 1).write_bytes(data[:-10])
    with pytest.raises(UserError, match="shard-00001.arrow.*truncated"):
        ShardSet.open(shard_dir)
    _shard(shard_dir, 1).unlink()
    with pytest.raises(UserError, match="shard-00001.arrow.*missing"):
        ShardSet.open(shard_dir)


def test_open_refuses_missing_or_invalid_manifest(shard_dir):
    manifest = shard_dir / "manifest.json"
    manifest.write_text('{"format": "arrow"')
    with pytest.raises(UserError, match="manifest.json: not a readable manifest"):
        ShardSet.open(shard_dir)
    manifest.write_text(
        '{"format": "parquet", "version": 1, "dtype": "uint16", "tokenizer": {}, "shards": [], "totals": {}}'
    )
    with pytest.raises(UserError, match="manifest.json: key 'format'"):
        ShardSet.open(shard_dir)
    manifest.write_text(
        json.dumps(
            {"format": "x" * 10**6, "version": 1, "dtype": "uint16", "tokenizer": {}, "shards": [], "totals": {}}
        )
    )
    with pytest.raises(UserError, match=r"key 'format' is 'xxx.*…\(1000002 chars\), expected one of") as e:
        ShardSet.open(shard_dir)
    assert len(str(e.value)) < 400
    manifest.unlink()
    with pytest.raises(UserError, match="manifest.json: missing"):
        ShardSet.open(shard_dir)


def test_interrupted_write_leaves_nothing_a_reader_accepts(shard_dir, wikitext_docs):
    """A failed rewrite removes the old manifest first and leaves no complete-looking shard."""
    docs = [np.asarray(d, dtype=np.uint16) for d in wikitext_docs[:300]]
    lengths = np.array([len(d) for d in docs])
    flat = np.concatenate(docs)
    offsets = np.concatenate(([0], np.cumsum(lengths)))

    def read_docs(a, b):  # the writing process dies after its first batches
        if a > 100:
            raise KeyboardInterrupt
        return [str(i) for i in range(a, b)], flat[offsets[a] : offsets[b]]

    prepare_output_dir(shard_dir)
    with pytest.raises(KeyboardInterrupt):
        write_shard(shard_dir, 0, "arrow", np.uint16, 2048, lengths, read_docs)
    assert not (shard_dir / "manifest.json").exists()
    assert not [p for p in shard_dir.iterdir() if ".tmp-" in p.name]
    with pytest.raises(UserError, match="missing"):
        ShardSet.open(shard_dir)
    with pytest.raises(UserError, match="missing"):
        verify_shards(shard_dir)


def test_a_shard_file_the_manifest_does_not_list_is_named(shard_dir):
    """A stray shard (an earlier, larger run's, or copied in) is not part of the set: verify says so."""
    extra = shard_dir / "shard-00099.arrow"
    extra.write_bytes(_shard(shard_dir, 0).read_bytes())
    problems = verify_shards(shard_dir)
    assert problems == [f"{extra}: not listed in the manifest"]
