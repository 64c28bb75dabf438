"""Tokenization: `corpus` encodes documents into shard sets; `cli` is `ptk tokenizer train`, `ptk tokenize`
and `ptk prepare`. Training and loading a tokenizer is `pretrainkit.shards.tokenizer`, which train uses too."""
