"""Fixtures for training runs on real text: Tiny Shakespeare and WikiText-2 as byte-level shard sets.

Byte-level "tokenizer": token = UTF-8 byte, EOS = 256, vocab 257, so no tokenizer training is needed
and the model has something real to learn (loss falls from ln 257 = 5.55 towards ~2.5).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from fixtures.corpora import DATA, need_data

ROOT = Path(__file__).resolve().parents[2]
# How long a subprocess may take before a test calls it hung. A bound for a hang, never for speed:
# with other engineers' suites on the same 2 cores, one 2-process `ptk train` took over 180 s.
HANG_SECONDS = 900


def _bytes(text: str) -> np.ndarray:
    return np.frombuffer(text.encode("utf-8"), dtype=np.uint8).astype(np.uint16)


@pytest.fixture(scope="session")
def byte_mixture(tmp_path_factory) -> Path:
    """A mixture YAML over two byte-level shard sets (shakespeare 0.7, wiki 0.3) with a held-out split."""
    from pretrainkit.shards import write_shards

    root = tmp_path_factory.mktemp("train_shards")
    text = need_data(DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:200_000]
    speeches = [s for s in text.split("\n\n") if s.strip()]
    wiki = need_data(DATA / "wikitext2" / "valid.txt").read_text(encoding="utf-8")
    articles = [a for a in re.split(r"\n(?= = [^=].* = \n)", wiki) if a.strip()][:30]
    for name, docs in (("shakespeare", speeches), ("wiki", articles)):
        write_shards([_bytes(d) for d in docs], root / name, vocab_size=257, eos_id=256, tokenizer_sha256="b" * 64)
    mix = root / "mix.yaml"
    mix.write_text(
        "seed: 1\nholdout: {fraction: 0.02, min_tokens: 2048}\nsources:\n"
        "  - {name: shakespeare, shards: shakespeare, weight: 0.7}\n  - {name: wiki, shards: wiki, weight: 0.3}\n"
    )
    return mix


class TrainKit:
    """Helpers the run tests share (a fixture, since test modules cannot import each other here)."""

    def __init__(self, mixture: Path) -> None:
        self.mixture = mixture

    def config(self, directory: Path, **overrides) -> Path:
        """Write a tiny training config (`run_dir: run` beside it); keyword overrides update sections."""
        cfg = {
            "run_dir": "run",
            "seed": 0,
            "data": {"mixture": str(self.mixture), "seq_len": 32},
            "model": {"d_model": 32, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2},
            "batch": {"global_size": 8, "micro_size": 2},
            "optim": {"lr": 1e-2, "min_lr": 1e-3, "warmup_steps": 2, "clip": 1.0},
            "max_steps": 16,
            "checkpoint": {"every": 4, "keep": 2},
            "eval": {"every": 8, "batches": 1},
            "spikes": {"action": "none"},
        }
        for key, value in overrides.items():
            cfg[key] = {**cfg[key], **value} if isinstance(value, dict) and isinstance(cfg.get(key), dict) else value
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / "run.yaml"
        path.write_text(yaml.safe_dump(cfg))
        return path

    root = ROOT

    @staticmethod
    def ptk_command(config: Path, *args: str, nproc: int = 1) -> list[str]:
        return [sys.executable, "-m", "pretrainkit.cli", "train", str(config), "--nproc", str(nproc), *args]

    hang_seconds = HANG_SECONDS

    @staticmethod
    def start(command: list[str], **popen) -> subprocess.Popen:
        """`command` started in a session of its own, as a terminal or a scheduler starts it (so that a
        signal to its group reaches it alone), on one thread as under torchrun."""
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        return subprocess.Popen(command, start_new_session=True, cwd=ROOT, env=env, **popen)

    def ptk(
        self, config: Path, *args: str, nproc: int = 1, timeout: float = HANG_SECONDS
    ) -> subprocess.CompletedProcess:
        """`ptk train CONFIG` in a subprocess (through torchrun for nproc > 1)."""
        cmd = self.ptk_command(config, *args, nproc=nproc)
        env = {**os.environ, "OMP_NUM_THREADS": "1"}  # as torchrun sets it; see one_thread
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)

    @staticmethod
    def processes(marker: str) -> list[int]:
        """Pids of the processes whose command line mentions `marker` (a config path unique to a test):
        ptk, torchrun and its workers, whatever session or process group each runs in."""
        pids = []
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit() and int(proc.name) != os.getpid():
                try:
                    if marker in (proc / "cmdline").read_bytes().decode(errors="replace"):
                        pids.append(int(proc.name))
                except OSError:
                    continue
        return pids

    @classmethod
    def processes_end(cls, marker: str, timeout: float = HANG_SECONDS) -> bool:
        """Whether every process of `marker` has ended within `timeout` seconds (a bound for a hang,
        not a speed expectation: a loaded machine only makes it take longer)."""
        deadline = time.monotonic() + timeout
        while cls.processes(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        return not cls.processes(marker)

    @classmethod
    def kill_processes(cls, marker: str) -> None:
        for pid in cls.processes(marker):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    @staticmethod
    def objects(s3, prefix: str) -> dict[str, bytes]:
        """The objects under the URL `prefix` on the test's S3 server, by their path relative to it."""
        bucket, _, key = prefix.removeprefix("s3://").partition("/")
        return {k[len(key) + 1 :]: v for k, v in s3.objects(bucket).items() if k.startswith(key + "/")}

    @staticmethod
    def whole_checkpoints(files: dict[str, bytes]) -> list[str]:
        """The checkpoints with a meta.json among a run's `files`, each checked: every file it lists, at its sha256."""
        names = sorted({k.split("/")[1] for k in files if k.startswith("checkpoints/") and k.endswith("/meta.json")})
        for name in names:
            meta = json.loads(files[f"checkpoints/{name}/meta.json"])
            for file, (size, digest) in meta["files"].items():
                data = files[f"checkpoints/{name}/{file}"]
                assert len(data) == size and hashlib.sha256(data).hexdigest() == digest, (name, file)
        return names

    @staticmethod
    def rows(run_dir: Path) -> list[dict]:
        """The training rows of a run's metrics.jsonl."""
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        return [r for r in rows if "loss" in r]


