"""The documents of a packed row, read from its EOS tokens, and the targets that stay within a document.

    documents = document_ids(inputs, eos_id)                  # int64 [b, t]: 0, 0, 0, 1, 1, ...
    targets = within_documents(inputs, targets, eos_id)       # the target of each EOS ignored

The packing (mixtures/stream.py) joins documents as `doc EOS doc EOS ...`, and the tokenizer encodes
a literal end-of-text string in a document as plain text (shards/tokenizer.py), so EOS
marks exactly the document ends and the loader needs to deliver nothing else: its state, and with it
resuming old checkpoints, is unchanged by document masking.

The convention (`data.document_masking: true`):
- the EOS that ends a document belongs to that document: it attends to the document, and the
  document's last token is trained to predict it;
- the target of that EOS is the next document's first token, which nothing of the previous document
  may predict: it is ignored (IGNORE_INDEX), so it counts neither in the loss nor in the token count.
  A document's first token is therefore never a target, as when the document is run alone;
- a row that starts inside a document holds its remainder as document 0 (its start is in an earlier
  row, as without masking).
So the loss summed over a packed row equals the sum of each document's loss run alone (its tokens
and its EOS as inputs), up to rounding: tests/train/model/test_document_masking.py checks it.
"""

from __future__ import annotations

import torch

IGNORE_INDEX = -100  # target value that counts neither in the loss nor in the token count


def document_ids(inputs: torch.Tensor, eos_id: int) -> torch.Tensor:
    """int64 [b, t]: the index, within its row, of the document each input token belongs to (EOS included)."""
    eos = (inputs == eos_id).long()
    return eos.cumsum(dim=1) - eos


def within_documents(inputs: torch.Tensor, targets: torch.Tensor, eos_id: int) -> torch.Tensor:
    """`targets` with the target of every EOS input (a next document's first token) set to IGNORE_INDEX."""
    return targets.masked_fill(inputs == eos_id, IGNORE_INDEX)
