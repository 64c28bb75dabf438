"""Finishing an index part in place (`pretrainkit.dataprep.dedup.index.finish_part`): the scan's files become
the index part's, holding exactly the kept documents' rows and pieces (checked against the scan's
files split document by document), each synced under its temporary name before it takes its
name; the scan's files are gone afterwards; and the band hashes the index no longer keeps come
again from its shingle sets."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from pretrainkit import files
from pretrainkit.dataprep.dedup import index
from pretrainkit.dataprep.dedup.index import FinishJob, IndexPart, finish_part, part_files_whole
from pretrainkit.dataprep.dedup.minhash import MinHasher, lsh_params
from pretrainkit.dataprep.dedup.scan import ScanJob, Scanning, scan_part
from pretrainkit.dataprep.readers import discover_inputs, plan_read_tasks
from pretrainkit.files import TMP_MARK


def test_keep_in_place_leaves_the_kept_pieces_in_order(tmp_path, monkeypatch):
    monkeypatch.setattr(index, "READ_CHUNK_DOCS", 7)  # many chunks, each written back before the next is read
    rng = np.random.default_rng(0)
    path = tmp_path / "pieces.bin"
    for n in (0, 1, 6, 7, 8, 50, 333):
        sizes = rng.integers(0, 20, n)  # empty pieces too
        data = rng.integers(0, 256, int(sizes.sum()), dtype=np.uint8)
        ends = np.cumsum(sizes)
        for kept in (rng.random(n) < 0.6, np.ones(n, bool), np.zeros(n, bool), np.arange(n) % 7 != 0):
            path.write_bytes(data.tobytes())
            with open(path, "r+b") as f:
                index._keep_in_place(f, ends, kept)
            expected = b"".join(data[e - s : e].tobytes() for s, e, k in zip(sizes, ends, kept) if k)
            assert path.read_bytes() == expected, (n, kept)


@pytest.mark.parametrize("near", [True, False])
def test_finish_part_keeps_exactly_the_kept_documents_of_every_file(tmp_path, reuters_docs, monkeypatch, near):
    from fixtures.corpora import write_jsonl

    docs = reuters_docs[:600] + [("no-words", "  ... !!"), ("last", reuters_docs[0][1])]
    source = write_jsonl(docs, tmp_path / "in" / "r.jsonl")
    [task] = plan_read_tasks(discover_inputs([str(source)]))
    bands, rows = lsh_params(0.8, 128) if near else (0, 0)
    work = tmp_path / "work" / "parts"
    scan_part(
        ScanJob(
            index=0,
            task=task,
            work_dir=str(work.parent),
            settings=Scanning(num_perm=128, ngram=5, text_field="text", id_field="id", bands=bands, rows=rows),
        )
    )
    base = work / "part-00000"
    scanned = {p.name[len(base.name) :]: p.read_bytes() for p in work.glob("part-00000.*")}
    n = len(docs)
    kept = np.random.default_rng(1).random(n) < 0.6
    kept[0] = kept[-1] = False

    counts = np.frombuffer(scanned[".counts"], np.uint32)
    assert counts[len(docs) - 2] == 0  # a document without words: no shingles, an empty piece
    shingle_ends = np.cumsum(counts.astype(np.int64)) * 4
    shingles = [scanned[".shingles"][e - 4 * c : e] for c, e in zip(counts, shingle_ends)]
    id_lines = scanned[".ids"].splitlines(keepends=True)
    assert len(id_lines) == len(shingles) == n
    kept_ids = [line for line, k in zip(id_lines, kept) if k]
    expected = {
        ".exact": np.frombuffer(scanned[".exact"], np.uint64).reshape(n, 2)[kept].tobytes(),
        ".counts": counts[kept].tobytes(),
        ".shingles": b"".join(s for s, k in zip(shingles, kept) if k),
        ".ids": b"".join(kept_ids),
        ".idpos": np.cumsum([0] + [len(line) for line in kept_ids]).astype(np.uint64).tobytes(),
        ".lines": np.frombuffer(scanned[".lines"], np.uint64)[kept].tobytes(),
    }

    synced = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        name = os.readlink(f"/proc/self/fd/{fd}")
        assert TMP_MARK in name  # synced before it takes its name
        synced.append(Path(name.split(TMP_MARK)[0]).name)
        real_fsync(fd)

    monkeypatch.setattr(files.os, "fsync", fsync)
    monkeypatch.setattr(index, "READ_CHUNK_DOCS", 64)
    finished = tmp_path / "index" / "part-00000"
    finished.parent.mkdir()
    assert finish_part(FinishJob(str(base), str(finished), n), kept) == kept.sum()

    got = {s: Path(f"{finished}{s}").read_bytes() for s in expected}
    assert got == expected
    assert sorted(synced) == sorted(f"part-00000{s}" for s in [*expected, ".json"])  # .json last: marks it finished
    assert not part_files_whole(str(base))
    assert not [p for p in work.iterdir() if p.suffix in expected]  # taken by the index part
    assert not [p for p in finished.parent.iterdir() if TMP_MARK in p.name]
    if near:  # no signatures kept: the band hashes come again from the shingle sets, any range of documents
        scan_bands = np.frombuffer(scanned[".bands"], np.uint64).reshape(n, bands)[kept]
        part, hasher = IndexPart(finished, int(kept.sum())), MinHasher(128)
        for lo, hi in ((0, 1), (0, part.docs), (5, 77), (part.docs - 9, part.docs), (3, 3)):
            assert (part.band_hashes_of_sets(lo, hi, hasher, bands, rows) == scan_bands[lo:hi]).all()
    # a part finished by an earlier run is not finished again
    shutil.rmtree(work)
    assert finish_part(FinishJob(str(base), str(finished), n), kept) == kept.sum()
