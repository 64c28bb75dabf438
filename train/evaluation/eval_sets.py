"""What `ptk eval` scores: documents by source, from shard sets, raw text files or a mixture's held-out splits.

    sets = shard_sets(["shards/web"], tokenizer)            # every document of each shard set
    sets = text_sets(["notes.txt", "more.jsonl"], tokenizer)  # read and tokenized like `ptk tokenize` does
    sets = mixture_sets("mixture.yaml", tokenizer)           # each source's held-out documents
    for eval_set in sets:
        eval_set.lengths, eval_set.documents(), eval_set.text_bytes

Text bytes (for bits per byte) are the UTF-8 bytes of each document's text: counted while reading
for text inputs, and by decoding the tokens with the tokenizer for shard sets (None without one).
Shard sets are verified against their manifests (sha256 of every shard) before a document is read.
Shards must come from the model's tokenizer when it is known (same manifest sha256) and never hold
an id outside the model's vocabulary.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pretrainkit.dataprep.readers import Document, discover_inputs, plan_read_tasks, read_task
from pretrainkit.errors import UserError
from pretrainkit.shards import ShardSet
from pretrainkit.shards.tokenizer import LoadedTokenizer
from pretrainkit.shards.verify import check_shards_whole


@dataclass
class EvalSet:
    name: str
    lengths: np.ndarray  # tokens of each document, in scoring order
    read: Callable[[int], np.ndarray]  # the i-th document's tokens
    decode: Callable[[np.ndarray], str] | None = None  # to count text bytes while scoring (shard sets)
    text_bytes: int | None = None  # known up front (text inputs), else counted by `documents()`
    rejected: dict[str, int] = field(default_factory=dict)  # reason -> input records that could not be used
    # The i-th document's `shard`, `index`, `id`, `input` and `line` (`ptk eval --per-document`).
    origin: Callable[[int], dict] | None = None

    def documents(self) -> Iterator[np.ndarray]:
        counted = 0
        for i in range(len(self.lengths)):
            tokens = self.read(i)
            if self.decode is not None:
                counted += len(self.decode(tokens).encode("utf-8"))
            yield tokens
        if self.decode is not None:
            self.text_bytes = counted


def _decoder(tokenizer: LoadedTokenizer | None) -> Callable[[np.ndarray], str] | None:
    if tokenizer is None:
        return None
    return lambda tokens: tokenizer.tokenizer.decode(tokens.tolist(), skip_special_tokens=False)


def check_shards(ss: ShardSet, where: str, vocab_size: int, tokenizer_sha256: str | None) -> None:
    if tokenizer_sha256 is not None and ss.tokenizer.sha256 != tokenizer_sha256:
        raise UserError(
            f"{where}: tokenized with another tokenizer (sha256 {ss.tokenizer.sha256[:12]}) than the "
            f"model's ({tokenizer_sha256[:12]})"
        )
    if ss.tokenizer.vocab_size > vocab_size:
        raise UserError(
            f"{where}: vocabulary of {ss.tokenizer.vocab_size} tokens, larger than the model's {vocab_size}"
        )


def _shard_set(name: str, ss: ShardSet, docs: np.ndarray, tokenizer: LoadedTokenizer | None) -> EvalSet:
    from pretrainkit.train.reports.trace import document_fields, provenance_inputs

    lengths, inputs = ss.doc_lengths()[docs], provenance_inputs(ss)
    return EvalSet(
        name,
        lengths,
        lambda i: np.asarray(ss.document(int(docs[i])), dtype=np.int64),
        _decoder(tokenizer),
        origin=lambda i: document_fields(ss, inputs, int(docs[i])),
    )


def _unique(names: list[str], paths: list[str]) -> list[str]:
    """Short source names (the file or directory name), or the paths as given when two would collide."""
    return names if len(set(names)) == len(names) else paths


def shard_sets(
    dirs: list[str], vocab_size: int, tokenizer: LoadedTokenizer | None, model_sha: str | None
) -> list[EvalSet]:
    out = []
    names = _unique([Path(d).resolve().name for d in dirs], dirs)
    for name, d in zip(names, dirs):
        ss = ShardSet.open(d)
        # As the training loader does (load_mixture): a flipped bit would be scored, or fail mid-read.
        check_shards_whole(ss.path, ss.manifest, f"--shards {d}")
        check_shards(ss, d, vocab_size, model_sha or (tokenizer.sha256 if tokenizer else None))
        out.append(_shard_set(name, ss, np.arange(ss.num_docs), tokenizer))
    return out


def mixture_sets(path: str, vocab_size: int, tokenizer: LoadedTokenizer | None, model_sha: str | None) -> list[EvalSet]:
    from pretrainkit.mixtures import load_mixture

    mix = load_mixture(path)
    out = []
    for source in mix.sources:
        check_shards(
            source.shard_set,
            f"{path}: source {source.name!r}",
            vocab_size,
            model_sha or (tokenizer.sha256 if tokenizer else None),
        )
        heldout = np.flatnonzero(source.split.heldout.mask(0, source.shard_set.num_docs))
        if len(heldout) == 0:
            raise UserError(f"{path}: source {source.name!r} has no held-out documents to evaluate on")
        out.append(_shard_set(source.name, source.shard_set, heldout, tokenizer))
    return out


def text_sets(inputs: list[str], tokenizer: LoadedTokenizer | None, text_field: str, id_field: str) -> list[EvalSet]:
    if tokenizer is None:
        raise UserError("--text needs the model's tokenizer: pass --tokenizer tokenizer.json")
    out = []
    names = _unique([Path(i).name for i in inputs], inputs)
    for name, given in zip(names, inputs):
        texts, origins, rejected = [], [], {}
        for task in plan_read_tasks(discover_inputs([given])):
            for item in read_task(task, text_field, id_field, records=False):
                if isinstance(item, Document):
                    texts.append(item.text)
                    where = {"id": item.id, "input": item.source, "line": item.line}
                    origins.append({"shard": None, "index": len(origins), **where})
                else:
                    rejected[item.reason] = rejected.get(item.reason, 0) + 1
        if not texts:
            raise UserError(f"{given}: no usable document ({sum(rejected.values())} records rejected)")
        docs = [
            np.asarray(e.ids, dtype=np.int64) for e in tokenizer.tokenizer.encode_batch(texts, add_special_tokens=False)
        ]
        lengths = np.array([len(d) for d in docs], dtype=np.int64)
        text_bytes = sum(len(t.encode("utf-8")) for t in texts)
        out.append(
            EvalSet(
                name, lengths, docs.__getitem__, text_bytes=text_bytes, rejected=rejected, origin=origins.__getitem__
            )
        )
    return out
