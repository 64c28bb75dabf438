"""Near-dedup quality against brute-force ground truth on real corpora.

Ground truth is computed here, independently of the project's hashing: word 5-gram string sets
(same normalization rules, written with regular expressions) and exact Jaccard for every pair
above 0.85, found with prefix filtering (Chaudhuri et al. 2006), which misses no such pair.
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from fixtures.corpora import DATA, need_data
from pretrainkit.dataprep.dedup.pipeline import DedupOptions, run_dedup
from pretrainkit.dataprep.executors.local import LocalRunner

NGRAM = 5


def shingle_set(text: str) -> frozenset[str]:
    t = unicodedata.normalize("NFKD", text.lower())
    t = "".join(c for c in t if not unicodedata.combining(c))
    words = [re.sub(r"\d", "0", w) for w in re.findall(r"[^\W_]+", t)]
    if not words:
        return frozenset()
    if len(words) < NGRAM:
        return frozenset([" ".join(words)])
    return frozenset(" ".join(words[i : i + NGRAM]) for i in range(len(words) - NGRAM + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    return len(a & b) / len(a | b) if a or b else 1.0


def pairs_above(sets: list[frozenset], t: float) -> list[tuple[int, int, float]]:
    """Every pair with Jaccard >= t (exact all-pairs similarity search by prefix filtering)."""
    df: dict[str, int] = defaultdict(int)
    for s in sets:
        for g in s:
            df[g] += 1
    postings: dict[str, list[int]] = defaultdict(list)
    found = []
    for i, s in enumerate(sets):
        if not s:
            continue
        ordered = sorted(s, key=lambda g: (df[g], g))
        prefix = ordered[: len(s) - math.ceil(t * len(s)) + 1]
        candidates = {j for g in prefix for j in postings[g]}
        for j in candidates:
            small, big = sorted((len(s), len(sets[j])))
            if small >= t * big and (sim := jaccard(s, sets[j])) >= t:
                found.append((j, i, sim))
        for g in prefix:
            postings[g].append(i)
    return found


def dedup_clusters(tmp_path: Path, docs: list[tuple[str, str]]) -> tuple[dict[str, str], list[dict]]:
    from fixtures.corpora import write_jsonl

    src = write_jsonl(docs, tmp_path / "in.jsonl")
    with LocalRunner(2) as runner:
        run_dedup([str(src)], tmp_path / "out", DedupOptions(threshold=0.8), runner)
    rows = [json.loads(line) for line in (tmp_path / "out" / "duplicates.jsonl").read_text().splitlines()]
    parent = {r["id"]: r["duplicate_of"] for r in rows}

    def root(doc_id: str) -> str:
        while doc_id in parent:
            doc_id = parent[doc_id]
        return doc_id

    return {doc_id: root(doc_id) for doc_id, _ in docs}, rows


def check_quality(tmp_path: Path, docs: list[tuple[str, str]]) -> tuple[int, int]:
    docs = list(dict(docs).items())  # unique ids
    cluster, rows = dedup_clusters(tmp_path, docs)
    sets = [shingle_set(text) for _, text in docs]
    ids = [doc_id for doc_id, _ in docs]
    position = {doc_id: i for i, doc_id in enumerate(ids)}

    truth = pairs_above(sets, 0.85)
    together = sum(cluster[ids[i]] == cluster[ids[j]] for i, j, _ in truth)
    assert together >= 0.97 * len(truth), f"recall: {together}/{len(truth)} pairs with Jaccard >= 0.85 share a cluster"

    near = [r for r in rows if r["kind"] == "near"]
    close = sum(jaccard(sets[position[r["id"]]], sets[position[r["duplicate_of"]]]) >= 0.5 for r in near)
    assert close >= 0.99 * len(near), (
        f"precision: {close}/{len(near)} removed documents have Jaccard >= 0.5 with duplicate_of"
    )
    return len(truth), len(near)


@pytest.mark.slow
def test_reuters_near_duplicates_match_brute_force(tmp_path):
    from fixtures.corpora import reuters_documents

    need_data(DATA)
    truth, near = check_quality(tmp_path, reuters_documents())
    assert truth > 100 and near > 100  # the corpus really has natural near duplicates


def test_license_texts_cluster_only_within_their_license(tmp_path, license_docs):
    truth, near = check_quality(tmp_path, license_docs)
    assert truth > 10 and near > 10
    labels = yaml.safe_load((DATA / "license_texts_licensee" / "fixtures.yml").read_text())

    files_per_fixture: dict[str, int] = defaultdict(int)
    for doc_id, _ in license_docs:
        files_per_fixture[doc_id.split("/")[1]] += 1

    def license_of(doc_id: str) -> str | None:
        kind, name = doc_id.split("/")[:2]
        if kind == "canonical":
            return Path(name).stem
        if files_per_fixture[name] > 1:  # a label names the project's license, not each of its files
            return None
        return (labels.get(name) or {}).get("key")

    rows = [json.loads(line) for line in (tmp_path / "out" / "duplicates.jsonl").read_text().splitlines()]
    labelled = [(license_of(r["id"]), license_of(r["duplicate_of"])) for r in rows]
    labelled = [(a, b) for a, b in labelled if a and b and "other" not in (a, b) and "no-license" not in (a, b)]
    # Different labels only where the licenses themselves are near-identical texts (GPL-3.0 is
    # AGPL-3.0 minus one section; CC BY-SA is CC BY plus share-alike): their canonical texts agree.
    canonical = {
        Path(doc_id).stem: shingle_set(text) for doc_id, text in license_docs if doc_id.startswith("canonical/")
    }
    for a, b in {(a, b) for a, b in labelled if a != b}:
        assert jaccard(canonical[a], canonical[b]) >= 0.5, (a, b)
