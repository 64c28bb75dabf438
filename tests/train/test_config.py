"""The training config: YAML in, validated dataclasses out; `--set` overrides; errors name the key."""

from __future__ import annotations

import os
from dataclasses import fields
from pathlib import Path

import pytest
import yaml

from pretrainkit.errors import UserError
from pretrainkit.shards.set_copies import ShardCache
from pretrainkit.train.config import ModelSection, load_config, to_dict
from pretrainkit.train.model.llama import ModelConfig
from pretrainkit.train.model.resolve import model_config

GOOD = """
run_dir: runs/tiny
seed: 7
data: {mixture: mix.yaml, seq_len: 64}
model: {d_model: 64, n_layers: 2, n_heads: 4, n_kv_heads: 2}
batch: {global_size: 8, micro_size: 2}
optim: {lr: 3e-4, min_lr: 3.0e-5, weight_decay: 0.1, betas: [0.9, 0.95], warmup_steps: 10, schedule: wsd, clip: 1.0}
max_steps: 100
parallel: fsdp
precision: bf16
activation_checkpointing: true
checkpoint: {every: 50, keep: 3}
eval: {every: 25, batches: 2}
"""


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "conf" / "run.yaml"
    p.parent.mkdir(exist_ok=True)
    p.write_text(text)
    return p


def test_full_config_loads_with_paths_relative_to_the_file(tmp_path: Path) -> None:
    cfg = load_config(write(tmp_path, GOOD))
    assert cfg.optim.lr == 3e-4 and cfg.optim.betas == (0.9, 0.95) and cfg.optim.schedule == "wsd"
    assert cfg.parallel.data == "fsdp" and cfg.precision == "bf16" and cfg.activation_checkpointing
    assert cfg.run_dir == str(tmp_path / "conf" / "runs" / "tiny")
    assert cfg.data.mixture == str(tmp_path / "conf" / "mix.yaml")
    m = model_config(cfg, vocab_size=1000)
    assert (m.vocab_size, m.max_seq_len, m.kv_heads) == (1000, 64, 2)
    # The resolved config round-trips through YAML.
    assert yaml.safe_load(yaml.safe_dump(to_dict(cfg)))["optim"]["betas"] == [0.9, 0.95]


