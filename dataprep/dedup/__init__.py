"""Exact and MinHash-LSH near-duplicate removal: `pipeline` runs the stages over `index` parts
(signatures and band hashes per document, `minhash`); the pairs the match jobs find go through
partitioned `pairs` files, `resolve` verifies them and joins them into `clusters`, all within a
memory `budget`; `cli` is `ptk dedup`."""
