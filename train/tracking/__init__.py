"""Experiment tracking: the rows of `metrics.jsonl` and `events.jsonl`, sent on to TensorBoard and W&B."""
