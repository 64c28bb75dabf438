"""Exact and MinHash-LSH near-duplicate removal: `pipeline` runs the stages, a module each with one
entry point: `scan` (read tasks into `index` parts: exact hashes, shingle sets and the band hashes
of MinHash signatures per document, by `minhash` and `pretrainkit.dataprep.kernels.digests`),
`match` (equal hashes of one kind as partitioned `pairs` files), `verify` (candidates by Jaccard),
`clusters` (connected components of the links), `resolve` (what each range of keys removes, its
`rows`) and `write` (the kept records, `kept`, and the finished index), all within a memory budget
(`pretrainkit.dataprep.budget`); `cli` is `ptk dedup`."""

from pretrainkit.dataprep.kernels.numba_cache import use_cache_dir

use_cache_dir()  # before any module of the package imports numba, in every process that imports it
