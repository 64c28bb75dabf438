"""Dedup's verify and resolve readers: many small reads at once equal plain reads, the compiled
Jaccard of many pairs equals a set-based reference over real index parts (any chunking, sets read
together or apart, empty sets), a truncated shingle file is a one-line error, and every
duplicates.jsonl row is the bytes
`json.dumps(row, ensure_ascii=False)` gives, whatever characters the ids and file names hold."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from fixtures import corpora
from pretrainkit.dataprep.dedup.index import COALESCE_GAP, SCRATCH_BYTES, DedupIndex, read_extents
from pretrainkit.dataprep.dedup.pipeline import DedupOptions, run_dedup
from pretrainkit.dataprep.dedup.rows import _decimals, head_fragment
from pretrainkit.dataprep.dedup.similarity import jaccard, pair_similarities, pairs_reaching
from pretrainkit.dataprep.executors.local import LocalRunner
from pretrainkit.dataprep.readers import Document
from pretrainkit.errors import UserError


def reference_set(part, local: int) -> frozenset:
    start, count = part.shingle_extents(np.array([local]))
    return frozenset(
        np.fromfile(f"{part.base}.shingles", np.uint32, count=int(count[0]), offset=4 * int(start[0])).tolist()
    )


def reference_jaccard(a: frozenset, b: frozenset) -> float:
    if not a or not b:
        return float(len(a) == len(b))
    return len(a & b) / len(a | b)


@pytest.fixture(scope="module")
def index(tmp_path_factory, reuters_docs) -> DedupIndex:
    """A finished index of three parts (one per input file), with documents that have no words, and
    in the first part a document whose set holds all of another's (their Jaccard: small / large)."""
    root = tmp_path_factory.mktemp("similarity")
    third = len(reuters_docs) // 3
    words = [f"w{letters(j)}" for j in range(50)]
    for i in range(3):
        docs = reuters_docs[i * third : (i + 1) * third] + [
            (f"empty-{i}-{j}", "!?" * (1 + j + 2 * i)) for j in range(2)
        ]
        docs += [("nested-large", " ".join(words)), ("nested-small", " ".join(words[:30]))] if i == 0 else []
        corpora.write_jsonl(docs, root / "in" / f"r{i}.jsonl")
    with LocalRunner(1) as runner:
        run_dedup([str(root / "in")], root / "out", DedupOptions(), runner)
    return DedupIndex.open(root / "out" / "index")


def test_read_extents_equal_plain_reads(tmp_path):
    rng = np.random.default_rng(5)
    data = [rng.integers(0, 256, size, dtype=np.uint8).tobytes() for size in (3 * SCRATCH_BYTES, 50_000, 10)]
    paths = []
    for i, content in enumerate(data):
        paths.append(str(tmp_path / f"f{i}"))
        Path(paths[-1]).write_bytes(content)
    extents = [
        (0, 0, 100),
        (0, 100 + COALESCE_GAP, 7),
        (0, 107 + 2 * COALESCE_GAP + 1, 1),  # gaps at and past the limit
        (0, 20_000, 2 * SCRATCH_BYTES),
        (0, 20_000 + 2 * SCRATCH_BYTES, 5),  # larger than the scratch buffer
        (0, 3 * SCRATCH_BYTES - 9, 9),
        (1, 0, 0),
        (1, 10, 16),
        (1, 18, 16),
        (1, 18, 8),  # empty, overlapping
        (1, 49_990, 10),
        (2, 0, 10),
    ]
    extents += [
        (1, int(o), int(n)) for o, n in zip(np.sort(rng.integers(30_000, 49_000, 300)), rng.integers(0, 600, 300))
    ]
    extents.sort(key=lambda e: (e[0], e[1]))
    which, offsets, sizes = (np.array(column) for column in zip(*extents))
    expected = b"".join(data[f][o : o + n] for f, o, n in extents)
    assert read_extents(paths, which, offsets, sizes).tobytes() == expected
    assert read_extents(paths, which[:0], offsets[:0], sizes[:0]).tobytes() == b""
    with pytest.raises(UserError, match=r"f2: index file is shorter than the rest of its part says"):
        read_extents(paths, np.array([2]), np.array([5]), np.array([6]))


def test_decimals():
    values = np.array([0, 7, 10, 99, 100, 123456789, 2**63 - 1], np.int64)
    text, bounds = _decimals(values)
    assert [text[a:b].tobytes() for a, b in zip(bounds[:-1], bounds[1:])] == [str(v).encode() for v in values.tolist()]


def test_jaccard_of_two_sorted_sets():
    a, b = np.array([1, 3, 5, 7], np.uint32), np.array([3, 4, 5, 8, 9], np.uint32)
    assert jaccard(a, b) == 2 / 7
    assert jaccard(a, a) == 1.0 and jaccard(a, b[:0]) == 0.0 and jaccard(a[:0], b[:0]) == 1.0


