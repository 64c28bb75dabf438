"""A shard set in a bucket larger than the cache's bound (a real S3 server on the loopback): read one
record batch at a time through the bounded cache, with exactly the rows of the same shards on a
local path, the cache never over its bound, loader workers sharing it (each batch fetched once), a
corrupt object and a server gone each one line naming the object."""

from __future__ import annotations

import fcntl
import hashlib
import json
import multiprocessing.forkserver
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import s3fs
import yaml

from fixtures.corpora import DATA, need_data
from fixtures.fault_commands import run_ptk
from pretrainkit.errors import UserError
from pretrainkit.mixtures import MixtureSampler, TrainLoader, load_mixture
from pretrainkit.remote.limits import RETRIES_ENV, TIMEOUT_ENV
from pretrainkit.remote.transfer import upload
from pretrainkit.shards import ShardSet, batch_cache, write_shards
from pretrainkit.shards.batch_cache import LOCK_NAME
from pretrainkit.shards.batch_ranges import BatchRanges
from pretrainkit.shards.set_copies import BATCHES_FOLDER, FOLDER, MAX_BYTES_ENV, ShardCache
from pretrainkit.shards.streamed import StreamedShardSet, open_shard_set

SEQ_LEN, BATCH = 63, 8


def byte_shards(text: str, out: Path, fmt: str = "arrow") -> Path:
    """`text`'s paragraphs as documents of byte tokens, in record batches of ~1k tokens."""
    docs = [np.frombuffer(s.encode(), np.uint8).astype(np.uint16) for s in text.split("\n\n") if s.strip()]
    write_shards(docs, out, vocab_size=257, eos_id=256, fmt=fmt, batch_tokens=1024, shard_tokens=32 * 1024)
    return out


