"""ShardSet over real text: documents, stream windows and lengths match a numpy reference."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import webdataset

from pretrainkit.shards import ShardSet, write_shards
from pretrainkit.shards.webdataset_format import decode_sample

BYTE_EOS = 256  # the conftest's byte-level documents: token = UTF-8 byte, vocabulary 257


def _write(docs, out, fmt="arrow", **kw):
    kw.setdefault("shard_tokens", 200_000)
    kw.setdefault("batch_tokens", 8192)
    return write_shards(
        docs, out, vocab_size=257, eos_id=BYTE_EOS, ids=[f"p{i}" for i in range(len(docs))], fmt=fmt, **kw
    )


@pytest.mark.parametrize("fmt", ["arrow", "webdataset"])
def test_round_trip_documents_windows_and_lengths(tmp_path, wikitext_docs, wikitext_stream, fmt):
    ss = _write(wikitext_docs, tmp_path / "s", fmt)
    assert ss.format == fmt and len(ss.manifest["shards"]) > 3
    assert ss.num_docs == len(wikitext_docs)
    assert ss.num_tokens == sum(len(d) for d in wikitext_docs)
    assert ss.stream_length == len(wikitext_stream)
    assert ss.dtype is np.uint16 and ss.tokenizer.eos_id == BYTE_EOS
    np.testing.assert_array_equal(ss.doc_lengths(), [len(d) for d in wikitext_docs])
    for i in (0, 1, 500, len(wikitext_docs) - 1):
        np.testing.assert_array_equal(ss.document(i), wikitext_docs[i])
        assert ss.document_id(i) == f"p{i}"
    rng = np.random.default_rng(0)
    for _ in range(300):
        start = int(rng.integers(0, len(wikitext_stream) - 2049))
        np.testing.assert_array_equal(ss.read_tokens(start, start + 2049), wikitext_stream[start : start + 2049])
    np.testing.assert_array_equal(ss.read_tokens(0, ss.stream_length), wikitext_stream)
    assert len(ss.read_tokens(ss.stream_length, ss.stream_length)) == 0
    with pytest.raises(IndexError):
        ss.read_tokens(0, ss.stream_length + 1)


def test_small_cache_gives_the_same_tokens(tmp_path, wikitext_docs, wikitext_stream):
    _write(wikitext_docs, tmp_path / "s")
    ss = ShardSet.open(tmp_path / "s", cache_tokens=0)
    starts = np.random.default_rng(1).integers(0, len(wikitext_stream) - 5000, size=50)
    for s in starts:
        np.testing.assert_array_equal(ss.read_tokens(int(s), int(s) + 5000), wikitext_stream[s : s + 5000])
    assert len(ss._cache) == 1


def test_pickled_shard_set_reads_the_same(tmp_path, wikitext_docs, wikitext_stream):
    ss = _write(wikitext_docs, tmp_path / "s")
    ss.read_tokens(0, 100)
    copy = pickle.loads(pickle.dumps(ss))
    np.testing.assert_array_equal(copy.read_tokens(5000, 9000), wikitext_stream[5000:9000])


def test_same_documents_give_identical_bytes(tmp_path, wikitext_docs):
    for fmt in ("arrow", "webdataset"):
        a, b = _write(wikitext_docs, tmp_path / f"{fmt}a", fmt), _write(wikitext_docs, tmp_path / f"{fmt}b", fmt)
        names = sorted(p.name for p in a.path.iterdir())
        assert names == sorted(p.name for p in b.path.iterdir()) and "manifest.json" in names
        for n in names:
            assert (a.path / n).read_bytes() == (b.path / n).read_bytes(), n
        assert a.fingerprint == b.fingerprint


def test_large_vocabulary_uses_uint32(tmp_path, wikitext_docs):
    docs = [d.astype(np.uint32) + 70_000 for d in wikitext_docs[:200]]
    ss = write_shards(docs, tmp_path / "s", vocab_size=70_400, eos_id=70_300)
    assert ss.dtype is np.uint32 and ss.manifest["dtype"] == "uint32"
    np.testing.assert_array_equal(ss.document(7), docs[7])
    assert ss.read_tokens(len(docs[0]), len(docs[0]) + 1)[0] == 70_300
    with pytest.raises(ValueError, match="document 1: token ids must lie in"):
        write_shards([[1], [70_400]], tmp_path / "t", vocab_size=70_400, eos_id=0)


def test_rewrite_with_fewer_shards_removes_stale_ones(tmp_path, wikitext_docs):
    big = _write(wikitext_docs, tmp_path / "s", shard_tokens=50_000)
    small = _write(wikitext_docs[:100], tmp_path / "s", shard_tokens=50_000)
    files = sorted(p.name for p in small.path.glob("shard-*"))
    assert files == sorted(f for s in small.manifest["shards"] for f in (s["file"], s["file"] + ".batches"))
    assert len(files) < len(big.manifest["shards"])
    assert small.verify() == []


def test_stock_webdataset_decoders_read_the_shards(tmp_path, wikitext_docs, wikitext_stream):
    ss = _write(wikitext_docs, tmp_path / "w", "webdataset")
    assert ss.manifest["version"] == 2 and ss.verify() == []
    urls = [str(ss.path / s["file"]) for s in ss.manifest["shards"]]
    # Stock decoding only: `.npy.gz` -> numpy array, `.json.gz` -> dict; no pretrainkit code involved.
    samples = list(webdataset.WebDataset(urls, shardshuffle=False).decode())
    assert len(samples) == ss.batches.num_batches
    assert all({k for k in s if not k.startswith("__")} == {"npy.gz", "json.gz"} for s in samples)
    tokens = np.concatenate([s["npy.gz"] for s in samples])
    assert tokens.dtype == np.uint16
    np.testing.assert_array_equal(tokens, np.concatenate(wikitext_docs))
    assert [i for s in samples for i in s["json.gz"]["ids"]] == [f"p{i}" for i in range(len(wikitext_docs))]
    assert [n for s in samples for n in s["json.gz"]["lengths"]] == [len(d) for d in wikitext_docs]
    # The convenience decoder splits a stock-decoded sample into documents.
    docs = [d for s in samples for d in decode_sample(s)["tokens"]]
    assert len(docs) == len(wikitext_docs) and all(np.array_equal(a, b) for a, b in zip(docs, wikitext_docs))
    # The project's reader reads the same files.
    reread = ShardSet.open(ss.path)
    np.testing.assert_array_equal(reread.read_tokens(0, reread.stream_length), wikitext_stream)


def test_version_1_webdataset_sets_with_opaque_samples_still_read(tmp_path, wikitext_docs, wikitext_stream):
    """A set written before the stock layout: each sample one `.ptk` member (PTK1 magic, zstd header
    and token frames), manifest version 1; rebuilt here from that layout's description."""
    import gzip
    import hashlib
    import io
    import json
    import struct
    import tarfile

    import zstandard

    ss = _write(wikitext_docs, tmp_path / "w", "webdataset")
    manifest = ss.manifest
    for entry in manifest["shards"]:
        path = ss.path / entry["file"]
        with tarfile.open(path) as tar:
            members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()}
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            for key in sorted({name.partition(".")[0] for name in members}):
                meta = json.loads(gzip.decompress(members[f"{key}.json.gz"]))
                tokens = np.load(io.BytesIO(gzip.decompress(members[f"{key}.npy.gz"])))
                header = {"dtype": tokens.dtype.name, "ids": meta["ids"], "lengths": meta["lengths"]}
                head = zstandard.ZstdCompressor().compress(json.dumps(header).encode())
                payload = (
                    struct.pack("<4sI", b"PTK1", len(head))
                    + head
                    + zstandard.ZstdCompressor().compress(tokens.tobytes())
                )
                info = tarfile.TarInfo(f"{key}.ptk")
                info.size = len(payload)
                tar.addfile(info, io.BytesIO(payload))
        path.write_bytes(out.getvalue())
        entry.update(bytes=len(out.getvalue()), sha256=hashlib.sha256(out.getvalue()).hexdigest())
    manifest.update(version=1, totals={**manifest["totals"], "bytes": sum(e["bytes"] for e in manifest["shards"])})
    (ss.path / "manifest.json").write_text(json.dumps(manifest))
    old = ShardSet.open(ss.path)
    assert old.verify() == []
    np.testing.assert_array_equal(old.read_tokens(0, old.stream_length), wikitext_stream)
    assert old.document_id(7) == "p7"


def test_shard_plan_does_not_depend_on_how_lengths_arrive():
    """Boundaries from token counts fed in any pieces are the same; every shard but the last reaches
    shard_tokens at a batch end (so each shard can be written by its own job)."""
    from pretrainkit.shards.writer import ShardPlan, batch_ends

    rng = np.random.default_rng(0)
    for _ in range(200):
        lengths = rng.integers(0, 60, size=int(rng.integers(0, 400)))
        shard_tokens, batch_tokens = int(rng.integers(1, 2000)), int(rng.integers(1, 300))
        whole = ShardPlan(shard_tokens, batch_tokens)
        whole.add(lengths)
        pieces = ShardPlan(shard_tokens, batch_tokens)
        for chunk in np.array_split(lengths, int(rng.integers(1, 9))):
            pieces.add(chunk)
        assert pieces.finish() == whole.finish()
        assert pieces.tokens == [int(lengths[a:b].sum()) for a, b in whole.shards]
        assert [b for _, b in whole.shards][-1:] == ([len(lengths)] if len(lengths) else [])
        for (a, b), tokens in list(zip(whole.shards, whole.tokens))[:-1]:
            assert tokens >= shard_tokens and b - a in batch_ends(lengths[a:b], batch_tokens)
