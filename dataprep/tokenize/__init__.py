"""Tokenization: `tokenizer` trains or loads a `tokenizers` tokenizer; `corpus` encodes documents
into shard sets; `cli` is `ptk tokenizer train`, `ptk tokenize` and `ptk prepare`."""
