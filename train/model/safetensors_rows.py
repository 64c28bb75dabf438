"""Read parts of tensors from a safetensors file with plain reads: only the bytes of the rows asked for.

    f = SafetensorsFile("model-00001-of-00004.safetensors")
    f.names(), f.shape("model.embed_tokens.weight")
    part = f.read("model.embed_tokens.weight", (slice(1000, 2000), slice(None)))   # float32 copy

The file is `u64 header size | JSON header | data`; a tensor is row-major bytes at its
`data_offsets`, so rows [a, b) of it are one contiguous byte range. No memory map: a mapped file's
touched pages count in the reader's resident memory until it is closed, which would make a process
loading its shard of a large model look (and, under memory limits, be charged) as large as the file.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import torch

from pretrainkit.errors import UserError

DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64}
MAX_HEADER = 100 * 2**20


class SafetensorsFile:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        try:
            with open(self.path, "rb") as f:
                (size,) = struct.unpack("<Q", f.read(8))
                if size > MAX_HEADER:
                    raise ValueError(f"header of {size} bytes")
                header = json.loads(f.read(size))
        except (OSError, ValueError, struct.error) as e:
            raise UserError(f"{self.path}: not a safetensors file ({e})") from None
        header.pop("__metadata__", None)
        self.data_start = 8 + size
        self.entries: dict = header

    def names(self) -> set[str]:
        return set(self.entries)

    def shape(self, name: str) -> list[int]:
        return list(self.entries[name]["shape"])

    def read(self, name: str, region: tuple[slice, ...]) -> torch.Tensor:
        """The part `region` (one slice per dim, steps of 1) of tensor `name`, as a float32 tensor."""
        entry = self.entries[name]
        dtype = DTYPES.get(entry["dtype"])
        if dtype is None:
            raise UserError(f"{self.path}: tensor {name} has dtype {entry['dtype']}; only {', '.join(DTYPES)} are read")
        shape = entry["shape"]
        rows = region[0] if region else slice(0, 1)
        row_elems = math.prod(shape[1:])
        item = torch.empty((), dtype=dtype).element_size()
        start = self.data_start + entry["data_offsets"][0] + rows.start * row_elems * item
        n = (rows.stop - rows.start) * row_elems * item
        buf = bytearray(n)
        with open(self.path, "rb") as f:
            f.seek(start)
            if f.readinto(buf) != n:
                raise UserError(f"{self.path}: truncated (tensor {name} ends past the end of the file)")
        part = (
            torch.frombuffer(buf, dtype=dtype).reshape(rows.stop - rows.start, *shape[1:])
            if n
            else torch.empty(0, *shape[1:], dtype=dtype)
        )
        return part[(slice(None), *region[1:])].float()