@pytest.fixture
def kit(byte_mixture: Path, one_thread) -> TrainKit:
    return TrainKit(byte_mixture)


@pytest.fixture(scope="session")
def session_kit(byte_mixture: Path) -> TrainKit:
    """The same helpers for module- and session-scoped fixtures (a base run several tests continue)."""
    return TrainKit(byte_mixture)


# Both Gemmas: a sliding layer (window 16, shorter than the tests' sequences) then a full one,
# query_pre_attn_scalar other than head_dim, a final logit soft cap, tied embeddings.
GEMMA = dict(
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    sliding_window=16,
    layer_types=["sliding_attention", "full_attention"],
    query_pre_attn_scalar=24,
    final_logit_softcapping=30.0,
    tie_word_embeddings=True,
)
HF_FAMILIES = {
    # Llama 3.1-style: llama3 rope scaling, grouped-query attention 4:1, untied, exact intermediate size.
    "llama": dict(
        model_type="llama",
        num_attention_heads=8,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        rope_theta=500000.0,
        rope_scaling={
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
    ),
    # Mistral: head_dim 24, not hidden_size / heads (64 / 4 = 16).
    "mistral": dict(
        model_type="mistral",
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        tie_word_embeddings=False,
        sliding_window=128,
    ),
    # Qwen2: q/k/v biases, tied embeddings, 2:1 GQA.
    "qwen2": dict(
        model_type="qwen2", num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True, rope_theta=1000000.0
    ),
    # Qwen3: per-head q/k norms, head_dim 24 (not 64 / 4), untied.
    "qwen3": dict(
        model_type="qwen3", num_attention_heads=4, num_key_value_heads=2, head_dim=24, tie_word_embeddings=False
    ),
    # OLMo 2: norms after attention and FFN, q/k norms over the whole projection, GQA 2:1.
    "olmo2": dict(model_type="olmo2", num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=False),
    # Gemma 2: a sliding layer then a full one (GEMMA), attention scores soft-capped too (a cap low
    # enough to bite on these scores), one RoPE base.
    "gemma2": dict(model_type="gemma2", **GEMMA, attn_logit_softcapping=5.0),
    # Gemma 3: GEMMA, each layer type with its RoPE base.
    "gemma3": dict(
        model_type="gemma3_text",
        **GEMMA,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1000000.0},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
        },
    ),
    # Qwen3-MoE: a dense first layer (mlp_only_layers, intermediate_size) then 2 sparse ones of 8 experts
    # (moe_intermediate_size), top-2 renormalized, per-head q/k norms, head_dim 24.
    "qwen3_moe": dict(
        model_type="qwen3_moe",
        num_hidden_layers=3,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=24,
        tie_word_embeddings=False,
        num_experts=8,
        num_experts_per_tok=2,
        moe_intermediate_size=32,
        norm_topk_prob=True,
        mlp_only_layers=[0],
        decoder_sparse_step=1,
    ),
    # OLMoE: top-2 of 8 experts not renormalized, q/k norms over the whole projection, GQA 2:1.
    "olmoe": dict(
        model_type="olmoe",
        num_attention_heads=4,
        num_key_value_heads=2,
        tie_word_embeddings=False,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=False,
    ),
    # Mixtral: top-2 of 4 experts (always renormalized), GQA 4:1.
    "mixtral": dict(
        model_type="mixtral",
        num_attention_heads=4,
        num_key_value_heads=1,
        tie_word_embeddings=False,
        num_local_experts=4,
        num_experts_per_tok=2,
        sliding_window=None,
    ),
}


