"""Removal of corpus documents that share a word n-gram with evaluation sets (`ptk decontaminate`):
`ngrams` normalizes text and hashes its n-grams, `scripts` names the scripts written without spaces
(each character a token) and what their characters weigh, `evalsets` reads the evaluation items, `evalindex`
holds their n-grams as a sorted table of hashes with the words that confirm a hit, `check` tests a
read task's documents and writes its outputs, `pipeline` runs it all, `cli` is the command."""

from pretrainkit.dataprep.kernels.numba_cache import use_cache_dir

use_cache_dir()  # before any module of the package imports numba, in every process that imports it
