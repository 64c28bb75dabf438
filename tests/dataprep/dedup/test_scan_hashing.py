"""The scan's batched hashing: BLAKE2b-128 of many pieces in one compiled call equals hashlib's,
and a batch's exact-hash inputs, near-dup bytes and id lines equal those of each document alone."""

from __future__ import annotations

import hashlib
import unicodedata

import numpy as np

from pretrainkit.dataprep.dedup.minhash import near_normal_bytes
from pretrainkit.dataprep.dedup.scan import hash_inputs
from pretrainkit.dataprep.kernels.digests import blake2b_128
from pretrainkit.dataprep.kernels.ids import id_line, id_lines

_ASCII_WHITESPACE = b" \t\n\r\x0b\x0c\x1c\x1d\x1e\x1f"


def _offsets(pieces: list[bytes]) -> np.ndarray:
    return np.concatenate(([0], np.cumsum([len(p) for p in pieces]))).astype(np.int64)


def test_blake2b_128_equals_hashlib_for_every_length_and_trimming():
    """Lengths 0 to 520 cover empty input, partial blocks and exact multiples of the 128-byte block."""
    rng = np.random.default_rng(0)
    pieces = [rng.integers(0, 256, n, dtype=np.uint8).tobytes() for n in range(521)] + [bytes(128 * 9), b"x" * 4097]
    pieces += [b"  \t hello \n", b" \x1c\x1f\x0b ", b"\n\nab c\r\n", b"", b"\x85 not ascii whitespace \xa0"]
    buf = np.frombuffer(b"".join(pieces), np.uint8)
    for strip in (False, True):
        got = blake2b_128(buf, _offsets(pieces), strip=strip)
        expected = [
            hashlib.blake2b(p.strip(_ASCII_WHITESPACE) if strip else p, digest_size=16).digest() for p in pieces
        ]
        assert [row.tobytes() for row in got] == expected


def test_a_batchs_hash_inputs_are_each_documents_own():
    """ASCII and non-ASCII texts mixed, with whitespace at their ends: the exact hash digests the
    NFC-normalized trimmed text, the near-dup bytes are `near_normal_bytes`, document by document."""
    texts = [
        "  plain ascii text \n",
        "Ça dépend: ÉTÉ, naïve\u0301 café\u00a0",
        "\u2003 em spaces \u3000",
        "x",
        "Cafe\u0301 vs Café",
        " \x1c tabs\t",
    ]
    for batch in (texts, [t for t in texts if t.isascii()]):
        exact_buf, exact_offsets, near_buf, near_offsets = hash_inputs(batch)
        digests = blake2b_128(exact_buf, exact_offsets, strip=True)
        assert [d.tobytes() for d in digests] == [
            hashlib.blake2b(unicodedata.normalize("NFC", t).strip().encode("utf-8"), digest_size=16).digest()
            for t in batch
        ]
        near = [near_buf[near_offsets[i] : near_offsets[i + 1]].tobytes() for i in range(len(batch))]
        assert near == [near_normal_bytes(t) for t in batch]


def test_id_lines_of_a_batch_are_each_ids_line():
    for ids in (
        ["a", "doc-1", "x y z", "0"],
        ["plain", 'with "quotes"', "back\\slash", "tab\there", "ünïcode", "日本", "new\nline"],
    ):
        lines, offsets = id_lines(ids)
        assert [lines[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(ids))] == [id_line(i) for i in ids]


def test_the_scan_writes_each_documents_band_hashes_and_none_without_near_dedup(tmp_path, reuters_docs):
    """A scan part holds, per document, the band hashes of its MinHash signature (no signature);
    with --no-near (0 bands) it writes no band hashes and the same everything else."""
    from fixtures.corpora import write_jsonl
    from pretrainkit.dataprep.dedup.minhash import MinHasher, band_hashes, lsh_params
    from pretrainkit.dataprep.dedup.scan import ScanJob, Scanning, scan_part
    from pretrainkit.dataprep.readers import discover_inputs, plan_read_tasks

    docs = reuters_docs[:300] + [("accents", "Ça dépend: ÉTÉ, naïve café. " * 20), ("short", "two words")]
    task = plan_read_tasks(discover_inputs([str(write_jsonl(docs, tmp_path / "in.jsonl"))]))[0]
    bands, rows = lsh_params(0.8, 128)
    parts = {}
    for name, lsh in (("near", (bands, rows)), ("exact", (0, 0))):
        parts[name] = tmp_path / name / "parts"
        scan_part(
            ScanJob(
                index=0,
                task=task,
                work_dir=str(tmp_path / name),
                settings=Scanning(num_perm=128, ngram=5, text_field="text", id_field="id", bands=lsh[0], rows=lsh[1]),
            )
        )
    expected = band_hashes(MinHasher(128, 5).signatures([t for _, t in docs]).signatures, bands, rows)
    np.testing.assert_array_equal(
        np.fromfile(parts["near"] / "part-00000.bands", np.uint64).reshape(len(docs), bands), expected
    )
    assert not (parts["exact"] / "part-00000.bands").exists()
    for f in parts["near"].iterdir():
        if f.suffix != ".bands":
            assert f.read_bytes() == (parts["exact"] / f.name).read_bytes(), f.name
