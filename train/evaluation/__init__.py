"""`ptk eval`: loss, perplexity and bits per byte of a model on shard sets, raw text or a mixture's held-out splits."""
