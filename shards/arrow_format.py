"""Arrow IPC shard files with zstd-compressed buffers: one record batch per `DocBatch`.

Columns: `id` (string), `length` (uint32 token count) and `tokens` (list of uint16/uint32), and last,
in a set whose documents have addresses (the manifest's `urls`), `url` (string, null for a document
without one): a set without urls has the three columns only, as before.
`length` duplicates the list offsets on purpose: it can be read alone, so the document index of
a shard set costs no token decompression. The writer records where each record batch lies in the
file (`ranges`): one Arrow IPC message that `decode_record_batch` reads alone, given the schema,
which is how a shard in a bucket is read one batch at a time (`shards/batch_ranges.py`).
"""

from __future__ import annotations

import functools
from typing import BinaryIO

import numpy as np
import pyarrow as pa

from pretrainkit.shards.formats import ZSTD_LEVEL, DocBatch

ID, LENGTH, TOKENS, URL = 0, 1, 2, 3


def arrow_schema(dtype: np.dtype, urls: bool = False) -> pa.Schema:
    columns = [("id", pa.string()), ("length", pa.uint32()), ("tokens", pa.list_(pa.from_numpy_dtype(dtype)))]
    return pa.schema(columns + [("url", pa.string())] if urls else columns)


class ArrowShardWriter:
    """Writes `DocBatch`es to an open binary file as one Arrow IPC file."""

    def __init__(self, sink: BinaryIO, dtype: np.dtype, urls: bool = False):
        options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=ZSTD_LEVEL))
        self._schema = arrow_schema(dtype, urls)
        self._sink = sink
        self._writer = pa.ipc.new_file(sink, self._schema, options=options)
        # The file opens with the 8-byte magic and the schema message, written with the first batch
        self._end = len(_FILE_MAGIC) + len(self._schema.serialize())
        self.ranges: list[tuple[int, int]] = []  # (offset, size) of each record batch written

    def write(self, batch: DocBatch) -> None:
        tokens = pa.ListArray.from_arrays(pa.array(batch.offsets.astype(np.int32)), pa.array(batch.tokens))
        columns = [pa.array(batch.ids, pa.string()), pa.array(batch.lengths, pa.uint32()), tokens]
        if batch.urls is not None:
            columns.append(pa.array(batch.urls, pa.string()))
        self._writer.write_batch(pa.record_batch(columns, schema=self._schema))
        end = self._sink.tell()
        self.ranges.append((self._end, end - self._end))
        self._end = end

    def close(self) -> None:
        self._writer.close()


_FILE_MAGIC = b"ARROW1\0\0"


def decode_record_batch(data: bytes, dtype: np.dtype, columns: tuple[int, ...], urls: bool = False) -> pa.RecordBatch:
    """These columns of the record batch whose IPC message (metadata and body, as the writer's `ranges`
    delimit it) is `data`, in a set with a url column when `urls`: read as a one-batch IPC stream behind
    the schema, which lets Arrow decompress only the columns asked for, on this thread (as
    `ArrowShardReader` does)."""
    options = pa.ipc.IpcReadOptions(included_fields=list(columns), use_threads=False)
    schema = _schema_message(np.dtype(dtype), urls)
    return pa.ipc.open_stream(pa.py_buffer(schema + data), options=options).read_next_batch()


@functools.lru_cache(maxsize=4)
def _schema_message(dtype: np.dtype, urls: bool) -> bytes:
    return arrow_schema(dtype, urls).serialize().to_pybytes()


class ArrowShardReader:
    """Random access to the batches of one Arrow shard file; a read decompresses one batch.

    The file is read with positioned reads, not memory-mapped: a loader that reads a whole shard
    set over an epoch would otherwise count every page it touched in its resident memory."""

    def __init__(self, path: str):
        source = pa.OSFile(path)

        def opened(column: int) -> pa.ipc.RecordBatchFileReader:
            return pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=[column], use_threads=False))

        self._files = {column: opened(column) for column in (ID, LENGTH, TOKENS)}
        self.num_batches = self._files[LENGTH].num_record_batches
        if len(pa.ipc.open_file(source).schema) > URL:  # the url column is there (the others' schemas are of one)
            self._files[URL] = opened(URL)

    def lengths(self, i: int) -> np.ndarray:
        return self._files[LENGTH].get_batch(i).column(0).to_numpy()

    def tokens(self, i: int) -> np.ndarray:
        return self._files[TOKENS].get_batch(i).column(0).values.to_numpy()

    def ids(self, i: int) -> list[str]:
        return self._files[ID].get_batch(i).column(0).to_pylist()

    def urls(self, i: int) -> list[str | None]:
        """Each document's url, None where it has none (every one, in a shard without the column)."""
        if URL not in self._files:
            return [None] * len(self.lengths(i))
        return self._files[URL].get_batch(i).column(0).to_pylist()
