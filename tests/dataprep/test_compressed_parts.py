"""A compressed part holds exactly the records written, and its bytes are those of a zstd stream fed
the records one by one: the batching changes when zstd works, not what it writes."""

from __future__ import annotations

import io

import zstandard

from pretrainkit.dataprep.compressed_parts import CHUNK_BYTES, COMPRESSION_LEVEL, compressed_part


def test_the_same_bytes_as_records_fed_one_by_one(license_docs):
    records = [f'{{"id": "{i}", "text": {text!r}}}\n'.encode() for i, (_, text) in enumerate(license_docs * 20)]
    assert sum(map(len, records)) > 3 * CHUNK_BYTES  # several batches, and a last one part full
    batched, one_by_one = io.BytesIO(), io.BytesIO()
    with compressed_part(batched) as out:
        for record in records:
            out.write(record)
    with zstandard.ZstdCompressor(level=COMPRESSION_LEVEL).stream_writer(one_by_one, closefd=False) as out:
        for record in records:
            out.write(record)
    assert batched.getvalue() == one_by_one.getvalue()
    assert zstandard.ZstdDecompressor().decompressobj().decompress(batched.getvalue()) == b"".join(records)


def test_an_empty_part_is_an_empty_frame():
    raw = io.BytesIO()
    with compressed_part(raw):
        pass
    assert zstandard.ZstdDecompressor().decompressobj().decompress(raw.getvalue()) == b""