@pytest.mark.parametrize(
    "chunk_pairs, chunk_bytes", [(1, 1 << 20), (7, 1 << 20), (1 << 16, 1 << 20), (1 << 16, 3000), (1 << 16, 1)]
)
def test_pair_similarities_equal_a_set_reference(index, chunk_pairs, chunk_bytes):
    rng = np.random.default_rng(3)
    total = index.docs
    without_words = [
        int(index.offsets[p]) + i
        for p, part in enumerate(index.parts)
        for i in np.flatnonzero(np.asarray(part.counts) == 0)
    ]
    assert len(without_words) == 6
    neighbours = rng.integers(total - 3, size=400)  # sets side by side in a file: read together
    pairs = np.concatenate(
        [
            rng.integers(total, size=(600, 2)),  # across parts, far apart: read one by one
            np.stack([neighbours, neighbours + rng.integers(1, 3, size=len(neighbours))], axis=1),
            np.stack([np.arange(total), np.arange(total)], axis=1)[::50],  # a set with itself
            np.array([[without_words[0], without_words[5]], [without_words[1], 0], [5, without_words[2]]]),
        ]
    )
    pairs = np.concatenate([pairs, pairs[:40]])  # a pair twice
    sets = {}
    for key in np.unique(pairs).tolist():
        p = int(index.locate(np.array([key]))[0])
        sets[key] = reference_set(index.parts[p], key - int(index.offsets[p]))
    expected = [reference_jaccard(sets[a], sets[b]) for a, b in pairs.tolist()]
    got = pair_similarities(pairs, index.parts, index.offsets, chunk_pairs, chunk_bytes)
    assert got.dtype == np.float64 and got.tolist() == expected  # the same floats, not merely close
    assert 0 < sum(0.0 < s < 1.0 for s in expected)


def test_pairs_reaching_a_threshold_are_the_similarities_at_or_above_it(index):
    rng = np.random.default_rng(4)
    ids = index.parts[0].ids_of(list(range(index.parts[0].docs)))
    nested = np.array([[ids.index("nested-large"), ids.index("nested-small")]])
    pairs = np.concatenate([rng.integers(index.docs, size=(3000, 2)), nested])
    sims = pair_similarities(pairs, index.parts, index.offsets, 64, 1 << 20)
    assert sims[-1] == 26 / 46  # 46 and 26 shingles of 5 words, the smaller set inside the larger
    counts = np.concatenate([np.asarray(p.counts) for p in index.parts]).astype(np.int64)[pairs]
    between = np.unique(sims[(sims > 0) & (sims < 1)])
    assert len(between) > 20
    assert (counts.min(axis=1) / np.maximum(counts.max(axis=1), 1) < 0.3).sum() > 100  # the sizes alone settle many
    for threshold in (0.05, 0.3, 26 / 46, np.nextafter(26 / 46, 1), 0.8, 1.0, *between[::5]):  # some exactly a pair's
        reaching = pairs_reaching(threshold, pairs, index.parts, index.offsets, 64, 1 << 20)
        assert reaching.tolist() == (sims >= threshold).tolist()
        assert 0 < reaching.sum() < len(pairs) or threshold >= 0.8
    assert pairs_reaching(26 / 46, nested, index.parts, index.offsets, 64, 1 << 20).tolist() == [True]


def test_no_pairs_give_no_similarities(index):
    assert pair_similarities(np.empty((0, 2), np.int64), index.parts, index.offsets, 16, 1 << 20).shape == (0,)


def test_a_shingle_file_shorter_than_its_counts_is_a_one_line_error(tmp_path, index):
    part = index.parts[1]
    copy = tmp_path / "part"
    for suffix in (".counts", ".shingles"):
        Path(f"{copy}{suffix}").write_bytes(Path(f"{part.base}{suffix}").read_bytes())
    Path(f"{copy}.shingles").write_bytes(Path(f"{copy}.shingles").read_bytes()[:-4])
    broken = type(part)(copy, part.docs)
    last = (
        part.docs - 1 - int(np.flatnonzero(np.asarray(part.counts)[::-1] > 0)[0])
    )  # its set reaches the end of the file
    with pytest.raises(UserError, match=r"part\.shingles: index file is shorter than the rest of its part says") as e:
        pair_similarities(np.array([[0, last]]), [broken], np.array([0, part.docs]), 16, 1 << 20)
    assert "\n" not in str(e.value)


