"""Loading at scale: a ~140 MB Hugging Face model loaded on 2 FSDP processes grows each process's
peak resident memory by well under the model's size (each reads only its shards), and the loaded
parameters are those one process loads."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

WORKER = Path(__file__).with_name("hf_load_worker.py")


def launch(directory: Path, out: Path, nproc: int) -> list[dict]:
    out.mkdir()
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(WORKER),
        str(directory),
        str(out),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(nproc)]


@pytest.mark.slow
@pytest.mark.distributed
def test_two_fsdp_processes_each_hold_half(tmp_path: Path) -> None:
    import transformers

    config = transformers.LlamaConfig(
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=8,
        num_attention_heads=8,
        num_key_value_heads=4,
        tie_word_embeddings=False,
    )
    torch.manual_seed(0)
    transformers.LlamaForCausalLM(config).save_pretrained(tmp_path / "hf")
    full = (tmp_path / "hf" / "model.safetensors").stat().st_size  # fp32: the model's size in memory too
    one = launch(tmp_path / "hf", tmp_path / "one", 1)
    two = launch(tmp_path / "hf", tmp_path / "two", 2)
    assert two[0]["checksum"] == pytest.approx(one[0]["checksum"], rel=1e-9)
    for rank in two:
        assert rank["local_bytes"] == pytest.approx(full / 2, rel=0.02)
        assert rank["peak_growth"] < 0.65 * full, (rank, full)
    assert one[0]["peak_growth"] > 0.9 * full  # the measure does see a whole model