@pytest.fixture(params=sorted(HF_FAMILIES))
def family(request) -> str:
    return request.param


def build_hf_model(
    root: Path,
    family: str,
    dtype: torch.dtype = torch.float32,
    max_shard_size: str | None = None,
    vocab_size: int = 300,
    **overrides,
):
    """A tiny random Hugging Face model of a family saved under `root`: (directory, the transformers model).

    Every parameter (norms and biases too) is redrawn from N(0, 0.1) so that the logits are far from
    uniform and a wrong permutation, bias or norm would show."""
    import transformers

    kw = {"num_hidden_layers": 2, **HF_FAMILIES[family], **overrides}
    config = transformers.AutoConfig.for_model(
        vocab_size=vocab_size,
        hidden_size=64,
        intermediate_size=100,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        bos_token_id=None,
        eos_token_id=None,
        **kw,
    )
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.1).add_(1.0 if "norm" in name else 0.0)
    model = model.to(dtype)
    directory = root / f"hf-{family}-{str(dtype).split('.')[-1]}"
    model.save_pretrained(directory, **({"max_shard_size": max_shard_size} if max_shard_size else {}))
    return directory, model


@pytest.fixture
def hf_model(tmp_path: Path):
    """`build_hf_model` under this test's tmp_path."""
    return lambda family, **kw: build_hf_model(tmp_path, family, **kw)


@pytest.fixture(scope="session")
def shared_hf_model(tmp_path_factory):
    """`build_hf_model` in a fresh folder, for module- or session-scoped fixtures."""
    return lambda family, **kw: build_hf_model(tmp_path_factory.mktemp("hf"), family, **kw)


@pytest.fixture(scope="session")
def hf_corpus(tmp_path_factory):
    """A byte-level BPE tokenizer (HF `tokenizer_config.json` naming its EOS) trained on Tiny
    Shakespeare, and the text split into documents: what an HF model directory gets as its tokenizer."""
    from pretrainkit.shards.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("hf_tokenizer")
    text = need_data(DATA / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")[:300_000]
    speeches = [s for s in text.split("\n\n") if s.strip()]
    train_tokenizer(speeches, vocab_size=300).save(str(root / "tokenizer.json"))
    (root / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": "<|endoftext|>"})
    )
    return root, speeches


@pytest.fixture
def hf_model_with_tokenizer(hf_model, hf_corpus, tmp_path: Path):
    """An HF model directory of `family` with the hf_corpus tokenizer (vocab padded to 320, as HF models
    often are) and a mixture of Shakespeare tokenized with `--tokenizer DIR`: (directory, model, mixture)."""
    import shutil

    from pretrainkit.dataprep.tokenize.corpus import write_text_shards

    def build(family: str, **kw):
        directory, model = hf_model(family, vocab_size=320, **kw)
        for name in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(hf_corpus[0] / name, directory / name)
        shards = tmp_path / f"shards-{family}"
        if not shards.exists():
            write_text_shards(hf_corpus[1], shards, directory)
        mix = tmp_path / f"mix-{family}.yaml"
        mix.write_text(
            "seed: 3\nholdout: {fraction: 0.02, min_tokens: 1024}\n"
            f"sources:\n  - {{name: plays, shards: {shards.name}, weight: 1}}\n"
        )
        return directory, model, mix

    return build
