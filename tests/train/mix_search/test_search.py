"""`ptk mix search` end to end on three domains: the proposal beats the uniform mixture on the target at
the same budget; a rerun reads the finished runs back and writes the same bytes; an interrupted run
resumes from its checkpoint; --parallel gives what one-after-another gives; bad input is one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
import yaml

from pretrainkit.mixtures import load_mixture


def target_loss(ptk, run: Path, domains: Path) -> float:
    code, stdout, err = ptk("eval", run, "--shards", domains / "target", "--seq-len", 32, "--json")
    assert code == 0, err[-3000:]
    return json.loads(stdout)["sources"]["target"]["loss"]


def rows_of(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]


def test_the_proposal_beats_the_uniform_mixture_on_the_target(search, ptk, tmp_path) -> None:
    rows = rows_of(search.out)
    assert [r["run"] for r in rows] == [f"{i:03d}" for i in range(search.runs)]
    assert rows[0]["weights"] == {"shakespeare": 0.333333, "wiki": 0.333333, "peps": 0.333333}  # the given weights
    assert len({json.dumps(r["weights"]) for r in rows}) == search.runs and all(r["steps"] == 24 for r in rows)
    # each run's loss is what `ptk eval` says of the run directory
    assert rows[2]["target_loss"] == target_loss(ptk, search.out / "runs" / "002", search.domains)
    assert f"held-out error (leave-one-out over {search.runs} runs): mean absolute" in search.stdout
    assert (search.out / "search.png").read_bytes().startswith(b"\x89PNG")
    best = load_mixture(search.out / "best.yaml")
    assert [s.name for s in best.sources] == ["shakespeare", "wiki", "peps"]
    assert best.sources[0].share > 0.5, [s.share for s in best.sources]  # the target's own domain
    # the check: best.yaml trained at the same budget, against the uniform mixture (run 000), on the target
    best_yaml = search.out / "best.yaml"
    code, _, err = ptk("train", search.config, "--set", f"data.mixture={best_yaml}", "--set", f"run_dir={tmp_path}")
    assert code == 0, err[-3000:]
    assert target_loss(ptk, tmp_path, search.domains) < rows[0]["target_loss"] - 0.02


def test_a_rerun_trains_nothing_and_an_interrupted_run_resumes_from_its_checkpoint(search, ptk) -> None:
    out = search.out
    written = {name: (out / name).read_bytes() for name in ("runs.jsonl", "best.yaml", "search.png")}
    code, again, err = ptk(*search.argv(out), "--runs", search.runs)
    assert code == 0 and "ptk train: steps" not in err, err[-3000:]
    assert again == search.stdout
    assert {name: (out / name).read_bytes() for name in written} == written
    # run 003 as a kill after its step 16 leaves it: its newest checkpoint and its score gone
    run = out / "runs" / "003"
    (run / "target_loss.json").unlink()
    shutil.rmtree(max(run.glob("checkpoints/step-*")))
    code, _, err = ptk(*search.argv(out), "--runs", search.runs)
    assert code == 0, err[-3000:]
    assert "steps 17-24 of 24" in err and err.count("ptk train: steps") == 1, err[-3000:]
    assert {name: (out / name).read_bytes() for name in written} == written


def test_parallel_proxy_runs_give_what_one_after_another_gives(search, ptk, tmp_path) -> None:
    """Three runs: the first three proposals of the session's (a proposal depends on the seed, not on --runs)."""
    code, _, err = ptk(*search.argv(tmp_path / "out"), "--runs", 3, "--parallel", 2)
    assert code == 0, err[-3000:]
    assert search.first_runs(tmp_path / "out", 3) == search.first_runs(search.out, 3)


def test_bad_input_is_one_line_before_anything_trains(search, ptk, tmp_path) -> None:
    from pretrainkit.shards import write_shards

    domains, config = search.domains, search.config
    other = tmp_path / "other-tokenizer"
    write_shards([torch.arange(5).numpy()], other, vocab_size=257, eos_id=256, tokenizer_sha256="c" * 64)
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"sources": [{"name": "s", "shards": str(domains / "shakespeare"), "weight": 1}]}))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    mixture = domains / "uniform.yaml"
    cases = {
        "runs": ([*search.argv(tmp_path / "o1"), "--runs", "2"], "--runs"),
        "target missing": (
            ["mix", "search", mixture, "--config", config, "--target", tmp_path / "no", "-o", tmp_path / "o4"],
            "--target",
        ),
        "target of another tokenizer": (
            ["mix", "search", mixture, "--config", config, "--target", other, "-o", tmp_path / "o2"],
            "another tokenizer",
        ),
        "one source": (
            ["mix", "search", one, "--config", config, "--target", domains / "target", "-o", tmp_path / "o3"],
            "one training source",
        ),
        "another command's folder": (search.argv(tmp_path / "notes"), "notes"),
        "another search's runs": ([*search.argv(search.out), "--seed", "7"], "another search"),
    }
    proposal = (search.out / "runs" / "001" / "mixture.yaml").read_bytes()
    for name, (argv, said) in cases.items():
        code, _, err = ptk(*argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and said in lines[0], (name, err[-2000:])
    assert not any((tmp_path / f"o{i}").exists() for i in (1, 2, 3, 4))
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"
    assert (search.out / "runs" / "001" / "mixture.yaml").read_bytes() == proposal
