"""verify and open refuse damaged or partial shard sets, naming each bad file."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from pretrainkit.errors import UserError
from pretrainkit.shards import ShardSet, write_shards
from pretrainkit.shards.arrow_format import LENGTH, TOKENS, decode_record_batch
from pretrainkit.shards.batch_ranges import BatchRanges, sidecar_name
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


def test_each_record_batch_decodes_alone_from_its_sidecar_range_and_sidecars_are_verified(shard_dir):
    """The sidecar's byte ranges, sha256s and lengths describe the shard exactly (what a range read of
    a shard in a bucket relies on), and a damaged, missing or stray sidecar is named by verify."""
    ss = ShardSet.open(shard_dir)
    b = 0
    for entry in ss.manifest["shards"]:
        data = (shard_dir / entry["file"]).read_bytes()
        sidecar = (shard_dir / sidecar_name(entry["file"])).read_bytes()
        assert len(sidecar) == entry["batches"]["bytes"]
        ranges = BatchRanges.decode(sidecar, entry["file"])
        for i in range(ranges.num_batches):
            chunk = data[ranges.offsets[i] : ranges.offsets[i] + ranges.sizes[i]]
            assert hashlib.sha256(chunk).digest() == ranges.sha256[i]
            lengths, tokens = ss.read_batch(b)
            decoded = decode_record_batch(chunk, np.uint16, (LENGTH, TOKENS))
            assert np.array_equal(decoded.column(0).to_numpy(), lengths) and np.array_equal(ranges.lengths(i), lengths)
            assert np.array_equal(decoded.column(1).values.to_numpy(), tokens)
            b += 1
    assert b == ss.batches.num_batches
    first, second = (shard_dir / sidecar_name(_shard(shard_dir, i).name) for i in (0, 1))
    first.write_bytes(first.read_bytes()[:-4] + b"\xff\xff\xff\xff")
    second_bytes = second.read_bytes()
    second.unlink()
    (shard_dir / "shard-00099.arrow.batches").write_bytes(b"stray")
    problems = verify_shards(shard_dir)
    assert [p.replace(str(shard_dir), "S") for p in problems] == [
        "S/shard-00000.arrow.batches: altered: sha256 differs from the manifest",
        "S/shard-00001.arrow.batches: missing",
        "S/shard-00099.arrow.batches: not listed in the manifest",
    ]
    with pytest.raises(UserError, match=r"^x: not a record-batch sidecar \(too short\)$"):
        BatchRanges.decode(b"PTKBATCH", "x")
    with pytest.raises(UserError, match=r"^x: 20 bytes, its header says at least \d+$"):
        BatchRanges.decode(second_bytes[:20], "x")
    with pytest.raises(UserError, match=r"^x: \d+ bytes, its header says \d+$"):
        BatchRanges.decode(second_bytes[:-4], "x")


def test_open_refuses_a_urls_key_that_is_not_true(shard_dir):
    """`urls` says the shards hold a url column (a set from records with urls); any other value is a
    damaged manifest, refused in one line rather than read with the wrong schema."""
    path = shard_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    for value in ("yes", False):
        path.write_text(json.dumps({**manifest, "urls": value}))
        with pytest.raises(UserError, match=f"manifest.json: key 'urls' is {value!r}, expected true"):
            ShardSet.open(shard_dir)