def letters(n: int) -> str:
    return chr(ord("a") + n % 26) + (letters(n // 26) if n >= 26 else "")


ODD_IDS = [
    "plain",
    'quote " inside',
    "back\\slash",
    "tab\tnew\nline\r",
    "nul \x00 and \x1f \x7f",
    "été ü 日本語",
    "emoji 🙂",
    "line sep \u2028 \u2029",
    '"',
    "\\",
    " ",
]


def test_a_rows_url_and_text_head_are_the_bytes_of_json_dumps_whatever_they_hold():
    for odd in ODD_IDS:
        text = odd * 100
        for document in (Document("x", text, "s", 1, b"", url=odd), Document("x", text, "s", 1, b"")):
            shown = {"url": odd} if document.url else {}
            expected = json.dumps(shown | {"text_head": text[:200]}, ensure_ascii=False).encode("utf-8")
            assert b"{" + head_fragment(document)[2:] + b"}" == expected, odd


def test_duplicates_rows_are_the_bytes_of_json_dumps_whatever_the_ids(tmp_path):
    rows = []
    for i, doc_id in enumerate(ODD_IDS):
        text = " ".join(f"w{letters(i)}q{letters(j)}" for j in range(40))  # words of no other document
        near = text.rsplit(" ", 1)[0] + " changed"  # 1 of 36 shingles differs
        rows += [(doc_id, text), (doc_id + " exact copy", text), (doc_id + " near copy", near)]
    src = tmp_path / "in" / 'données "q" \\ é.jsonl'
    corpora.write_jsonl(rows, src)
    with LocalRunner(2) as runner:
        run_dedup([str(src)], tmp_path / "out", DedupOptions(), runner)
    lines = (tmp_path / "out" / "duplicates.jsonl").read_bytes().splitlines(keepends=True)
    assert len(lines) == 2 * len(ODD_IDS)
    for line in lines:
        assert line == (json.dumps(json.loads(line), ensure_ascii=False) + "\n").encode("utf-8")
    got = {r["id"]: r for r in map(json.loads, lines)}
    assert all(got[doc_id]["text_head"] == text[:200] for doc_id, text in rows if doc_id in got)
    for i, doc_id in enumerate(ODD_IDS):
        for kind, line in (("exact", 3 * i + 2), ("near", 3 * i + 3)):
            row = got[f"{doc_id} {kind} copy"]
            assert (row["duplicate_of"], row["line"], row["duplicate_of_line"], row["kind"]) == (
                doc_id,
                line,
                3 * i + 1,
                kind,
            )
            assert row["source"] == row["duplicate_of_source"] == src.name
            assert row["similarity"] == (1.0 if kind == "exact" else round(35 / 37, 4))
            assert (row["matched"], row["matched_source"], row["matched_line"], row["matched_similarity"]) == (
                doc_id,
                src.name,
                3 * i + 1,
                row["similarity"],
            )


def test_a_chain_a_b_c_names_what_c_matched_b_while_its_kept_document_a_is_less_similar(tmp_path):
    """Clusters are transitive: C is linked to B (Jaccard 181/211 of their 5-gram sets), B to A, but
    A and C share only 166/226 < 0.8. C's row names A as `duplicate_of` with their similarity and B
    as `matched`, the document whose link put it in the cluster, with a similarity at the threshold
    or above."""
    words = [f"w{letters(i)}" for i in range(240)]  # no digits: normalization folds them
    src = corpora.write_jsonl(
        [("A", " ".join(words[0:200])), ("B", " ".join(words[15:215])), ("C", " ".join(words[30:230]))],
        tmp_path / "in" / "chain.jsonl",
    )
    with LocalRunner(1) as runner:
        run_dedup([str(src)], tmp_path / "out", DedupOptions(threshold=0.8), runner)
    rows = {r["id"]: r for r in map(json.loads, (tmp_path / "out" / "duplicates.jsonl").read_text().splitlines())}
    assert set(rows) == {"B", "C"}
    assert (rows["B"]["duplicate_of"], rows["B"]["matched"]) == ("A", "A")
    assert rows["B"]["similarity"] == rows["B"]["matched_similarity"] == round(181 / 211, 4)
    c = rows["C"]
    assert (c["duplicate_of"], c["duplicate_of_line"], c["similarity"]) == ("A", 1, round(166 / 226, 4))
    assert (c["matched"], c["matched_source"], c["matched_line"], c["matched_similarity"]) == (
        "B",
        "chain.jsonl",
        2,
        round(181 / 211, 4),
    )


def test_every_near_row_matched_a_document_of_its_cluster_at_the_threshold_or_above(tmp_path, reuters_docs):
    """On real text with perturbed copies: `matched_similarity` never falls below the threshold, even
    where the similarity to the kept document does, and the matched document is in the same cluster."""
    from bench.dedup import perturbed

    docs = reuters_docs + [perturbed(d, 1) for d in reuters_docs]
    src = corpora.write_jsonl(docs, tmp_path / "in" / "r.jsonl")
    with LocalRunner(2) as runner:
        run_dedup([str(src)], tmp_path / "out", DedupOptions(threshold=0.8), runner)
    rows = [json.loads(line) for line in (tmp_path / "out" / "duplicates.jsonl").read_text().splitlines()]
    near = [r for r in rows if r["kind"] == "near"]
    kept_of = {r["line"]: r["duplicate_of_line"] for r in rows}
    assert near and any(r["similarity"] < 0.8 for r in near)
    assert all(r["matched_similarity"] >= 0.8 and r["matched_line"] != r["line"] for r in near)
    assert all(kept_of.get(r["matched_line"], r["matched_line"]) == r["duplicate_of_line"] for r in near)
