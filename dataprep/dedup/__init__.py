"""Exact and MinHash-LSH near-duplicate removal: `pipeline` runs the stages over `index` parts
(exact hashes, shingle sets and the band hashes of MinHash signatures per document: `digests`,
`minhash`); the pairs the match jobs find go through partitioned `pairs` files, `resolve`
verifies them and joins them into `clusters`, all within a memory `budget`; `cli` is `ptk dedup`."""