def test_overrides_apply_and_paths_given_there_are_relative_to_cwd(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = load_config(
        write(tmp_path, GOOD), ["optim.lr=1e-3", "parallel=ddp", "model.n_kv_heads=null", "run_dir=out/r"]
    )
    assert cfg.optim.lr == 1e-3 and cfg.parallel.data == "ddp" and cfg.model.n_kv_heads is None
    assert cfg.run_dir == str(tmp_path / "out" / "r")


@pytest.mark.parametrize(
    "override, named",
    [
        ("model.d_modle=64", "model.d_modle: unknown key"),
        ("optim.schedule=linear", "optim.schedule: must be one of cosine, wsd"),
        ("parallel=tp", "parallel.data: must be one of"),
        ("batch.micro_size=3", "batch.global_size: must be a multiple of batch.micro_size"),
        ("optim.betas=[0.9]", "optim.betas: expected a list of 2 values"),
        ("model.layer_types=full_attention", "model.layer_types: expected a list, got 'full_attention'"),
        ("model.layer_types=[1]", r"model.layer_types[0]: expected str, got 1"),
        ("max_steps=ten", "max_steps: expected int"),
        ("optim.min_lr=1", "optim.min_lr: must be <= optim.lr"),
        ("activation_checkpointing=3", "activation_checkpointing: expected bool"),
        ("eval=5", "eval: must be a mapping"),
        ("bogus", "expected key.path=value"),
        ("eval.batches=0", "eval.batches: must be >= 1"),
        ("spikes.min_history=60", r"spikes.min_history: must be <= spikes.window \(50\)"),
        (
            "optim.decay_fraction=0.95",
            r"optim.decay_fraction: the decay phase \(95 steps\) is longer than the 90 steps after warmup",
        ),
    ],
)
def test_bad_values_fail_naming_the_key(tmp_path: Path, override: str, named: str) -> None:
    with pytest.raises(UserError, match=named.replace("[", r"\[")):
        load_config(write(tmp_path, GOOD), [override])


def test_data_cache_is_the_shard_cache_with_the_variables_as_defaults(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("PTK_CACHE_DIR", "before")
    monkeypatch.setenv("PTK_SHARD_CACHE_BYTES", "1G")
    environment = dict(os.environ)
    cfg = load_config(write(tmp_path, GOOD), ["data.cache.max_bytes=50000"])
    assert cfg.data.cache.dir is None and cfg.data.cache.max_bytes == "50000"
    assert cfg.data.cache.shard_cache() == ShardCache(Path("before"), 50_000)
    cfg = load_config(write(tmp_path, GOOD.replace("seq_len: 64}", "seq_len: 64, cache: {dir: c, max_bytes: 20G}}")))
    assert cfg.data.cache.dir == str(tmp_path / "conf" / "c")  # relative to the file, like the other paths
    assert cfg.data.cache.shard_cache() == ShardCache(tmp_path / "conf" / "c", 20 * 10**9)
    assert load_config(write(tmp_path, GOOD)).data.cache.shard_cache() == ShardCache(Path("before"), 10**9)
    assert dict(os.environ) == environment  # load_config has no side effects: the settings are passed down
    for bad in ("lots", "0", "-5"):
        with pytest.raises(UserError, match=rf"^.*run\.yaml: data\.cache\.max_bytes: must be a size in bytes .*{bad}"):
            load_config(write(tmp_path, GOOD), [f"data.cache.max_bytes={bad}"])
    with pytest.raises(UserError, match=r"data\.cache\.size: unknown key \(known: dir, max_bytes\)"):
        load_config(write(tmp_path, GOOD), ["data.cache.size=5"])


def test_missing_required_key_and_bad_model_shape_are_named(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"run\.yaml: max_steps: required key is missing"):
        load_config(write(tmp_path, GOOD.replace("max_steps: 100", "")))
    cfg = load_config(write(tmp_path, GOOD), ["model.n_heads=3"])
    with pytest.raises(UserError, match="model.d_model"):
        model_config(cfg, vocab_size=100, where="run.yaml")


def test_unset_model_keys_take_model_config_defaults(tmp_path: Path) -> None:
    """ModelConfig holds the model's defaults: a `model:` section that sets nothing gives exactly them, and a
    key it sets replaces that one only."""
    bare = load_config(write(tmp_path, "\n".join(line for line in GOOD.splitlines() if not line.startswith("model:"))))
    assert model_config(bare, vocab_size=100) == ModelConfig(vocab_size=100, max_seq_len=64)
    shaped = model_config(load_config(write(tmp_path, GOOD)), vocab_size=100)
    assert shaped == ModelConfig(vocab_size=100, max_seq_len=64, d_model=64, n_layers=2, n_heads=4, n_kv_heads=2)
    assert {f.name for f in fields(ModelSection)} <= {f.name for f in fields(ModelConfig)}


def test_unreadable_or_non_mapping_yaml(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="absent.yaml: config not found"):
        load_config(tmp_path / "absent.yaml")
    with pytest.raises(UserError, match="invalid YAML"):
        load_config(write(tmp_path, "run_dir: [unclosed"))
    with pytest.raises(UserError, match="must be a mapping"):
        load_config(write(tmp_path, "- a\n- b\n"))


def test_a_key_given_twice_is_refused_naming_file_line_and_key(tmp_path: Path) -> None:
    text = GOOD.replace("max_steps: 100", "max_steps: 100\noptim: {lr: 1.0}")
    first, again = [n for n, line in enumerate(text.splitlines(), 1) if line.startswith("optim:")]
    path = write(tmp_path, text)
    with pytest.raises(UserError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: line {again}: invalid YAML (duplicate key 'optim', first given on line {first})"
    optim = next(line for line in GOOD.splitlines() if line.startswith("optim:"))
    merged = GOOD.replace(optim, "optim: {<<: {lr: 3e-4, clip: 1.0}, clip: 0.5}")  # a merged key may be set again
    assert yaml.safe_load(merged)["optim"]["clip"] == load_config(write(tmp_path, merged)).optim.clip == 0.5
    with pytest.raises(UserError, match=r"^--set optim=\{lr: 1, lr: 2\}: duplicate key 'lr'"):
        load_config(write(tmp_path, GOOD), ["optim={lr: 1, lr: 2}"])


def test_an_error_quotes_at_most_200_characters_of_a_value_or_key(tmp_path: Path) -> None:
    huge = "x" * 100_000
    path = write(tmp_path, GOOD.replace("seed: 7", f"seed: {huge}"))
    with pytest.raises(UserError) as e:
        load_config(path)
    assert str(e.value) == f"{path}: seed: expected int, got '{'x' * 199}…(100002 chars)"
    path = write(tmp_path, GOOD.replace("seed: 7", f"seed: 7\n? {huge}\n: 1"))
    with pytest.raises(UserError) as e:
        load_config(path)
    assert str(e.value).startswith(f"{path}: {'x' * 200}…(100000 chars): unknown key (known: ")
