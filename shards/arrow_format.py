"""Arrow IPC shard files with zstd-compressed buffers: one record batch per `DocBatch`.

Columns: `id` (string), `length` (uint32 token count) and `tokens` (list of uint16/uint32).
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

ID, LENGTH, TOKENS = 0, 1, 2


def arrow_schema(dtype: np.dtype) -> pa.Schema:
    return pa.schema([("id", pa.string()), ("length", pa.uint32()), ("tokens", pa.list_(pa.from_numpy_dtype(dtype)))])


class ArrowShardWriter:
    """Writes `DocBatch`es to an open binary file as one Arrow IPC file."""

    def __init__(self, sink: BinaryIO, dtype: np.dtype):
        options = pa.ipc.IpcWriteOptions(compression=pa.Codec("zstd", compression_level=ZSTD_LEVEL))
        self._schema = arrow_schema(dtype)
        self._sink = sink
        self._writer = pa.ipc.new_file(sink, self._schema, options=options)
        # The file opens with the 8-byte magic and the schema message, written with the first batch
        self._end = len(_FILE_MAGIC) + len(self._schema.serialize())
        self.ranges: list[tuple[int, int]] = []  # (offset, size) of each record batch written

    def write(self, batch: DocBatch) -> None:
        tokens = pa.ListArray.from_arrays(pa.array(batch.offsets.astype(np.int32)), pa.array(batch.tokens))
        self._writer.write_batch(
            pa.record_batch(
                [pa.array(batch.ids, pa.string()), pa.array(batch.lengths, pa.uint32()), tokens], schema=self._schema
            )
        )
        end = self._sink.tell()
        self.ranges.append((self._end, end - self._end))
        self._end = end

    def close(self) -> None:
        self._writer.close()


_FILE_MAGIC = b"ARROW1\0\0"


def decode_record_batch(data: bytes, dtype: np.dtype, columns: tuple[int, ...]) -> pa.RecordBatch:
    """These columns of the record batch whose IPC message (metadata and body, as the writer's `ranges`
    delimit it) is `data`: read as a one-batch IPC stream behind the schema, which lets Arrow decompress
    only the columns asked for, on this thread (as `ArrowShardReader` does)."""
    options = pa.ipc.IpcReadOptions(included_fields=list(columns), use_threads=False)
    return pa.ipc.open_stream(pa.py_buffer(_schema_message(np.dtype(dtype)) + data), options=options).read_next_batch()


@functools.lru_cache(maxsize=2)
def _schema_message(dtype: np.dtype) -> bytes:
    return arrow_schema(dtype).serialize().to_pybytes()


class ArrowShardReader:
    """Random access to the batches of one Arrow shard file; a read decompresses one batch.

    The file is read with positioned reads, not memory-mapped: a loader that reads a whole shard
    set over an epoch would otherwise count every page it touched in its resident memory."""

    def __init__(self, path: str):
        source = pa.OSFile(path)
        self._files = {
            cols: pa.ipc.open_file(source, options=pa.ipc.IpcReadOptions(included_fields=list(cols), use_threads=False))
            for cols in ((ID,), (LENGTH,), (TOKENS,))
        }
        self.num_batches = self._files[(LENGTH,)].num_record_batches

    def lengths(self, i: int) -> np.ndarray:
        return self._files[(LENGTH,)].get_batch(i).column(0).to_numpy()

    def tokens(self, i: int) -> np.ndarray:
        return self._files[(TOKENS,)].get_batch(i).column(0).values.to_numpy()

    def ids(self, i: int) -> list[str]:
        return self._files[(ID,)].get_batch(i).column(0).to_pylist()
