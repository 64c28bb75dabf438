"""Paragraph-level dedup (`ptk dedup --paragraphs`): a line repeated across the corpus is kept at its
first occurrence and removed from every later document. `pipeline` runs the stages, a module each:
`lines` (the non-blank lines of a batch of texts, stripped and hashed, in one compiled call),
`rule` (which entries of paragraphs are removed), `scan` (per read task: line entries into bucketed
files), `resolve` (per partition of hashes: the removals by read task), `removals` (a task's
removals a window of documents at a time), `write` (per read task: the documents without their
removed lines), `relabel` (the language of a changed document, identified again); `cli` wires
the options into `ptk dedup`."""

from pretrainkit.dataprep.kernels.numba_cache import use_cache_dir

use_cache_dir()  # before this package's kernels import numba (as in `pretrainkit.dataprep.dedup`)