def shakespeare(start: int, end: int) -> str:
    return need_data(DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[start:end]


@pytest.fixture(scope="module")
def speeches(tmp_path_factory) -> Path:
    """Tiny Shakespeare's first 200 kB, byte tokens, in record batches of ~1k tokens: ~190 batches in
    7 shards, so a source has 3 shuffle windows of 64 batches and a window reads from every shard."""
    return byte_shards(shakespeare(0, 200_000), tmp_path_factory.mktemp("speeches") / "shards")


def uploaded(local: Path, url: str) -> str:
    for f in sorted(local.iterdir()):
        upload(f, f"{url}/{f.name}")
    return url


def mixture(path: Path, shards: str, *more: str) -> Path:
    sources = [{"name": f"speeches{i or ''}", "shards": s, "weight": 1} for i, s in enumerate((shards, *more))]
    path.write_text(yaml.safe_dump({"seed": 3, "holdout": {"fraction": 0.02, "min_tokens": 1024}, "sources": sources}))
    return path


def rows(mix: Path, batches: int, check=lambda: None) -> np.ndarray:
    sampler = MixtureSampler(load_mixture(mix), seq_len=SEQ_LEN, global_batch_size=BATCH)
    out = []
    for k in range(batches):
        out.append(sampler.rows(k, 0, BATCH)[0])
        check()
    for source in sampler.sources:  # no fetch left running into the next part of a test
        if isinstance(source.shard_set, StreamedShardSet):
            source.shard_set.settle()
    return np.concatenate(out)


def sizes(files) -> int:
    """The bytes of these files that still exist: a prefetch thread may be storing (and evicting) meanwhile."""
    total = 0
    for p in files:
        try:
            total += p.stat().st_size if p.is_file() else 0
        except FileNotFoundError:
            pass
    return total


def cached_bytes(cache: Path) -> int:
    return sizes(p for p in cache.iterdir() if p.name != LOCK_NAME)


def cache_bytes(cache: Path) -> int:
    """What the cache's bound is on: the whole copies and the streamed batches."""
    return sizes(
        p for folder in (FOLDER, BATCHES_FOLDER) if (cache / folder).is_dir() for p in (cache / folder).rglob("*")
    )


def set_bytes(shards: Path) -> int:
    return sum(p.stat().st_size for p in shards.iterdir())


def batches_per_epoch(shards: Path) -> int:
    return sum(BatchRanges.decode(p.read_bytes(), str(p)).num_batches for p in shards.glob("*.batches"))


def test_a_set_larger_than_the_bound_streams_the_rows_of_the_local_set_within_the_bound(
    s3, speeches, tmp_path, monkeypatch
):
    bound = sum(p.stat().st_size for p in speeches.iterdir()) // 4
    monkeypatch.setenv(MAX_BYTES_ENV, str(bound))
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
    url = uploaded(speeches, f"{s3.bucket}/tokens/speeches")
    local, remote = mixture(tmp_path / "local.yaml", str(speeches)), mixture(tmp_path / "remote.yaml", url)
    streamed = load_mixture(remote).sources[0].shard_set
    assert isinstance(streamed, StreamedShardSet) and streamed.cache.root == tmp_path / "cache" / BATCHES_FOLDER
    cache = streamed.cache.root
    local_set = load_mixture(local).sources[0].shard_set
    for i in (0, 777, local_set.num_docs - 1):  # random access too: a document, its id (another column)
        assert np.array_equal(streamed.document(i), local_set.document(i))
        assert streamed.document_id(i) == local_set.document_id(i)

    # Two epochs and more of the source: every window read, and evicted under the bound
    batches = 2 * load_mixture(local).sources[0].train_tokens // (SEQ_LEN + 1) // BATCH + 2
    sizes = []
    expected = rows(local, batches)
    assert np.array_equal(rows(remote, batches, lambda: sizes.append(cached_bytes(cache))), expected)
    assert max(sizes) <= bound and min(sizes) > 0
    assert not (tmp_path / "cache" / "shard-sets").exists()  # never copied whole

    # Loader workers (processes of their own, each with its prefetch thread) share the cache: the same
    # micro-batches as the local set read in the caller's process
    def loader_rows(mix: Path, workers: int) -> list:
        sampler = MixtureSampler(load_mixture(mix), seq_len=SEQ_LEN, global_batch_size=BATCH)
        loader = iter(TrainLoader(sampler, rank=0, world_size=1, micro_size=BATCH // 2, num_workers=workers))
        return [next(loader)[0].numpy() for _ in range(batches)]  # an epoch and more

    for name in list(cache.iterdir()):
        name.unlink()
    # The process the workers start from (forkserver) is made once, here before the bucket's credentials
    # are set, as by an earlier loader of the same process: the workers take the loader's environment.
    multiprocessing.forkserver._forkserver._stop()
    with monkeypatch.context() as env:
        for name in s3.environment():
            env.delenv(name)
        loader_rows(local, 2)
    assert all(np.array_equal(a, b) for a, b in zip(loader_rows(remote, 2), loader_rows(local, 0), strict=True))
    assert 0 < cached_bytes(cache) <= bound

    # A damaged file in the cache is fetched again; a batch altered in the bucket is one line
    victim = max(cache.iterdir(), key=lambda p: p.stat().st_size if p.name != LOCK_NAME else -1)
    victim.write_bytes(b"x" * victim.stat().st_size)
    assert np.array_equal(rows(remote, batches), expected)
    shard = sorted(speeches.glob("*.arrow"))[3]
    ranges = BatchRanges.decode(shard.with_name(shard.name + ".batches").read_bytes(), "")
    first = int(streamed.batches.shard_batches[3])
    local_batch = next(
        i for i in range(5, ranges.num_batches) if load_mixture(local).sources[0].split.train.batch_tokens[first + i]
    )
    start, size = int(ranges.offsets[local_batch]), int(ranges.sizes[local_batch])
    data = bytearray(shard.read_bytes())
    data[start + size - 20] ^= 0xFF  # inside the batch's body: its sha256 changes, not its size
    key = f"tokens/speeches/{shard.name}"
    s3.client().put_object(Bucket=s3.bucket.removeprefix("s3://"), Key=key, Body=bytes(data))
    for name in list(cache.iterdir()):
        name.unlink()
    with pytest.raises(UserError) as caught:
        rows(remote, batches)
    assert str(caught.value) == (
        f"{url}/{shard.name}: bytes {start}-{start + size - 1} fetched twice, and both times their size or sha256 "
        "differs from the shard's record-batch sidecar"
    )
    assert hashlib.sha256(bytes(data[start : start + size])).digest() != ranges.sha256[local_batch]


def test_the_cache_given_is_the_one_the_loader_workers_use(s3, speeches, tmp_path, monkeypatch):
    """A mixture opened with a cache of its own (a training config's `data.cache`) reads through it in
    the loader's workers too, whatever the variables say there: they are only the defaults."""
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache-of-the-variable"))
    monkeypatch.delenv(MAX_BYTES_ENV, raising=False)  # unbounded: the set would be copied whole
    local = mixture(tmp_path / "local.yaml", str(speeches))
    remote = mixture(tmp_path / "remote.yaml", uploaded(speeches, f"{s3.bucket}/tokens/speeches"))
    given = ShardCache(tmp_path / "given", set_bytes(speeches) // 4)

    def loader_rows(mix: Path, workers: int) -> list:
        sampler = MixtureSampler(load_mixture(mix, shard_cache=given), seq_len=SEQ_LEN, global_batch_size=BATCH)
        loader = iter(TrainLoader(sampler, rank=0, world_size=1, micro_size=BATCH // 2, num_workers=workers))
        return [next(loader)[0].numpy() for _ in range(8)]

    expected = loader_rows(local, 0)
    assert not (given.dir / BATCHES_FOLDER).exists()
    assert all(np.array_equal(a, b) for a, b in zip(loader_rows(remote, 2), expected, strict=True))
    assert 0 < cached_bytes(given.dir / BATCHES_FOLDER) <= given.max_bytes  # stored by the workers, bounded
    assert not (given.dir / FOLDER).exists()
    assert not (tmp_path / "cache-of-the-variable").exists()  # neither the batches nor the derived arrays


def test_whole_copies_and_streamed_batches_share_one_bound(s3, speeches, tmp_path, monkeypatch):
    """A set that fits the bound alone but not beside a set in use is streamed, not refused; the copies
    and the batches together never pass the bound, and the rows are those of the local sets."""
    later = byte_shards(shakespeare(200_000, 380_000), tmp_path / "later")
    bound = set_bytes(speeches) + set_bytes(later) // 2  # one whole copy, and half of the other
    monkeypatch.setenv(MAX_BYTES_ENV, str(bound))
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
    remote = mixture(
        tmp_path / "remote.yaml",
        uploaded(speeches, f"{s3.bucket}/tokens/speeches"),
        uploaded(later, f"{s3.bucket}/tokens/later"),
    )
    first, second = (source.shard_set for source in load_mixture(remote).sources)
    assert not isinstance(first, StreamedShardSet) and isinstance(second, StreamedShardSet)
    local = mixture(tmp_path / "local.yaml", str(speeches), str(later))
    batches = 2 * load_mixture(local).sources[1].train_tokens // (SEQ_LEN + 1) // BATCH + 2  # `later` twice
    sizes = []
    assert np.array_equal(
        rows(remote, batches, lambda: sizes.append(cache_bytes(tmp_path / "cache"))), rows(local, batches)
    )
    assert max(sizes) <= bound
    assert cached_bytes(second.cache.root) > 0  # the streamed set kept what the copy left room for

    # The other way: a set copied whole into a cache full of batches makes room by evicting them
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache2"))
    monkeypatch.setenv(MAX_BYTES_ENV, str(set_bytes(later) // 2))
    rows(mixture(tmp_path / "later.yaml", f"{s3.bucket}/tokens/later"), batches)
    full = cache_bytes(tmp_path / "cache2")
    assert full > set_bytes(later) // 3
    monkeypatch.setenv(MAX_BYTES_ENV, str(set_bytes(speeches) + set_bytes(later) // 4))
    assert not isinstance(open_shard_set(f"{s3.bucket}/tokens/speeches"), StreamedShardSet)
    assert 0 < cached_bytes(tmp_path / "cache2" / BATCHES_FOLDER) < full
    assert cache_bytes(tmp_path / "cache2") <= set_bytes(speeches) + set_bytes(later) // 4

    # And batches to store evict a whole copy that no process uses (another process made it and ended)
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache3"))
    monkeypatch.setenv(MAX_BYTES_ENV, str(set_bytes(later) // 2))
    small = byte_shards(shakespeare(380_000, 400_000), tmp_path / "small")
    small_url = uploaded(small, f"{s3.bucket}/tokens/small")
    inspected = run_ptk(["mix", "inspect", str(mixture(tmp_path / "small.yaml", small_url))])
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    (copy,) = (tmp_path / "cache3" / FOLDER).glob("*/manifest.json")
    rows(mixture(tmp_path / "later.yaml", f"{s3.bucket}/tokens/later"), batches)
    assert not copy.exists()  # evicted
    assert set_bytes(later) // 2 - set_bytes(small) < cache_bytes(tmp_path / "cache3") <= set_bytes(later) // 2


def test_a_set_without_sidecars_that_does_not_fit_beside_one_in_use_is_one_line(s3, speeches, tmp_path, monkeypatch):
    samples = byte_shards(shakespeare(200_000, 300_000), tmp_path / "samples", fmt="webdataset")
    monkeypatch.setenv(MAX_BYTES_ENV, str(set_bytes(speeches) + set_bytes(samples) // 2))
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
    open_shard_set(uploaded(speeches, f"{s3.bucket}/tokens/speeches"))
    url = uploaded(samples, f"{s3.bucket}/tokens/samples")
    with pytest.raises(UserError) as e:
        open_shard_set(url)
    assert "does not fit beside the 1 shard set(s) in use" in str(e.value), e.value
    assert str(e.value).endswith(
        "and cannot be streamed: its shards have no record-batch sidecars (WebDataset "
        "shards, or Arrow shards written before them; `ptk tokenize` them again); raise the bound"
    )
    assert "\n" not in str(e.value)


def test_a_server_gone_mid_stream_is_one_line_naming_the_object(speeches, tmp_path, monkeypatch):
    from fixtures.s3_server import s3_server

    with s3_server() as server:  # a server of this test's own, killed while the set is read
        for name, value in server.environment().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv(RETRIES_ENV, "0")  # the backend's retries only make the wait longer
        monkeypatch.setenv(MAX_BYTES_ENV, "10K")
        monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
        s3fs.S3FileSystem.clear_instance_cache()
        url = uploaded(speeches, f"{server.make_bucket('vanishing')}/tokens/speeches")
        sampler = MixtureSampler(load_mixture(mixture(tmp_path / "m.yaml", url)), seq_len=SEQ_LEN, global_batch_size=1)
        sampler.rows(0, 0, 1)
        server.stop()
        with pytest.raises(UserError) as caught:
            for k in range(1, 10_000):  # until a window that is neither read nor prefetched
                sampler.rows(k, 0, 1)
    s3fs.S3FileSystem.clear_instance_cache()
    assert re.fullmatch(rf"{url}/shard-\d{{5}}\.arrow: cannot read: [^\n]+", str(caught.value)), caught.value
    assert batches_per_epoch(speeches) > 128  # a third window exists: the stop is met mid-stream


@pytest.mark.timeout(120)  # without limits, each request was waited on for 417 s
def test_a_server_frozen_mid_stream_is_one_line_from_the_loader_workers(speeches, tmp_path, monkeypatch):
    """A server that stops answering (SIGSTOP: the kernel still takes connections) while loader workers
    stream a set: a worker gives up after the retries, and the loader raises its one line in the
    caller's process, not a worker's traceback, within (1 + retries) x timeout and the backoff."""
    from fixtures.s3_server import s3_server

    with s3_server() as server:
        for name, value in server.environment().items():
            monkeypatch.setenv(name, value)
        monkeypatch.setenv(TIMEOUT_ENV, "1")
        monkeypatch.setenv(RETRIES_ENV, "1")
        monkeypatch.setenv(MAX_BYTES_ENV, "10K")
        monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
        s3fs.S3FileSystem.clear_instance_cache()
        url = uploaded(speeches, f"{server.make_bucket('freezing')}/tokens/speeches")
        sampler = MixtureSampler(
            load_mixture(mixture(tmp_path / "m.yaml", url)), seq_len=SEQ_LEN, global_batch_size=BATCH
        )
        loader = iter(TrainLoader(sampler, rank=0, world_size=1, micro_size=BATCH // 2, num_workers=2))
        next(loader)
        server.freeze()
        began = time.monotonic()
        with pytest.raises(UserError) as caught:
            for _ in range(10_000):  # until a window that is neither read nor prefetched
                next(loader)
        took = time.monotonic() - began
    s3fs.S3FileSystem.clear_instance_cache()
    assert re.fullmatch(
        rf"{url}/shard-\d{{5}}\.arrow: cannot read: the endpoint did not answer in 1 s \(a request is tried 2 times "
        rf"at most; {TIMEOUT_ENV}, {RETRIES_ENV} set this\)",
        str(caught.value),
    ), caught.value
    assert took < 30, took  # 2 s of tries and 1 of backoff per request; a worker's last window's requests in turn


def test_readers_sharing_the_cache_fetch_each_batch_once(s3, speeches, tmp_path, monkeypatch):
    """Two readers asking for the same batches at once (as the ranks of a node do): one fetches each
    batch, the other waits for it and reads it from the cache."""
    monkeypatch.setenv(MAX_BYTES_ENV, str(sum(p.stat().st_size for p in speeches.iterdir()) // 2))
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
    streamed = open_shard_set(uploaded(speeches, f"{s3.bucket}/tokens/speeches"))
    fetched, fetch = [], batch_cache._fetch

    def slow(ranges: list) -> list[bytes]:  # long enough for the other reader to find them claimed
        fetched.extend(r.name for r in ranges)
        time.sleep(0.3)
        return fetch(ranges)

    monkeypatch.setattr(batch_cache, "_fetch", slow)
    wanted = list(range(10, 50))
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: streamed.read_batches(wanted), range(2)))
    local = ShardSet.open(speeches).read_batches(wanted)
    for got in results:
        assert all(np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1]) for a, b in zip(got, local, strict=True))
    assert len(fetched) == len(set(fetched)) == len(wanted)


def test_a_process_forked_while_a_cache_lock_is_held_does_not_keep_it(tmp_path: Path) -> None:
    """Regression: loader workers forked while the parent's prefetch thread held the cache's `.lock`
    (storing a window) kept that lock for their lifetime through the inherited descriptor, so the next
    store waited for ever and its claims with it (two workers deadlocked in the suite)."""
    lock = tmp_path / LOCK_NAME
    fd = batch_cache._open_lock(lock)
    fcntl.flock(fd, fcntl.LOCK_EX)  # as a thread of this process holds it in `_store`
    ready_r, ready_w = os.pipe()
    child = os.fork()
    if child == 0:  # the loader worker: alive, never touching the cache
        os.write(ready_w, b"forked")
        time.sleep(60)
        os._exit(0)
    try:
        assert os.read(ready_r, 6) == b"forked"
        batch_cache._close_lock(fd)  # the parent's thread is done with it
        other = os.open(lock, os.O_RDWR)
        try:
            fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # BlockingIOError if the child still held it
        finally:
            os.close(other)
    finally:
        os.kill(child, signal.SIGKILL)
        os.waitpid(child, 0)
        os.close(ready_r)
        os.close(ready_w)


def test_a_set_with_urls_streams_its_tokens_and_urls(s3, tmp_path, monkeypatch):
    """A set whose documents have urls (a url column after the others, the manifest's `urls`) streams: a
    record batch fetched alone decodes with that schema, giving the local set's tokens and urls."""
    from pretrainkit.dataprep.tokenize.corpus import TokenizeOptions, tokenize_corpus
    from pretrainkit.shards.tokenizer import train_tokenizer

    texts = [p for p in shakespeare(0, 60_000).split("\n\n") if p.strip()]
    train_tokenizer(texts, 300).save(str(tmp_path / "tok.json"))
    (tmp_path / "corpus").mkdir()
    urls = [f"https://example.org/play/{i}" if i % 2 else None for i in range(len(texts))]  # every other one
    records = [{"text": t, **({"url": u} if u else {})} for t, u in zip(texts, urls)]
    (tmp_path / "corpus" / "plays.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    local = tmp_path / "shards"
    options = TokenizeOptions(shard_tokens=4096, batch_tokens=512)
    tokenize_corpus([str(tmp_path / "corpus")], local, str(tmp_path / "tok.json"), options)
    monkeypatch.setenv(MAX_BYTES_ENV, str(set_bytes(local) // 4))
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
    streamed, local_set = open_shard_set(uploaded(local, f"{s3.bucket}/tokens/urls")), ShardSet.open(local)
    assert isinstance(streamed, StreamedShardSet) and streamed.has_urls and local_set.num_docs == len(texts)
    assert [streamed.document_url(i) for i in range(len(texts))] == urls
    assert [local_set.document_url(i) for i in range(len(texts))] == urls
    for b in range(local_set.batches.num_batches):
        (lengths, tokens), (local_lengths, local_tokens) = streamed.read_batch(b), local_set.read_batch(b)
        assert np.array_equal(lengths, local_lengths) and np.array_equal(tokens, local_tokens)
    streamed.settle()
