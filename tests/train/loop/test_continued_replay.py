"""Continued pretraining end to end through `run_training` / `ptk train`: replay of the base run's
stream (`mode: continue` at its next sequence, `mode: seen` at its first), a continued run continued
again, per-source validation losses including a validation-only source, and `init_from` (weights from
a run, a checkpoint or an exported file; `init_optimizer`; clear errors on a tokenizer or shape
mismatch). Real text: the byte-level Shakespeare / WikiText-2 shards of conftest, plus PEPs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fixtures.corpora import DATA, need_data
from pretrainkit.errors import UserError
from pretrainkit.mixtures import MixtureSampler, load_mixture
from pretrainkit.train.checkpoint.checkpoints import loader_state_of
from pretrainkit.train.checkpoint.export import export_model
from pretrainkit.train.checkpoint.init_from import find_init_source
from pretrainkit.train.config import load_config
from pretrainkit.train.loop.run import run_training

SEQ, BATCH, BASE_STEPS = 32, 8, 8  # conftest's tiny config: seq_len 32, global batch 8


def _peps_shards(root: Path, tokenizer_sha256: str) -> Path:
    from pretrainkit.shards import write_shards

    peps = need_data(DATA / "python_peps" / "peps")
    texts = [p.read_bytes()[:20_000] for p in sorted(peps.glob("pep-*.rst"))[:40]]
    docs = [np.frombuffer(t, dtype=np.uint8).astype(np.uint16) for t in texts]
    out = root / f"peps-{tokenizer_sha256[0]}"
    write_shards(docs, out, vocab_size=257, eos_id=256, tokenizer_sha256=tokenizer_sha256)
    return out


def _continued_mixture(directory: Path, base_mixture: Path, replay_from: Path, mode: str, peps: Path) -> Path:
    """WikiText replayed from `replay_from` (25%), PEPs as the new domain, Shakespeare validation-only."""
    shards = base_mixture.parent
    mix = {
        "seed": 1,
        "holdout": {"fraction": 0.02, "min_tokens": 2048},
        "sources": [
            {
                "name": "wiki",
                "shards": str(shards / "wiki"),
                "weight": 0.25,
                "replay": {"from": str(replay_from), "mode": mode},
            },
            {"name": "peps", "shards": str(peps), "weight": 0.75},
            {"name": "shakespeare", "shards": str(shards / "shakespeare"), "eval_only": True},
        ],
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "mix.yaml"
    path.write_text(yaml.safe_dump(mix, sort_keys=False))
    return path


def _train(config: Path) -> dict[int, torch.Tensor]:
    """Run in this process; the input rows of every global batch the run drew, by batch index."""
    drawn: dict[int, torch.Tensor] = {}

    def record(batch: int, micro: list) -> list:
        drawn[batch] = torch.cat([x for x, _ in micro])
        return micro

    run_training(load_config(config), str(config), transform=record)
    return drawn


def _has_row(rows: torch.Tensor, sequence: np.ndarray) -> bool:
    return bool((rows == torch.from_numpy(sequence[:-1]).long()).all(dim=1).any())


def _wiki_entry(run_dir: Path) -> dict:
    return next(e for e in loader_state_of(run_dir)["sources"] if e["name"] == "wiki")


@pytest.fixture(scope="module")
def base(session_kit, tmp_path_factory) -> tuple[Path, MixtureSampler, int]:
    """A base run on the conftest mixture; its run dir, its sampler, and the wiki index of its next sequence."""
    directory = tmp_path_factory.mktemp("base")
    _train(session_kit.config(directory, max_steps=BASE_STEPS))
    sampler = MixtureSampler(load_mixture(session_kit.mixture), SEQ, BATCH)
    wiki = [s.name for s in sampler.sources].index("wiki")
    return directory / "run", sampler, int(sampler.sequences_before(BASE_STEPS)[wiki])


@pytest.fixture(scope="module")
def peps(tmp_path_factory) -> Path:
    return _peps_shards(tmp_path_factory.mktemp("peps"), "b" * 64)  # conftest's byte "tokenizer"


def test_replay_continues_at_the_next_sequence_and_a_continued_run_continues(session_kit, base, peps, tmp_path, capsys):
    base_run, base_sampler, seen = base
    wiki_stream = base_sampler.streams[[s.name for s in base_sampler.sources].index("wiki")]
    assert seen > 0 and _wiki_entry(base_run)["next_token"] == seen * (SEQ + 1)

    mix1 = _continued_mixture(tmp_path / "c1", session_kit.mixture, base_run, "continue", peps)
    c1 = session_kit.config(
        tmp_path / "c1",
        data={"mixture": str(mix1)},
        init_from=str(base_run),
        max_steps=4,
        eval={"every": 4, "batches": 1},
    )
    drawn = _train(c1)
    first = drawn[0]
    assert _has_row(first, wiki_stream.sequences(np.array([seen]))[0])  # the base run's next wiki sequence
    assert not any(_has_row(first, wiki_stream.sequences(np.array([i]))[0]) for i in range(seen))  # no repeat
    entry = _wiki_entry(tmp_path / "c1" / "run")
    assert entry["start_token"] == seen * (SEQ + 1) and entry["stream_seed"] == _wiki_entry(base_run)["stream_seed"]
    more = (entry["next_token"] - entry["start_token"]) // (SEQ + 1)
    assert more > 0

    # Per-source validation loss, the validation-only source included, in metrics.jsonl and the summary.
    val = [
        json.loads(line)["val_loss"]
        for line in (tmp_path / "c1" / "run" / "metrics.jsonl").read_text().splitlines()
        if "val_loss" in line
    ]
    assert set(val[-1]) == {"wiki", "peps", "shakespeare"} and all(np.isfinite(list(val[-1].values())))
    err = capsys.readouterr().err
    assert "initialized from" in err and "scores all): wiki" in err and "shakespeare" in err.split("val loss")[1]

    # A continued run continued again: the wiki stream goes on where the first continuation stopped.
    mix2 = _continued_mixture(tmp_path / "c2", session_kit.mixture, tmp_path / "c1" / "run", "continue", peps)
    c2 = session_kit.config(
        tmp_path / "c2",
        data={"mixture": str(mix2)},
        init_from=str(tmp_path / "c1" / "run"),
        max_steps=2,
        eval={"every": 0},
    )
    assert _has_row(_train(c2)[0], wiki_stream.sequences(np.array([seen + more]))[0])
    assert _wiki_entry(tmp_path / "c2" / "run")["start_token"] == (seen + more) * (SEQ + 1)


def test_replay_seen_rereads_from_the_first_sequence(session_kit, base, peps, tmp_path):
    base_run, base_sampler, seen = base
    wiki_stream = base_sampler.streams[[s.name for s in base_sampler.sources].index("wiki")]
    mix = _continued_mixture(tmp_path, session_kit.mixture, base_run, "seen", peps)
    cfg = session_kit.config(
        tmp_path, data={"mixture": str(mix)}, init_from=str(base_run), max_steps=2, eval={"every": 0}
    )
    first = _train(cfg)[0]
    assert _has_row(first, wiki_stream.sequences(np.array([0]))[0])
    assert not _has_row(first, wiki_stream.sequences(np.array([seen]))[0])


def _losses(run_dir: Path) -> list[float]:
    return [
        json.loads(line)["loss"] for line in (run_dir / "metrics.jsonl").read_text().splitlines() if '"loss"' in line
    ]


def test_init_from_run_checkpoint_or_export_loads_the_weights(session_kit, base, tmp_path):
    base_run = base[0]
    export_model(base_run, tmp_path / "base.safetensors")
    checkpoint = sorted((base_run / "checkpoints").glob("step-*"))[-1]
    assert find_init_source(checkpoint).path == find_init_source(base_run).path == checkpoint  # the newest
    runs = {
        "fresh": {},
        "run": {"init_from": str(base_run)},
        "export": {"init_from": str(tmp_path / "base.safetensors")},
        "optimizer": {"init_from": str(base_run), "init_optimizer": True},
    }
    losses = {}
    for name, extra in runs.items():
        _train(session_kit.config(tmp_path / name, max_steps=2, eval={"every": 0}, **extra))
        losses[name] = _losses(tmp_path / name / "run")
    assert losses["run"] == losses["export"]  # the same weights, bit for bit (fresh AdamW in both)
    assert losses["run"][0] < losses["fresh"][0] - 1.0  # the base run's knowledge, not a random init
    assert losses["optimizer"][0] == losses["run"][0] and losses["optimizer"][1] != losses["run"][1]  # AdamW moments


def test_init_from_a_different_tokenizer_fails_in_one_line_naming_both(session_kit, base, tmp_path):
    other = _peps_shards(tmp_path, "c" * 64)
    mix = tmp_path / "other.yaml"
    mix.write_text(f"seed: 1\nsources:\n  - {{name: peps, shards: {other}, weight: 1}}\n")
    cfg = session_kit.config(
        tmp_path, data={"mixture": str(mix)}, init_from=str(base[0]), max_steps=2, eval={"every": 0}
    )
    done = session_kit.ptk(cfg)
    assert done.returncode == 2, done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("ptk: error:") and "tokenizer mismatch" in line and "b" * 12 in line and "c" * 12 in line
    assert "Traceback" not in done.stderr


def test_init_from_a_different_shape_or_a_missing_path_fails_clearly(session_kit, base, tmp_path):
    wider = session_kit.config(
        tmp_path / "wide", init_from=str(base[0]), max_steps=2, model={"d_model": 64, "n_layers": 3}
    )
    with pytest.raises(UserError, match=r"model shape mismatch, .* d_model 32 vs 64; n_layers 2 vs 3"):
        run_training(load_config(wider), str(wider))
    # The same shapes in another family mean other tensors (Qwen3 adds q/k norms).
    other = session_kit.config(tmp_path / "qwen3", init_from=str(base[0]), max_steps=2, model={"family": "qwen3"})
    with pytest.raises(UserError, match=r"model shape mismatch, .*: family llama vs qwen3$"):
        run_training(load_config(other), str(other))
    missing = session_kit.config(tmp_path / "missing", init_from=str(tmp_path / "nowhere"), max_steps=2)
    with pytest.raises(UserError, match="init_from: .*nowhere does not exist"):
        run_training(load_config(missing), str(missing))
    export_model(base[0], tmp_path / "base.safetensors")
    optim = session_kit.config(
        tmp_path / "optim", init_from=str(tmp_path / "base.safetensors"), init_optimizer=True, max_steps=2
    )
    with pytest.raises(UserError, match="exported model and holds no optimizer state"):
        run_training(load_config(optim), str(optim))


def test_demo_continued_config_continues_the_demo_base_run():
    examples = Path(__file__).resolve().parents[3] / "train" / "examples"
    base, cont = load_config(examples / "demo.yaml"), load_config(examples / "continued.yaml")
    assert (cont.model, cont.data.seq_len) == (base.model, base.data.seq_len)  # init_from needs the same shape
    # Read as plain YAML: the demo's shard directories exist only after `make demo` (not on a fresh clone).
    mixture = Path(cont.data.mixture)
    sources = yaml.safe_load(mixture.read_text())["sources"]
    replays = [(mixture.parent / s["replay"]["from"]).resolve() for s in sources if "replay" in s]
    assert Path(cont.init_from) == Path(base.run_dir) and replays == [Path(base.run_dir)]


def test_trace_of_a_replaying_run_gives_the_rows_it_drew_and_their_logged_hash(session_kit, base, peps, tmp_path):
    from pretrainkit.train.reports.trace import trace_step

    mix = _continued_mixture(tmp_path, session_kit.mixture, base[0], "continue", peps)
    config = session_kit.config(
        tmp_path, data={"mixture": str(mix)}, max_steps=2, eval={"every": 0}, checkpoint={"every": 0, "keep": 1}
    )
    drawn = _train(config)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    for row in rows:
        trace = trace_step(str(tmp_path / "run"), row["step"], tokens=True)
        assert trace["batch_sha256"] == row["batch_sha256"]
        assert (np.array(trace["tokens"])[:, :-1] == drawn[row["step"] - 1].numpy()).all()
    assert {s["source"] for w in trace["windows"] for s in w["segments"]} == {"wiki", "peps"}
