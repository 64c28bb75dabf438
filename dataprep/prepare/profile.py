"""A corpus's profile for the funnel: documents, text bytes, a histogram of document lengths and,
where asked, the language mix.

    p = profile(["out/filter/part-00000.jsonl.zst"], "text", "id", languages=True, runner=runner)
    p["docs"], p["text_bytes"], p["length_chars"], p["languages"]   # {"en": 812, "de": 40, ...}

`length_chars[k]` counts the documents of [2^k, 2^(k+1)) characters (bin 0 also holds the empty
ones, the last bin everything longer). Languages are `pretrainkit.dataprep.filter.language.identify`'s
codes, of the text as it is in this corpus (found a batch of documents at a time, `identify_many`,
as `ptk filter` does). A job per read task; the counts are sums, so the
profile is the same for any number of workers.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from pretrainkit.dataprep.executors import JobRunner
from pretrainkit.dataprep.filter.language import identify_many
from pretrainkit.dataprep.filter.pipeline import BATCH_CHARS, BATCH_DOCS
from pretrainkit.dataprep.readers import Document, ReadTask, discover_inputs, in_batches, plan_read_tasks, read_task

LENGTH_BINS = 24  # up to 2^23 characters and longer


@dataclass(frozen=True)
class ProfileJob:
    task: ReadTask
    text_field: str
    id_field: str
    languages: bool


def length_bin(chars: int) -> int:
    return min(max(chars, 1).bit_length() - 1, LENGTH_BINS - 1)


def profile_part(job: ProfileJob) -> dict:
    docs = text_bytes = rejected = 0
    lengths = [0] * LENGTH_BINS
    languages: Counter = Counter()
    items = read_task(job.task, job.text_field, job.id_field, records=False)
    for batch in in_batches(items, BATCH_DOCS, BATCH_CHARS):
        texts = [item.text for item in batch if type(item) is Document]
        rejected += len(batch) - len(texts)
        docs += len(texts)
        for text in texts:
            text_bytes += len(text.encode("utf-8", "surrogatepass"))
            lengths[length_bin(len(text))] += 1
        if job.languages:
            languages.update(lang for lang, _ in identify_many(texts))
    return {
        "docs": docs,
        "text_bytes": text_bytes,
        "rejected": rejected,
        "length_chars": lengths,
        "languages": languages,
    }


def profile(
    inputs: list[str], text_field: str, id_field: str, languages: bool, runner: JobRunner, label: str = "profile"
) -> dict:
    tasks = plan_read_tasks(discover_inputs(inputs), runner=runner)
    jobs = [ProfileJob(t, text_field, id_field, languages) for t in tasks]
    parts = runner.run(profile_part, jobs, label, weights=[t.nbytes for t in tasks], unit="B")
    total = {key: sum(p[key] for p in parts) for key in ("docs", "text_bytes", "rejected")}
    total["length_chars"] = [sum(p["length_chars"][k] for p in parts) for k in range(LENGTH_BINS)]
    mix = sum((Counter(p["languages"]) for p in parts), Counter())
    total["languages"] = dict(sorted(mix.items(), key=lambda kv: (-kv[1], kv[0]))) if languages else None
    return total
