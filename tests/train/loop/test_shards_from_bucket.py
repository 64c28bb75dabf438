"""Mixture sources whose `shards:` is a URL (a real S3 server on the loopback): the shard set is fetched
whole into the local cache, checked against its manifest as it arrives, reused by the next run, and
trained on exactly as the same shards on a local path, as it is when streamed under a smaller bound
(`data.cache.max_bytes`); a corrupt object is one line naming it; the cache's size bound evicts sets
not in use and streams a set that cannot fit beside those in use. A mixture file in the bucket
(`data.mixture: s3://...`) names its sources (and a replayed run) relative to its own prefix, trains
as the local file does and is recorded by its URL."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from fixtures.fault_commands import run_ptk
from pretrainkit.cli import main
from pretrainkit.remote.transfer import upload
from pretrainkit.shards.set_copies import BATCHES_FOLDER, FOLDER, MAX_BYTES_ENV

RUN = {"max_steps": 6, "checkpoint": {"every": 3, "keep": 1}, "eval": {"every": 3, "batches": 1}}
SETS = ("wiki", "shakespeare")


def upload_tree(local: Path, url: str) -> None:
    for f in sorted(p for p in local.rglob("*") if p.is_file()):
        upload(f, f"{url}/{f.relative_to(local).as_posix()}")


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("PTK_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / FOLDER


def copies(cache: Path) -> list[Path]:
    return [p for p in cache.iterdir() if p.is_dir()]


def trained(run: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [(r["step"], r.get("loss"), r.get("grad_norm"), r.get("lr"), r.get("val_loss")) for r in rows]


def mixture_file(path: Path, sources: list[dict]) -> Path:
    path.write_text(yaml.safe_dump({"seed": 1, "holdout": {"fraction": 0.02, "min_tokens": 2048}, "sources": sources}))
    return path


def test_a_source_in_a_bucket_trains_as_on_a_local_path_and_its_copy_is_reused(
    kit, s3, cache, tmp_path, capsys, monkeypatch
):
    url = f"{s3.bucket}/tokens/wiki"
    upload_tree(kit.mixture.parent / "wiki", url)
    mix = yaml.safe_load(kit.mixture.read_text())
    for source in mix["sources"]:
        source["shards"] = url if source["name"] == "wiki" else str(kit.mixture.parent / source["shards"])
    mix = mixture_file(tmp_path / "mix.yaml", mix["sources"])
    local = kit.config(tmp_path / "local", **RUN)
    remote = kit.config(tmp_path / "remote", **RUN, data={"mixture": str(mix), "seq_len": 32})
    assert main(["train", str(local)]) == 0
    assert main(["train", str(remote)]) == 0
    assert str(cache) not in capsys.readouterr().err
    assert trained(tmp_path / "remote" / "run") == trained(tmp_path / "local" / "run")
    (copy,) = copies(cache)
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in (kit.mixture.parent / "wiki").iterdir())

    # A cache bound below the set's size (data.cache: {dir, max_bytes}): the set is streamed one record
    # batch at a time (tests/shards/test_streamed.py), and the run is the same again
    small = tmp_path / "small-cache"
    data = {"mixture": str(mix), "seq_len": 32, "cache": {"dir": str(small), "max_bytes": 20_000}}
    streamed = kit.config(tmp_path / "streamed", **RUN, data=data)
    assert main(["train", str(streamed)]) == 0
    assert trained(tmp_path / "streamed" / "run") == trained(tmp_path / "local" / "run")
    batch_files = list((small / BATCHES_FOLDER).iterdir())
    assert len(batch_files) > 1 and sum(p.stat().st_size for p in batch_files) <= 20_000
    assert not (small / FOLDER).exists()  # not copied whole
    assert os.environ["PTK_CACHE_DIR"] == str(cache.parent) and MAX_BYTES_ENV not in os.environ  # given, not set

    # The shards gone from the bucket (its manifest stays): the next run reads the cached copy.
    bucket = s3.bucket.removeprefix("s3://")
    shard_keys = [k for k in s3.keys(bucket) if k.startswith("tokens/wiki/") and not k.endswith("manifest.json")]
    s3.client().delete_objects(Bucket=bucket, Delete={"Objects": [{"Key": k} for k in shard_keys]})
    assert main(["train", str(remote), "--no-resume"]) == 0
    assert trained(tmp_path / "remote" / "run") == trained(tmp_path / "local" / "run")

    # A cached shard cut short is fetched again; a corrupt object in the bucket is one line naming it.
    shard = sorted(copy.glob("*.arrow"))[0]
    shard.write_bytes(shard.read_bytes()[:100])
    s3.client().put_object(Bucket=bucket, Key=f"tokens/wiki/{shard.name}", Body=b"not the shard")
    capsys.readouterr()
    assert main(["mix", "inspect", str(mix)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ptk: error: {mix}: sources[1].shards: {url}/{shard.name}: fetched twice, and both times its size or "
        "sha256 differs from manifest.json"
    )


def test_the_cache_bound_evicts_a_set_not_in_use_and_streams_one_that_cannot_fit_beside_one_in_use(
    kit, s3, cache, tmp_path, monkeypatch
):
    sizes = {}
    for name in SETS:
        upload_tree(kit.mixture.parent / name, f"{s3.bucket}/tokens/{name}")
        sizes[name] = sum(p.stat().st_size for p in (kit.mixture.parent / name).iterdir())
    monkeypatch.setenv(MAX_BYTES_ENV, str(max(sizes.values()) + 1000))  # room for one of them at a time

    def inspect(*names: str):
        sources = [{"name": n, "shards": f"{s3.bucket}/tokens/{n}", "weight": 1} for n in names]
        return run_ptk(["mix", "inspect", str(mixture_file(tmp_path / "mix.yaml", sources))])

    for name in SETS:  # each in a process of its own, which lets go of its copy when it ends
        inspected = inspect(name)
        assert inspected.returncode == 0, inspected.stderr[-2000:]
        (copy,) = copies(cache)  # the other set's copy was evicted to make room
        assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in (kit.mixture.parent / name).iterdir())
    inspected = inspect(*SETS)  # wiki fits once shakespeare's unused copy goes; shakespeare is streamed beside it
    assert inspected.returncode == 0, inspected.stderr[-2000:]
    (copy,) = copies(cache)
    assert sorted(p.name for p in copy.iterdir()) == sorted(p.name for p in (kit.mixture.parent / "wiki").iterdir())
    local_sources = [{"name": n, "shards": str(kit.mixture.parent / n), "weight": 1} for n in SETS]
    local = run_ptk(["mix", "inspect", str(mixture_file(tmp_path / "local.yaml", local_sources))])
    assert inspected.stdout.split("\nsource")[1] == local.stdout.split("\nsource")[1]  # the same table


def test_a_mixture_file_in_a_bucket_trains_as_the_local_file_and_is_recorded_by_its_url(
    kit, s3, cache, tmp_path, capsys
):
    # The file beside its shard sets' folder, as the local one: `../tokens/NAME` resolves against its prefix.
    for name in SETS:
        upload_tree(kit.mixture.parent / name, f"{s3.bucket}/corpus/tokens/{name}")
    sources = yaml.safe_load(kit.mixture.read_text())["sources"]
    for source in sources:
        source["shards"] = f"../tokens/{source['shards']}"
    upload(mixture_file(tmp_path / "mix.yaml", sources), f"{s3.bucket}/corpus/mixes/mix.yaml")
    url = f"{s3.bucket}/corpus/mixes/mix.yaml"
    local = kit.config(tmp_path / "local", **RUN)
    remote = kit.config(tmp_path / "remote", **RUN, data={"mixture": url, "seq_len": 32})
    for config in (local, remote):
        assert main(["train", str(config), "--set", "max_steps=2"]) == 0
    assert trained(tmp_path / "remote" / "run") == trained(tmp_path / "local" / "run")
    assert yaml.safe_load((tmp_path / "remote" / "run" / "config.yaml").read_text())["data"]["mixture"] == url
    assert len(copies(cache)) == 2

    # A key that is not there, a source that leads out of the bucket: one line each.
    capsys.readouterr()
    missing = f"{s3.bucket}/corpus/mixes/nothing.yaml"
    assert main(["mix", "inspect", missing]) == 2
    assert capsys.readouterr().err.strip().startswith(f"ptk: error: {missing}: cannot download: no such bucket or key")
    sources[0]["shards"] = "../../../elsewhere"
    upload(mixture_file(tmp_path / "mix.yaml", sources), url)
    assert main(["mix", "inspect", url]) == 2
    assert capsys.readouterr().err.strip() == (
        f"ptk: error: {url}: sources[0].shards: ../../../elsewhere leads out of the bucket {s3.bucket}"
    )

    # A replay of a run in the bucket (`../runs/base` beside the file): the continuation the local
    # mixture replaying the same run on a local path trains.
    base = tmp_path / "local" / "run"
    upload_tree(base, f"{s3.bucket}/corpus/runs/base")
    sources[0]["shards"] = "../tokens/shakespeare"
    sources[0]["replay"] = {"from": "../runs/base"}
    upload(mixture_file(tmp_path / "mix.yaml", sources), url)
    local_sources = [dict(s, shards=str(kit.mixture.parent / s["shards"].removeprefix("../tokens/"))) for s in sources]
    local_sources[0]["replay"] = {"from": str(base)}
    local_mix = mixture_file(tmp_path / "local-mix.yaml", local_sources)
    assert main(["mix", "inspect", url]) == 0
    assert f"replays {s3.bucket}/corpus/runs/base (continue)" in capsys.readouterr().out
    del local_sources[0]["replay"]
    fresh_mix = mixture_file(tmp_path / "fresh-mix.yaml", local_sources)
    continued = {}
    for name, mixture in (("local", str(local_mix)), ("remote", url), ("fresh", str(fresh_mix))):
        config = kit.config(tmp_path / f"{name}-continued", **RUN, data={"mixture": mixture, "seq_len": 32})
        assert main(["train", str(config), "--set", "max_steps=2"]) == 0
        continued[name] = trained(tmp_path / f"{name}-continued" / "run")
    assert continued["remote"] == continued["local"] != continued["fresh"], "replayed: not the stream's start"

    # A replay of a prefix that holds no complete checkpoint: one line naming it.
    sources[0]["replay"] = {"from": "../tokens"}
    upload(mixture_file(tmp_path / "mix.yaml", sources), url)
    config = kit.config(tmp_path / "no-base", **RUN, data={"mixture": url, "seq_len": 32})
    capsys.readouterr()
    assert main(["train", str(config), "--set", "max_steps=2"]) == 2
    assert (
        capsys.readouterr()
        .err.strip()
        .endswith(
            f"{s3.bucket}/corpus/tokens: no complete checkpoint to replay from "
            f"(expected {s3.bucket}/corpus/tokens/checkpoints/step-*/meta.json)"
        )
    )
