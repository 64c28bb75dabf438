"""Training a fastText classifier on labelled corpora (`ptk classifier train`): the records read, the
vocabulary counted, the model trained (`fasttext_train`) and written as a fastText `.bin`.

    examples = read_labelled(["train.jsonl"], text_field="text", label_field="quality")
    examples = read_two_labels(positive=["eli5/"], negative=["crawl/"], text_field="text")
    model = train_classifier(examples, TrainOptions(ngrams=2, dim=100, epoch=5, lr=0.1))
    model.write("quality.bin")            # fastText's load_model reads it
    model.probabilities(["some text"])    # [texts, labels], as fastText's predict computes them

A text is read as DCLM applies its classifier: every line feed replaced by a space, so that a document
is one fastText line, in training and in scoring alike. Labels are the label field's strings, each
`__label__` + the value (`--positive`/`--negative`: `__label__positive`, `__label__negative`), in the
file in order of their counts. The documents are shuffled by the seed before training (fastText
reads a file in its order, and a corpus of one label after the other would train on one label at a
time); `training_order` gives that order, so that fastText can be trained on the same sequence.
A record the readers reject (malformed JSON, no text) is skipped and counted, as every command over a
corpus does; a missing or non-string label, or fewer than two labels, is a one-line error naming the
file and record.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import orjson

from pretrainkit.dataprep.classifiers import fasttext_bin, fasttext_train
from pretrainkit.dataprep.classifiers.fasttext_model import EOS, table_size
from pretrainkit.dataprep.readers import (
    Document,
    Rejected,
    discover_inputs,
    inputs_named,
    json_kind,
    nothing_usable,
    plan_read_tasks,
    read_task,
    reason_kind,
)
from pretrainkit.errors import UserError, quoted

LABEL_PREFIX = "__label__"
POSITIVE, NEGATIVE = "positive", "negative"  # the labels of --positive and --negative


@dataclass(frozen=True)
class TrainOptions:
    ngrams: int = 2  # fastText's wordNgrams: runs of up to this many tokens are features
    dim: int = 100
    epoch: int = 5
    lr: float = 0.1
    min_count: int = 1  # words seen fewer times are left out of the vocabulary
    bucket: int = 2_000_000  # rows for the hashed word n-grams
    seed: int = 0
    workers: int = 1  # threads; more than one is hogwild, not deterministic (fasttext_train)


@dataclass(frozen=True)
class LabelledTexts:
    texts: list[bytes]  # each as `fastText_line` makes it
    labels: np.ndarray  # int32, an index into `names` per text
    names: list[str]  # "__label__..."
    rejected: int = 0  # records the readers rejected, skipped


def fasttext_line(text: str) -> bytes:
    """`text` as the one fastText line it is trained and scored as: line feeds (and NULs, which fastText
    also reads as spaces) replaced by spaces, in UTF-8 (a lone surrogate, which has none, as "?")."""
    return text.replace("\n", " ").replace("\0", " ").encode("utf-8", "replace")


def _documents(inputs: list[str], text_field: str, rejected: Counter):
    """(input path, Document) of every usable record, in order; a record the readers reject (malformed,
    no text) is skipped and counted in `rejected` by reason, as every command over a corpus does."""
    for task in plan_read_tasks(discover_inputs(inputs)):
        for item in read_task(task, text_field=text_field):
            if type(item) is Rejected:
                rejected[reason_kind(item.reason)] += 1
            else:
                yield task.file.path, item


def _label_of(path: str, doc: Document, label_field: str) -> str:
    value = orjson.loads(doc.record).get(label_field) if doc.record else None
    if value is None:
        raise UserError(f"{path}: record {doc.line}: no label field '{label_field}'")
    if type(value) is not str:
        raise UserError(f"{path}: record {doc.line}: label field '{label_field}' is {json_kind(value)}, not a string")
    if not value or len(value.split()) != 1 or value != value.strip():
        raise UserError(f"{path}: record {doc.line}: label {quoted(value)} is not one word (fastText's labels are)")
    return value


def _labelled(texts: list[bytes], values: list[str], inputs: list[str], rejected: Counter) -> LabelledTexts:
    if not texts:
        raise nothing_usable(inputs, rejected)
    counts = Counter(values)
    if len(counts) < 2:
        raise UserError(
            f"{inputs_named(inputs)}: only the label {quoted(values[0])}; "
            "a classifier needs records of two labels or more"
        )
    names = [name for name, _ in counts.most_common()]  # fastText orders its labels by count
    index = {name: i for i, name in enumerate(names)}
    labels = np.array([index[v] for v in values], np.int32)
    return LabelledTexts(texts, labels, [LABEL_PREFIX + name for name in names], sum(rejected.values()))


def read_labelled(inputs: list[str], text_field: str, label_field: str) -> LabelledTexts:
    """Every usable record of `inputs`, labelled by its `label_field` (a string of one word)."""
    texts, values, rejected = [], [], Counter()
    for path, doc in _documents(inputs, text_field, rejected):
        values.append(_label_of(path, doc, label_field))
        texts.append(fasttext_line(doc.text))
    return _labelled(texts, values, inputs, rejected)


def read_two_labels(positive: list[str], negative: list[str], text_field: str) -> LabelledTexts:
    """The usable records of `positive` labelled POSITIVE, then those of `negative` labelled NEGATIVE."""
    texts, values, rejected = [], [], Counter()
    for inputs, label in ((positive, POSITIVE), (negative, NEGATIVE)):
        own: Counter = Counter()
        texts += [fasttext_line(doc.text) for _, doc in _documents(inputs, text_field, own)]
        if len(texts) == len(values):  # none of this label: both are needed
            raise nothing_usable(inputs, own)
        values += [label] * (len(texts) - len(values))
        rejected += own
    return _labelled(texts, values, positive + negative, rejected)


def training_order(count: int, seed: int) -> np.ndarray:
    """The order the documents are trained in: a permutation by the seed."""
    return np.random.default_rng(seed).permutation(count)


@dataclass(frozen=True)
class Vocabulary:
    words: list[bytes]  # by count, the largest first (ties: the first seen first)
    counts: list[int]
    table: np.ndarray  # word indices by FNV-1a hash (fasttext_model.word_id probes it)
    word_bytes: np.ndarray
    word_at: np.ndarray

    @classmethod
    def count(cls, texts: list[bytes], min_count: int) -> Vocabulary:
        """The words of `texts` (fastText's tokens, `</s>` once per text, no `__label__` token) seen at
        least `min_count` times."""
        counts = Counter(b" ".join(texts).split())
        counts[EOS] += len(texts)
        label = LABEL_PREFIX.encode()
        kept = sorted(
            ((w, c) for w, c in counts.items() if c >= min_count and not w.startswith(label)), key=lambda wc: -wc[1]
        )
        words = [w for w, _ in kept]
        word_bytes = np.frombuffer(b"".join(words), np.uint8).copy()
        word_at = np.zeros(len(words) + 1, np.int64)
        word_at[1:] = np.cumsum([len(w) for w in words])
        table = fasttext_train.word_table(word_bytes, word_at, table_size(len(words)))
        return cls(words, [c for _, c in kept], table, word_bytes, word_at)

    def rows(self, texts: list[bytes], options: TrainOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """`fasttext_train.input_rows` of `texts`."""
        ends = np.cumsum([len(t) for t in texts], dtype=np.int64)
        data = np.frombuffer(b"".join(texts), np.uint8)
        return fasttext_train.input_rows(
            data, ends, self.table, self.word_bytes, self.word_at, len(self.words), options.bucket, options.ngrams
        )


@dataclass(frozen=True)
class Classifier:
    options: TrainOptions
    vocabulary: Vocabulary
    labels: list[str]
    label_counts: list[int]
    tokens: int  # tokens of the training data, as fastText counts them (its dictionary's ntokens)
    input: np.ndarray  # [words + bucket, dim]
    output: np.ndarray  # [labels, dim]

    def probabilities(self, texts: list[str]) -> np.ndarray:
        """Each label's probability for each text ([texts, labels]), as fastText's predict computes it
        for the text's `fasttext_line`."""
        rows, at, _ = self.vocabulary.rows([fasttext_line(t) for t in texts], self.options)
        return fasttext_train.probabilities(rows, at, self.input, self.output)

    def write(self, path: str | Path) -> None:
        """The model as a fastText `.bin` (fasttext_bin), published atomically."""
        fasttext_bin.write_model(
            path,
            fasttext_bin.Header(
                dim=self.options.dim,
                epoch=self.options.epoch,
                min_count=self.options.min_count,
                word_ngrams=self.options.ngrams,
                bucket=self.options.bucket,
            ),
            words=list(zip(self.vocabulary.words, self.vocabulary.counts)),
            labels=[(name.encode(), count) for name, count in zip(self.labels, self.label_counts)],
            tokens=self.tokens,
            input_matrix=self.input,
            output_matrix=self.output,
        )


def train_classifier(examples: LabelledTexts, options: TrainOptions) -> Classifier:
    """fastText's supervised training (softmax over the labels) on `examples`."""
    vocabulary = Vocabulary.count(examples.texts, options.min_count)
    rows, at, tokens = vocabulary.rows(examples.texts, options)
    tokens += 1  # each document's label, a token to fastText
    rows_n = len(vocabulary.words) + options.bucket
    try:
        wi = fasttext_train.initial_input(rows_n, options.dim, options.seed)
    except MemoryError:
        raise UserError(
            f"the model's input matrix ({rows_n:,} rows of {options.dim} floats, "
            f"{rows_n * options.dim * 4 / 1e9:.1f} GB) does not fit in memory: a smaller --bucket or --dim "
            "makes it smaller"
        ) from None
    wo = np.zeros((len(examples.names), options.dim), np.float32)
    order = training_order(len(examples.texts), options.seed)
    fasttext_train.train(rows, at, examples.labels, order, wi, wo, options.lr, options.epoch, tokens, options.workers)
    return Classifier(
        options=options,
        vocabulary=vocabulary,
        labels=examples.names,
        label_counts=np.bincount(examples.labels, minlength=len(examples.names)).tolist(),
        tokens=int(tokens.sum()),
        input=wi,
        output=wo,
    )
