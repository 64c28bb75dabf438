"""A document's id as the JSON line the outputs splice in (dedup's `.ids` files and duplicates rows,
tokenize's ids), without json.dumps for the common plain id.

    id_line("doc-1")                    # b'"doc-1"\n'
    buf, offsets = id_lines(["a", "b"])  # every id_line joined, and where each begins
"""

from __future__ import annotations

import json

import numpy as np

from pretrainkit.dataprep.kernels.pieces import joined


def id_line(doc_id: str) -> bytes:
    """The id as a JSON string and a newline (json.dumps only where escaping may be needed): exactly
    json.dumps(id, ensure_ascii=False), which duplicates.jsonl rows splice in as it is (`dedup.rows`)."""
    if _plain(doc_id):
        return f'"{doc_id}"\n'.encode("ascii")
    return json.dumps(doc_id, ensure_ascii=False).encode("utf-8") + b"\n"


def _plain(text: str) -> bool:
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


def id_lines(doc_ids: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every `id_line` joined (uint8) and the offset of each (int64, one more than ids). A batch of
    plain ids, the common case, is checked and quoted as one string."""
    if _plain("".join(doc_ids)):
        offsets = np.zeros(len(doc_ids) + 1, np.int64)
        np.cumsum([len(i) + 3 for i in doc_ids], out=offsets[1:])
        return np.frombuffer(('"' + '"\n"'.join(doc_ids) + '"\n').encode("ascii"), np.uint8), offsets
    return joined([id_line(i) for i in doc_ids])
