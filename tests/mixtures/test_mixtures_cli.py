"""`ptk mix inspect`: the table, the budget arithmetic, warnings and exit codes; the examples load."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from pretrainkit.cli import main
from pretrainkit.mixtures import load_mixture

EXAMPLES = Path(__file__).resolve().parents[2] / "mixtures" / "examples"


def _row(out: str, name: str) -> list[str]:
    return next(line.split() for line in out.splitlines() if line.startswith(name + " "))


def test_inspect_prints_shares_tokens_and_epochs(write_yaml, capsys):
    path = write_yaml("""seed: 2
sources:
  - {name: wiki, shards: wiki, weight: 3}
  - {name: shakespeare, shards: shakespeare, weight: 1}
""")
    assert main(["mix", "inspect", str(path), "--tokens", "4M", "--seq-len", "99"]) == 0
    out = capsys.readouterr().out
    assert "budget       4,000,000 tokens = 40,405 sequences of 99 (+1) tokens" in out
    mix = load_mixture(path)
    wiki, shakespeare = _row(out, "wiki"), _row(out, "shakespeare")
    assert wiki[1:3] == ["3", "75.00%"] and shakespeare[1:3] == ["1", "25.00%"]
    assert int(wiki[4].replace(",", "")) == mix.sources[0].train_tokens
    assert int(wiki[6].replace(",", "")) == mix.sources[0].heldout_tokens
    drawn = int(wiki[7].replace(",", "")) + int(shakespeare[7].replace(",", ""))
    assert drawn == 40_405 * 100  # every sequence is one of the two
    assert float(shakespeare[8]) == pytest.approx(
        int(shakespeare[7].replace(",", "")) / mix.sources[1].train_tokens, abs=0.01
    )
    assert "shakespeare: repeated" in out  # over 4 epochs without max_epochs


def test_budget_past_max_epochs_warns_and_exits_1(write_yaml, capsys):
    path = write_yaml(
        "sources:\n  - {name: wiki, shards: wiki, weight: 1}\n"
        "  - {name: peps, shards: peps, weight: 1, max_epochs: 2}\n"
    )
    assert main(["mix", "inspect", str(path), "--tokens", "300K", "--no-verify"]) == 0
    assert main(["mix", "inspect", str(path), "--tokens", "2.5M", "--no-verify"]) == 1
    out = capsys.readouterr().out
    assert re.search(r"peps: needs \d+\.\d\d epochs for this budget, over max_epochs=2", out)


def test_upsampled_small_source_and_validation_only_rows(write_yaml, capsys):
    path = write_yaml(
        "sources:\n  - {name: wiki, shards: wiki, weight: 1}\n  - {name: peps, shards: peps, weight: 0}\n"
        "  - {name: tiny, shards: tiny, weight: 1}\n"
    )
    assert main(["mix", "inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[_index(out, "peps")].endswith("(validation only)")
    assert re.search(r"tiny: share 50\.0% but only 0\.\d% of the training tokens: upsampled \d+x", out)


def _index(out: str, name: str) -> int:
    return next(i for i, line in enumerate(out.splitlines()) if line.startswith(name + " "))


def test_bad_mixture_is_one_line_and_exit_2(write_yaml, capsys):
    path = write_yaml("sources:\n  - {name: wiki, shards: wiki, weight: -1}\n")
    assert main(["mix", "inspect", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"ptk: error: {path}: sources[0].weight: must be finite and >= 0, got -1"
    with pytest.raises(SystemExit):
        main(["mix", "inspect", str(path), "--tokens", "lots"])


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("*.yaml")))
def test_examples_load_against_the_demo_layout(shard_root, tmp_path, capsys, example):
    """Each example, placed as in the repository, against shard sets where the demo writes them."""
    (tmp_path / "mixtures" / "examples").mkdir(parents=True)
    nested = tmp_path / "mixtures" / "examples" / example
    shutil.copy(EXAMPLES / example, nested)
    (tmp_path / "demo_out" / "shards").mkdir(parents=True)
    for name, source in (("code", "peps"), ("docs", "wiki")):
        (tmp_path / "demo_out" / "shards" / name).symlink_to(shard_root / source)
    (tmp_path / "demo_out" / "runs" / "base").mkdir(parents=True)  # continued.yaml replays it
    assert main(["mix", "inspect", str(nested), "--tokens", "200K", "--seq-len", "256"]) == 0
    out = capsys.readouterr().out
    assert _row(out, "code") and _row(out, "docs")


def test_a_missing_replay_run_exits_1_naming_the_key(write_yaml, shard_root, capsys):
    path = write_yaml("sources:\n  - {name: wiki, shards: wiki, weight: 1, replay: {from: runs/never}}\n")
    assert main(["mix", "inspect", str(path), "--no-verify"]) == 1
    out = capsys.readouterr().out
    assert f"wiki: sources[0].replay.from: {shard_root / 'runs' / 'never'} does not exist" in out
