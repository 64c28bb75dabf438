"""The order contract: identical global batches for any world size and worker count; resume at
batch k equals the uninterrupted run; state checks; max_epochs; replay starts; validation split."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from pretrainkit.errors import UserError
from pretrainkit.mixtures import MixtureSampler, TrainLoader, load_mixture
from pretrainkit.mixtures.mixture import STATE_VERSION

SEQ, B = 48, 8
MIX = """seed: 11
sources:
  - {name: wiki, shards: wiki, weight: 0.5}
  - {name: peps, shards: peps, weight: 0.3}
  - {name: shakespeare, shards: shakespeare, weight: 0.2}
  - {name: held, shards: shakespeare, eval_only: true}
"""


@pytest.fixture
def mixture_path(write_yaml):
    return write_yaml(MIX)


@pytest.fixture
def sampler(mixture_path):
    return MixtureSampler(load_mixture(mixture_path), seq_len=SEQ, global_batch_size=B)


def _take(loader: TrainLoader, n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    out = []
    for item in loader:
        out.append(item)
        if len(out) == n:
            break
    return out


def _global_batches(
    sampler, world_size: int, micro: int, batches: int, workers: int = 0, state=None, pin_memory: bool = False
) -> np.ndarray:
    """Run one loader per rank and reassemble [batches, B, SEQ + 1] from their micro-batches."""
    per_rank = B // world_size // micro * batches
    ranks = []
    for r in range(world_size):
        loader = TrainLoader(
            sampler, rank=r, world_size=world_size, micro_size=micro, num_workers=workers, pin_memory=pin_memory
        )
        if state is not None:
            loader.load_state_dict(state)
        items = _take(loader, per_rank)
        rows = [torch.cat([x, y[:, -1:]], dim=1).numpy() for x, y in items]
        for x, y in items:
            assert x.dtype == y.dtype == torch.int64 and x.shape == (micro, SEQ)
            assert torch.equal(x[:, 1:], y[:, :-1])
        ranks.append(np.concatenate(rows).reshape(batches, B // world_size, SEQ + 1))
    return np.concatenate(ranks, axis=1)


def test_global_batch_is_a_pure_function_of_k(sampler, mixture_path):
    tokens, ids = sampler.batch(3)
    assert tokens.dtype == np.int64 and tokens.shape == (B, SEQ + 1) and ids.dtype == np.int16
    again = MixtureSampler(load_mixture(mixture_path), seq_len=SEQ, global_batch_size=B)
    assert np.array_equal(again.batch(3)[0], tokens)  # fresh process state, batch 3 first
    assert np.array_equal(sampler.rows(3, 2, 5)[0], tokens[2:5])
    assert set(ids.tolist()) <= {0, 1, 2}  # the eval-only source (index 3) is never trained on


@pytest.mark.parametrize("world_size, micro", [(1, 8), (1, 2), (2, 2), (4, 1), (4, 2)])
def test_world_sizes_and_micro_sizes_give_identical_global_batches(sampler, world_size, micro):
    expected = np.stack([sampler.batch(k)[0] for k in range(3)])
    assert np.array_equal(_global_batches(sampler, world_size, micro, 3), expected)


def test_loader_workers_give_identical_global_batches(sampler):
    expected = np.stack([sampler.batch(k)[0] for k in range(3)])
    assert np.array_equal(_global_batches(sampler, 2, 2, 3, workers=2), expected)


def test_pinned_memory_gives_the_same_batches(sampler):
    """Pinned where there is a CUDA device; without one skipped, as a DataLoader does, not an error."""
    expected = np.stack([sampler.batch(k)[0] for k in range(2)])
    assert np.array_equal(_global_batches(sampler, 1, 4, 2, workers=2, pin_memory=True), expected)


def test_resume_at_batch_k_equals_the_uninterrupted_run(sampler, mixture_path):
    first = TrainLoader(sampler, rank=0, world_size=1, micro_size=4)
    _take(first, 10)  # 5 global batches
    state = json.loads(json.dumps(first.state_dict()))
    assert state["batch"] == 5 and state["micro_batch"] == 0
    assert [s["name"] for s in state["sources"]] == ["wiki", "peps", "shakespeare"]
    fresh = MixtureSampler(load_mixture(mixture_path), seq_len=SEQ, global_batch_size=B)
    expected = np.stack([fresh.batch(k)[0] for k in range(5, 8)])
    for world_size, micro, workers in [(1, 4, 0), (2, 2, 0), (4, 1, 2)]:
        resumed = MixtureSampler(load_mixture(mixture_path), seq_len=SEQ, global_batch_size=B)
        assert np.array_equal(_global_batches(resumed, world_size, micro, 3, workers, state), expected)


def test_resume_far_into_training_reads_no_skipped_data(sampler):
    """Batch 10**9 (thousands of epochs in) is computed directly: resuming costs the same at any k."""
    k = 10**9
    state = TrainLoader(sampler, rank=0, world_size=1, micro_size=B).state_dict()
    state.update(batch=k, sources=sampler.positions(k))
    loader = TrainLoader(sampler, rank=0, world_size=2, micro_size=4)
    loader.load_state_dict(state)
    x, y = _take(loader, 1)[0]
    tokens = sampler.batch(k)[0]
    assert torch.equal(x, torch.from_numpy(tokens[:4, :-1])) and torch.equal(y, torch.from_numpy(tokens[:4, 1:]))
    assert state["sources"][0]["next_token"] // sampler.streams[0].epoch_tokens > 1000


def test_state_counts_only_yielded_micro_batches_and_resumes_mid_batch(sampler):
    loader = TrainLoader(sampler, rank=1, world_size=2, micro_size=1, num_workers=2)
    items = _take(loader, 7)  # workers prefetch further; the state must not count that
    state = loader.state_dict()
    assert (state["batch"], state["micro_batch"]) == (1, 3)
    again = TrainLoader(sampler, rank=1, world_size=2, micro_size=1)
    again.load_state_dict(state)
    nxt = _take(again, 2)
    reference = _take(TrainLoader(sampler, rank=1, world_size=2, micro_size=1), 9)
    for got, want in zip(items + nxt, reference):
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    other_shape = TrainLoader(sampler, rank=0, world_size=4, micro_size=1)
    with pytest.raises(UserError, match="stops inside batch 1"):
        other_shape.load_state_dict(state)


def test_per_source_positions_in_the_state(sampler):
    loader = TrainLoader(sampler, rank=0, world_size=1, micro_size=B)
    _take(loader, 4)
    state = loader.state_dict()
    ids = np.concatenate([sampler.batch(k)[1] for k in range(4)])
    for s, entry in enumerate(state["sources"]):
        assert entry["start_token"] == 0
        assert entry["next_token"] == int(np.sum(ids == s)) * (SEQ + 1)
        assert entry["shards_fingerprint"] == sampler.sources[s].shard_set.fingerprint


def test_changed_mixture_is_refused_unless_allowed(sampler, mixture_path, write_yaml):
    loader = TrainLoader(sampler, rank=0, world_size=1, micro_size=B)
    _take(loader, 6)
    state = loader.state_dict()
    changed = write_yaml(MIX.replace("0.5", "0.6"))
    strict = TrainLoader(MixtureSampler(load_mixture(changed), SEQ, B), rank=0, world_size=1, micro_size=B)
    with pytest.raises(UserError, match="saved for another mixture.*allow_mixture_change=True"):
        strict.load_state_dict(state)
    with pytest.raises(UserError, match="saved for another mixture") as shape:
        TrainLoader(MixtureSampler(load_mixture(mixture_path), SEQ * 2, B), 0, 1, B).load_state_dict(state)
    assert f"(seq_len {SEQ} -> {SEQ * 2})" in str(shape.value)  # only what differs: the fingerprint is the same

    mix = load_mixture(changed, allow_mixture_change=True)
    rebased = TrainLoader(MixtureSampler(mix, SEQ, B), rank=0, world_size=1, micro_size=B)
    rebased.load_state_dict(state)
    x, y = _take(rebased, 1)[0]
    first_source = rebased.sampler.batch(6)[1][0]
    entry = state["sources"][first_source]
    # Each source continues at the saved position; nothing it had read is read again.
    continued = sampler.streams[first_source].sequences(np.array([entry["next_token"] // (SEQ + 1)]))[0]
    assert torch.equal(x[0], torch.from_numpy(continued[:-1]))
    new_state = rebased.state_dict()
    assert new_state["first_batch"] == 6 and new_state["batch"] == 7
    # The rebased run resumes from its own state without the flag.
    again = TrainLoader(MixtureSampler(load_mixture(changed), SEQ, B), rank=0, world_size=1, micro_size=B)
    again.load_state_dict(new_state)
    assert np.array_equal(_take(again, 1)[0][0].numpy(), rebased.sampler.batch(7)[0][:, :-1])


def test_malformed_state_is_a_clear_error(sampler):
    loader = TrainLoader(sampler, rank=0, world_size=1, micro_size=B)
    with pytest.raises(UserError, match="loader state: key 'fingerprint' missing or not a str"):
        loader.load_state_dict({"version": 1})
    with pytest.raises(UserError, match="must split evenly"):
        TrainLoader(sampler, rank=0, world_size=3, micro_size=1)


def test_max_epochs_stops_with_an_error_naming_the_source(write_yaml):
    path = write_yaml(
        MIX.replace(
            "{name: shakespeare, shards: shakespeare, weight: 0.2}",
            "{name: shakespeare, shards: shakespeare, weight: 0.2, max_epochs: 0.01}",
        )
    )
    sampler = MixtureSampler(load_mixture(path), seq_len=SEQ, global_batch_size=B)
    limit = sampler.limit_batch()
    stream = sampler.streams[2]
    allowed = int(0.01 * stream.epoch_tokens) // stream.row_tokens
    assert sampler.sequences_before(limit)[2] <= allowed < sampler.sequences_before(limit + 1)[2]
    sampler.batch(limit - 1)
    with pytest.raises(UserError, match=r"source 'shakespeare' .* would exceed max_epochs=0\.01 at global batch"):
        sampler.batch(limit)
    loader = TrainLoader(sampler, rank=0, world_size=1, micro_size=B, num_workers=2)
    with pytest.raises(UserError, match="source 'shakespeare'"):
        _take(loader, limit + 5)
    assert loader.state_dict()["batch"] == limit


def test_replay_continues_or_rereads_the_base_runs_stream(sampler, mixture_path):
    base = TrainLoader(sampler, rank=0, world_size=1, micro_size=B)
    _take(base, 5)
    base_state = json.loads(json.dumps(base.state_dict()))
    wiki = sampler.streams[0]
    seen = int(np.sum(np.concatenate([sampler.batch(k)[1] for k in range(5)]) == 0))

    mix = load_mixture(mixture_path)
    cont = MixtureSampler(mix.with_replay("wiki", base_state), SEQ, B)
    first_wiki = cont.batch(0)[0][cont.batch(0)[1] == 0][0]
    assert np.array_equal(first_wiki, wiki.sequences(np.array([seen]))[0])  # the base run's next sequence
    again = MixtureSampler(mix.with_replay("wiki", base_state, mode="seen"), SEQ, B)
    assert np.array_equal(again.batch(0)[0][again.batch(0)[1] == 0][0], wiki.sequences(np.array([0]))[0])
    assert cont.fingerprint != sampler.fingerprint
    # A continued run records its own start, so it can itself be continued.
    state = TrainLoader(cont, 0, 1, B).state_dict()
    assert state["sources"][0]["start_token"] == seen * (SEQ + 1)


def test_yaml_replay_is_applied_through_the_callers_state_reader(sampler, write_yaml, shard_root):
    base = TrainLoader(sampler, rank=0, world_size=1, micro_size=B)
    _take(base, 3)
    saved = {shard_root / "runs" / "base": base.state_dict()}
    path = write_yaml(
        "seed: 99\nsources:\n  - {name: web, shards: wiki, weight: 0.1, replay: {from: runs/base}}\n"
        "  - {name: new, shards: peps, weight: 0.9}\n"
    )
    mix = load_mixture(path).with_replays(saved.__getitem__)
    web = mix.source("web")
    wiki_entry = base.state_dict()["sources"][0]
    assert (web.start.seed, web.start.token) == (wiki_entry["stream_seed"], wiki_entry["next_token"])
    with pytest.raises(UserError, match="replay mode must be one of"):
        mix.with_replay("web", saved[shard_root / "runs" / "base"], mode="again")
    with pytest.raises(UserError, match="the base run's loader state has no source with shard set"):
        mix.with_replay("new", {"version": STATE_VERSION, "sources": []})
    with pytest.raises(UserError, match="loader state is version 1, this pretrainkit replays version 2"):
        mix.with_replay("web", {**saved[shard_root / "runs" / "base"], "version": 1})


def test_validation_batches_come_from_the_heldout_split_only(sampler):
    batches = sampler.validation_batches("shakespeare", batch_size=4, max_batches=3)
    assert len(batches) == 3 and all(x.shape == (4, SEQ) and y.shape == (4, SEQ) for x, y in batches)
    assert all(torch.equal(x[:, 1:], y[:, :-1]) for x, y in batches)
    again = sampler.validation_batches("shakespeare", batch_size=4, max_batches=3)
    assert all(torch.equal(a[0], b[0]) for a, b in zip(batches, again))
    source = sampler.mix.source("shakespeare")
    ss = source.shard_set
    heldout_docs = np.flatnonzero(source.split.heldout.mask(0, ss.num_docs))
    assert len(heldout_docs) == source.split.heldout.num_docs > 0
    held = np.concatenate([np.append(ss.document(int(d)), ss.tokenizer.eos_id) for d in heldout_docs])
    flat = torch.cat([torch.cat([x, y[:, -1:]], 1) for x, y in batches]).reshape(-1).numpy()
    assert np.array_equal(flat, held[: len(flat)])
    assert not (source.split.heldout.mask(0, ss.num_docs) & source.split.train.mask(0, ss.num_docs)).any()
    eval_only = sampler.validation_batches("held", batch_size=2, max_batches=1)
    assert len(eval_only) == 1 and eval_only[0][0].shape == (2, SEQ)
    with pytest.raises(UserError, match="no source named 'nope'"):
        sampler.validation_batches("nope", 2, 1)
    with pytest.raises(UserError, match=r"no source named 'nnn.*…\(100002 chars\) \(sources: ") as e:
        sampler.validation_batches("n" * 100_000, 2, 1)  # a name from a command line or a saved state
    assert len(str(e.value)) < 500
