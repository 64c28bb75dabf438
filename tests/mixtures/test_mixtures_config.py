"""Every validation error of a mixture names the file and the key; a valid mixture loads."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pretrainkit.errors import UserError
from pretrainkit.mixtures import load_mixture

THREE = """seed: 5
sources:
  - {name: wiki, shards: wiki, weight: 0.5}
  - {name: peps, shards: peps, weight: 0.3, max_epochs: 3}
  - {name: shakespeare, shards: shakespeare, weight: 0.2}
"""


def test_valid_mixture_loads_with_normalized_shares(write_yaml):
    mix = load_mixture(write_yaml(THREE.replace("0.5", "5").replace("0.3", "3").replace("0.2", "2")))
    assert [s.name for s in mix.sources] == ["wiki", "peps", "shakespeare"]
    assert [s.share for s in mix.sources] == pytest.approx([0.5, 0.3, 0.2])
    assert mix.tokenizer.vocab_size == 257 and mix.tokenizer.eos_id == 256 and mix.tokenizer.sha256 == "b" * 64
    assert mix.sources[1].max_epochs == 3
    assert len(mix.fingerprint) == 64


def test_fingerprint_follows_what_decides_the_order(write_yaml):
    base = load_mixture(write_yaml(THREE)).fingerprint
    assert load_mixture(write_yaml(THREE + "# a comment\n")).fingerprint == base
    assert load_mixture(write_yaml(THREE.replace("seed: 5", "seed: 6"))).fingerprint != base
    assert load_mixture(write_yaml(THREE.replace("0.3", "0.4"))).fingerprint != base


@pytest.mark.parametrize(
    "text, key, problem",
    [
        (THREE.replace("seed: 5", "seed: 5\nsead: 1"), "sead", "unknown key"),
        (THREE.replace("weight: 0.3,", "weight: 0.3, wieght: 1,"), "sources[1].wieght", "unknown key"),
        (THREE.replace("0.3", "-0.3"), "sources[1].weight", "must be finite and >= 0"),
        (THREE.replace("0.3", ".nan"), "sources[1].weight", "must be finite"),
        (THREE.replace("0.3", ".inf"), "sources[1].weight", "must be finite"),
        (THREE.replace("0.3", "lots"), "sources[1].weight", "expected a number"),
        (THREE.replace("weight: 0.3, ", ""), "sources[1].weight", "missing required key"),
        (THREE.replace("name: peps", "name: wiki"), "sources[1].name", "duplicate source name 'wiki'"),
        (THREE.replace("shards: peps", "shards: nowhere"), "sources[1].shards", "does not exist"),
        (THREE.replace("max_epochs: 3", "max_epochs: 0"), "sources[1].max_epochs", "must be finite and > 0"),
        (THREE.replace("seed: 5", "seed: -1"), "seed", "expected an integer"),
        (
            THREE.replace("max_epochs: 3", "replay: {from: base, mode: again}"),
            "sources[1].replay.mode",
            "expected one of",
        ),
        (THREE.replace("max_epochs: 3", "replay: {mode: seen}"), "sources[1].replay.from", "missing required key"),
        (
            THREE.replace("max_epochs: 3", "eval_only: true"),
            "sources[1].weight",
            "eval_only source must have no weight",
        ),
        ("seed: 1\nsources: []\n", "sources", "non-empty list"),
        ("seed: 1\nsources:\n  - {name: a, shards: wiki, weight: 0}\n", "sources", "at least one needs a weight > 0"),
        (
            THREE.replace("shards: shakespeare", "shards: othertok"),
            "sources[2].shards",
            "tokenizer differs from sources[0]",
        ),
    ],
)
def test_each_error_names_file_and_key(write_yaml, text, key, problem):
    path = write_yaml(text)
    with pytest.raises(UserError) as e:
        load_mixture(path)
    message = str(e.value)
    assert message.startswith(f"{path}: {key}"), message
    assert problem in message and "\n" not in message


def test_invalid_yaml_and_missing_file(write_yaml, tmp_path):
    path = write_yaml("seed: 1\nsources: [\n")
    with pytest.raises(UserError, match=rf"^{path}: line \d+: invalid YAML"):
        load_mixture(path)
    with pytest.raises(UserError, match="mixture file not found"):
        load_mixture(tmp_path / "absent.yaml")


def test_shard_set_failing_verification_is_refused(shard_root, tmp_path):
    broken = tmp_path / "peps"
    shutil.copytree(shard_root / "peps", broken)
    shard = sorted(broken.glob("shard-*"))[0]
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different content: only the sha256 check sees it
    shard.write_bytes(bytes(data))
    path = tmp_path / "mix.yaml"
    path.write_text(
        "sources:\n  - {name: peps, shards: peps, weight: 1}\n"
        f"  - {{name: wiki, shards: {shard_root / 'wiki'}, weight: 1}}\n"
    )
    with pytest.raises(
        UserError, match=rf"^{path}: sources\[0\]\.shards: shard set fails verification: .*{shard.name}: altered"
    ):
        load_mixture(path)
    (broken / "manifest.json").unlink()
    with pytest.raises(UserError, match=rf"^{path}: sources\[0\]\.shards: .*manifest.json: missing"):
        load_mixture(path)


def test_validation_only_sources(write_yaml):
    mix = load_mixture(write_yaml(THREE.replace("weight: 0.2", "eval_only: true").replace("weight: 0.3", "weight: 0")))
    assert [s.eval_only for s in mix.sources] == [False, True, True]
    assert [s.name for s in mix.train_sources] == ["wiki"]
    assert [s.share for s in mix.sources] == [1.0, 0.0, 0.0]


def test_yaml_1_1_exponent_numbers_are_numbers(write_yaml):
    """YAML 1.1 reads `1e-3` (no dot) as a string; the train config accepted it, the mixture did not."""
    mix = load_mixture(
        write_yaml(THREE.replace("weight: 0.5", "weight: 1e-3").replace("max_epochs: 3", "max_epochs: 1e300"))
    )
    assert mix.sources[0].weight == 1e-3 and mix.sources[1].max_epochs == 1e300
    with pytest.raises(UserError, match=r"sources\[0\].weight: expected a number, got 'true'"):
        load_mixture(write_yaml(THREE.replace("weight: 0.5", "weight: 'true'")))


def test_the_same_shard_set_under_two_names_is_refused(write_yaml, shard_root, tmp_path):
    copy = tmp_path / "wiki-copy"
    shutil.copytree(shard_root / "wiki", copy)
    for shards in ("wiki", str(copy)):
        path = write_yaml(THREE.replace("shards: shakespeare", f"shards: {shards}"))
        with pytest.raises(UserError) as e:
            load_mixture(path)
        assert str(e.value).startswith(f"{path}: sources[2].shards: the same shard set as sources[0] (wiki)")


def test_one_tokenizer_means_one_vocabulary_not_one_file(tmp_path, tokenizer_variant):
    """Sources tokenized with a tokenizer.json and with that file written again in other bytes mix;
    with two token ids exchanged they do not, and the error names both shard sets and what differs."""
    from pretrainkit.dataprep.tokenize.corpus import write_text_shards
    from pretrainkit.shards.tokenizer import train_tokenizer

    plays = [f"the {w} of the {w}s and the other {w}" for w in ("cat", "dog", "bird", "fish", "horse")] * 5
    train_tokenizer(plays, vocab_size=300, min_frequency=1).save(str(tmp_path / "tokenizer.json"))
    paths = {"a": tmp_path / "tokenizer.json"}
    for how in ("reserialized", "swapped"):
        paths[how] = tokenizer_variant(tmp_path / "tokenizer.json", tmp_path / how / "tokenizer.json", how)
    sets = {
        name: write_text_shards(plays if name == "a" else plays[::-1], tmp_path / f"shards-{name}", path)
        for name, path in paths.items()
    }
    assert sets["a"].tokenizer.sha256 != sets["reserialized"].tokenizer.sha256

    def mixture(second: str) -> Path:
        path = tmp_path / f"mix-{second}.yaml"
        path.write_text(
            f"seed: 1\nsources:\n  - {{name: a, shards: shards-a, weight: 1}}\n"
            f"  - {{name: b, shards: shards-{second}, weight: 1}}\n"
        )
        return path

    assert load_mixture(mixture("reserialized")).tokenizer.vocab_fingerprint == sets["a"].tokenizer.vocab_fingerprint
    with pytest.raises(UserError) as e:
        load_mixture(mixture("swapped"))
    message, (ours, theirs) = str(e.value), (sets["swapped"].tokenizer, sets["a"].tokenizer)
    assert "\n" not in message and "sources[1].shards: tokenizer differs from sources[0] (a)" in message
    assert f"{tmp_path / 'shards-swapped'} vs {tmp_path / 'shards-a'}" in message
    assert (
        f"same vocab size {ours.vocab_size} but other tokens, merges or special tokens (vocabulary fingerprint "
        f"{ours.vocab_fingerprint[:12]} vs {theirs.vocab_fingerprint[:12]})"
    ) in message


def test_manifests_without_a_vocabulary_fingerprint_compare_by_sha256(write_yaml):
    """othertok/ (written before fingerprints, as old manifests are) differs from shakespeare/ by sha256 only."""
    with pytest.raises(UserError, match=r"tokenizer.json sha256 cccccccccccc vs bbbbbbbbbbbb \(a manifest without"):
        load_mixture(write_yaml(THREE.replace("shards: shakespeare", "shards: othertok")))


def test_a_key_given_twice_is_refused_naming_file_line_and_key(write_yaml):
    path = write_yaml(THREE.replace("weight: 0.3,", "weight: 0.3, weight: 5,"))
    with pytest.raises(UserError) as e:
        load_mixture(path)
    assert str(e.value) == f"{path}: line 4: invalid YAML (duplicate key 'weight', first given on line 4)"
    path = write_yaml(THREE + "seed: 6\n")
    with pytest.raises(UserError) as e:
        load_mixture(path)
    assert str(e.value) == f"{path}: line 6: invalid YAML (duplicate key 'seed', first given on line 1)"


def test_an_error_quotes_at_most_200_characters_of_a_value_or_key(write_yaml):
    huge = "x" * 100_000
    path = write_yaml(THREE.replace("0.3", huge))
    with pytest.raises(UserError) as e:
        load_mixture(path)
    assert str(e.value) == f"{path}: sources[1].weight: expected a number, got '{'x' * 199}…(100002 chars)"
    path = write_yaml(THREE.replace("seed: 5", f"seed: 5\n? {huge}\n: 1"))
    with pytest.raises(UserError) as e:
        load_mixture(path)
    assert str(e.value).startswith(f"{path}: {'x' * 200}…(100000 chars): unknown key (allowed: ")


def test_config_document_reads_back_to_the_same_mixture_wherever_it_is_written(write_yaml, tmp_path):
    """What `ptk mix search` writes its proposals and best.yaml as: every key kept, paths absolute."""
    import yaml

    from pretrainkit.mixtures.config import config_document, read_mixture_config

    text = THREE.replace("seed: 5", "seed: 5\nholdout: {fraction: 0.03, min_tokens: 100}")
    given = write_yaml(text + "  - {name: held, shards: tiny, eval_only: true}\n")
    elsewhere = tmp_path / "deeper" / "copy.yaml"
    elsewhere.parent.mkdir()
    elsewhere.write_text(yaml.safe_dump(config_document(read_mixture_config(given)), sort_keys=False))
    assert load_mixture(elsewhere).fingerprint == load_mixture(given).fingerprint
    again = read_mixture_config(elsewhere)
    assert again.sources == read_mixture_config(given).sources and again.holdout.fraction == 0.03
