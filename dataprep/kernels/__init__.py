"""Kernels and helpers that several stages share and none owns: `numba_cache` (where compiled
kernels are cached, set before numba loads), `hashing` (splitmix64's finalizer), `digests`
(BLAKE2b-128 of many strings at once), `pieces` (byte pieces joined and copied), `ids` (a
document id as the JSON line the outputs splice in), and `scripts` (the scripts written without spaces
between words, and how much of a word their characters hold: decontamination's n-grams and the
filters' word counts)."""

from pretrainkit.dataprep.kernels.numba_cache import use_cache_dir

use_cache_dir()  # before any module of the package imports numba, in every process that imports it
