"""Exact and MinHash-LSH near-duplicate removal: `pipeline` runs the stages over `index` parts
(signatures and band hashes per document, `minhash`), joins candidate pairs into clusters
(`clusters`) within a memory `budget`; `cli` is `ptk dedup`."""
