"""One proxy run of a search: a normal training run on one proposal's mixture, then its loss on the target.

    result = proxy_run(ProxyJob(cfg, where="train.yaml", target="shards/target", tokenizer_sha256=sha))
    result["target_loss"]

`cfg` is the user's training config with `run_dir` (OUT/runs/NNN) and `data.mixture` (the
proposal's YAML in it) set. The run trains as `ptk train` does, so a killed one resumes from its
newest checkpoint and a finished one is not trained again; then every document of the target shard
set is scored as `ptk eval --shards` scores it, and the result written to `TARGET_FILE` in the run
directory: a run that has it is done, and a rerun of the search only reads it. A module-level
function of a picklable job, so that it runs in this process, on a local worker or as a Ray task.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from pretrainkit.files import read_json_object, write_text_atomic
from pretrainkit.train.config import TrainConfig

TARGET_FILE = "target_loss.json"
DIGITS = 6  # as `ptk eval` rounds: the last, noise-level digits stay out of comparisons


@dataclass(frozen=True)
class ProxyJob:
    cfg: TrainConfig
    where: str  # the training config file, for messages
    target: str  # the target shard set
    tokenizer_sha256: str  # the mixture's: the target was checked to match it


def proxy_run(job: ProxyJob) -> dict:
    """{"target_loss", "target_tokens", "steps"} of the job's run, trained (or resumed) and scored once."""
    done = Path(job.cfg.run_dir) / TARGET_FILE
    if done.is_file():
        return read_json_object(done, "a proxy run's target loss")
    from pretrainkit.train.loop.run import run_training  # torch loads only where a run trains

    run_training(job.cfg, where=job.where, resume=True)
    result = target_score(job)
    write_text_atomic(done, json.dumps(result, sort_keys=True) + "\n")
    return result


def target_score(job: ProxyJob) -> dict:
    """The run's newest checkpoint scored on every document of the target, windows of the training's
    seq_len, in batches of its micro-batch size (what fitted in training fits here)."""
    from pretrainkit.shards import ShardSet
    from pretrainkit.train.checkpoint.load_model import load_model
    from pretrainkit.train.evaluation.eval_sets import shard_sets
    from pretrainkit.train.evaluation.scoring import score_documents
    from pretrainkit.train.parallel.distributed import select_device

    device = select_device(job.cfg.device, 0)
    loaded = load_model(job.cfg.run_dir, None, device=str(device))
    (target,) = shard_sets([job.target], loaded.config.vocab_size, None, job.tokenizer_sha256)
    eos_id = ShardSet.open(job.target).tokenizer.eos_id
    seq_len = job.cfg.data.seq_len
    score = score_documents(
        loaded.model, target.documents(), target.lengths, eos_id, seq_len, job.cfg.batch.micro_size, device, "target"
    )
    return {"target_loss": float(f"{score.loss:.{DIGITS}g}"), "target_tokens": score.tokens, "steps": loaded.step}
