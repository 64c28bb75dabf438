"""`ptk mix search` end to end on three domains: the proposal beats the uniform mixture on the target at
the same budget; a rerun reads the finished runs back and writes the same bytes; an interrupted run
resumes from its checkpoint; --parallel gives what one-after-another gives; bad input is one line."""

from __future__ import annotations

import contextlib
import io
import json
import shutil
from pathlib import Path

import pytest
import torch
import yaml

from pretrainkit.cli import main
from pretrainkit.mixtures import load_mixture

RUNS = 8


def ptk(*argv: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `ptk ARGV` in this process, on one thread (see `one_thread`)."""
    out, err = io.StringIO(), io.StringIO()
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in argv])
            except SystemExit as e:  # argparse
                code = int(e.code or 0)
    finally:
        torch.set_num_threads(before)
    return code, out.getvalue(), err.getvalue()


def search_argv(domains: Path, config: Path, out: Path) -> list[str]:
    return ["mix", "search", domains / "uniform.yaml", "--config", config, "--target", domains / "target", "-o", out]


@pytest.fixture(scope="module")
def search(domains, tiny_config, tmp_path_factory) -> tuple[Path, Path, str]:
    """(the search's OUT, its training config, its stdout): RUNS proxy runs around the uniform mixture."""
    root = tmp_path_factory.mktemp("search")
    config = tiny_config(root / "config", domains / "uniform.yaml")
    out = root / "out"
    code, stdout, err = ptk(*search_argv(domains, config, out), "--runs", RUNS)
    assert code == 0, err[-3000:]
    return out, config, stdout


def target_loss(run: Path, domains: Path) -> float:
    code, stdout, err = ptk("eval", run, "--shards", domains / "target", "--seq-len", 32, "--json")
    assert code == 0, err[-3000:]
    return json.loads(stdout)["sources"]["target"]["loss"]


def test_the_proposal_beats_the_uniform_mixture_on_the_target(search, domains, tmp_path) -> None:
    out, config, stdout = search
    rows = [json.loads(line) for line in (out / "runs.jsonl").read_text().splitlines()]
    assert [r["run"] for r in rows] == [f"{i:03d}" for i in range(RUNS)]
    assert rows[0]["weights"] == {"shakespeare": 0.333333, "wiki": 0.333333, "peps": 0.333333}  # the given weights
    assert len({json.dumps(r["weights"]) for r in rows}) == RUNS and all(r["steps"] == 24 for r in rows)
    # each run's loss is what `ptk eval` says of the run directory
    assert rows[2]["target_loss"] == target_loss(out / "runs" / "002", domains)
    assert "held-out error (leave-one-out over 8 runs): mean absolute" in stdout
    assert (out / "search.png").read_bytes().startswith(b"\x89PNG")
    best = load_mixture(out / "best.yaml")
    assert [s.name for s in best.sources] == ["shakespeare", "wiki", "peps"]
    assert best.sources[0].share > 0.5, [s.share for s in best.sources]  # the target's own domain
    # the check: best.yaml trained at the same budget, against the uniform mixture (run 000), on the target
    code, _, err = ptk("train", config, "--set", f"data.mixture={out / 'best.yaml'}", "--set", f"run_dir={tmp_path}")
    assert code == 0, err[-3000:]
    assert target_loss(tmp_path, domains) < rows[0]["target_loss"] - 0.02


def test_a_rerun_trains_nothing_and_an_interrupted_run_resumes_from_its_checkpoint(search, domains) -> None:
    out, config, stdout = search
    written = {name: (out / name).read_bytes() for name in ("runs.jsonl", "best.yaml", "search.png")}
    code, again, err = ptk(*search_argv(domains, config, out), "--runs", RUNS)
    assert code == 0 and "ptk train: steps" not in err, err[-3000:]
    assert again == stdout
    assert {name: (out / name).read_bytes() for name in written} == written
    # run 003 as a kill after its step 16 leaves it: its newest checkpoint and its score gone
    run = out / "runs" / "003"
    (run / "target_loss.json").unlink()
    shutil.rmtree(max(run.glob("checkpoints/step-*")))
    code, _, err = ptk(*search_argv(domains, config, out), "--runs", RUNS)
    assert code == 0, err[-3000:]
    assert "steps 17-24 of 24" in err and err.count("ptk train: steps") == 1, err[-3000:]
    assert {name: (out / name).read_bytes() for name in written} == written


def test_parallel_proxy_runs_give_what_one_after_another_gives(search, domains, tmp_path) -> None:
    """Three runs: the first three proposals of the five (a proposal depends on the seed, not on --runs)."""
    out, config, _ = search
    code, _, err = ptk(*search_argv(domains, config, tmp_path / "out"), "--runs", 3, "--parallel", 2)
    assert code == 0, err[-3000:]
    sequential = (out / "runs.jsonl").read_text().splitlines()[:3]
    parallel = (tmp_path / "out" / "runs.jsonl").read_text().splitlines()
    strip = [{k: v for k, v in json.loads(line).items() if k != "predicted_loo"} for line in sequential]
    assert [{k: v for k, v in json.loads(line).items() if k != "predicted_loo"} for line in parallel] == strip


def test_bad_input_is_one_line_before_anything_trains(search, domains, tmp_path) -> None:
    from pretrainkit.shards import write_shards

    out, config, _ = search
    other = tmp_path / "other-tokenizer"
    write_shards([torch.arange(5).numpy()], other, vocab_size=257, eos_id=256, tokenizer_sha256="c" * 64)
    one = tmp_path / "one.yaml"
    one.write_text(yaml.safe_dump({"sources": [{"name": "s", "shards": str(domains / "shakespeare"), "weight": 1}]}))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "mine.txt").write_text("keep me")
    cases = {
        "runs": (search_argv(domains, config, tmp_path / "o1") + ["--runs", "2"], "--runs"),
        "target missing": (
            [
                "mix",
                "search",
                domains / "uniform.yaml",
                "--config",
                config,
                "--target",
                tmp_path / "no",
                "-o",
                tmp_path / "o4",
            ],
            "--target",
        ),
        "target of another tokenizer": (
            ["mix", "search", domains / "uniform.yaml", "--config", config, "--target", other, "-o", tmp_path / "o2"],
            "another tokenizer",
        ),
        "one source": (
            ["mix", "search", one, "--config", config, "--target", domains / "target", "-o", tmp_path / "o3"],
            "one training source",
        ),
        "another command's folder": (search_argv(domains, config, tmp_path / "notes"), "notes"),
        "another search's runs": (search_argv(domains, config, out) + ["--seed", "7"], "another search"),
    }
    proposal = (out / "runs" / "001" / "mixture.yaml").read_bytes()
    for name, (argv, said) in cases.items():
        code, _, err = ptk(*argv)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and said in lines[0], (name, err[-2000:])
        assert "ptk train" not in err
    assert not any((tmp_path / f"o{i}").exists() for i in (1, 2, 3, 4))
    assert (tmp_path / "notes" / "mine.txt").read_text() == "keep me"
    assert (out / "runs" / "001" / "mixture.yaml").read_bytes() == proposal
