"""Which paragraph entries are removed: every copy of a paragraph in a later document than its first.

    gone = later_copies(entries)   # bool per entry of uint64 [n, 3] (hash, document key, line)

The entries of each hash must come in corpus order (a document key is `read task << 32 | ordinal`,
`pretrainkit.dataprep.paragraphs.scan`); they are sorted by hash (numpy, stably), and in each group
of equal hashes the first entry's document holds the first occurrence: every entry of another
document is removed. Entries of that first document are all kept: a paragraph repeated inside one
document (a refrain, a table's repeated cell, a heading used twice) is that document's own text,
not boilerplate shared across documents, and cutting it would change what the document says;
`ptk filter`'s repetition rules are the place for documents that repeat themselves. A later
document that holds the paragraph twice loses both.

Applied to any run of entries in corpus order, the entries it removes are removed from the whole
corpus too (the first occurrence in the corpus is at or before the run's first): so the scan
applies it to each chunk, and only the rest goes on to the resolve stage.
"""

from __future__ import annotations

import numpy as np


def later_copies(entries: np.ndarray) -> np.ndarray:
    """A flag per entry: its hash's first entry is of an earlier document (see the module docstring)."""
    hashes = entries[:, 0]
    order = np.argsort(hashes, kind="stable")
    hashes = hashes[order]
    docs = entries[order, 1]
    starts = np.ones(len(hashes), bool)
    starts[1:] = hashes[1:] != hashes[:-1]
    first = np.maximum.accumulate(np.where(starts, np.arange(len(hashes)), 0))  # each entry's group head
    gone = np.zeros(len(entries), bool)
    gone[order[docs != docs[first]]] = True
    return gone
