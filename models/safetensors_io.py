"""Reading safetensors without torch: the header (JSON after an 8-byte length), then each tensor as a
view into a memory map of its file, widened tensor by tensor when asked, so loading holds at most one
tensor's float32 copy beyond what the device keeps. F32, F16 and BF16 are read (BF16 through ml_dtypes'
numpy dtype; its widening to float32 is exact); any other dtype is refused by name.

The format is small and fixed (github.com/huggingface/safetensors, "Format"); the safetensors package's
numpy reader refuses BF16, which every published Qwen3 and Llama 3 uses, so vt reads the header itself.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import ml_dtypes
import numpy as np

from vt.errors import CheckpointError

DTYPES: dict[str, np.dtype] = {"F32": np.dtype(np.float32), "F16": np.dtype(np.float16),
                               "BF16": np.dtype(ml_dtypes.bfloat16)}
MAX_HEADER_BYTES = 100 * 1024 * 1024  # the format's own limit


@dataclass(frozen=True, slots=True)
class TensorInfo:
    file: Path
    dtype: str  # the safetensors name: F32, F16, BF16, ...
    shape: tuple[int, ...]
    begin: int  # byte offsets into the file, past the header
    end: int


def read_header(path: Path) -> dict[str, TensorInfo]:
    """Every tensor's dtype, shape and byte range in one file; a damaged header is a CheckpointError."""
    try:
        with path.open("rb") as f:
            raw = f.read(8)
            if len(raw) < 8:
                raise CheckpointError(f"{path}: truncated ({len(raw)} bytes): no safetensors header")
            (n,) = struct.unpack("<Q", raw)
            if n > MAX_HEADER_BYTES:
                raise CheckpointError(f"{path}: header length {n} is not a safetensors header")
            header = f.read(n)
        size = path.stat().st_size
        meta = json.loads(header)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"{path}: unreadable safetensors header: {e}") from None
    if len(header) < n or not isinstance(meta, dict):
        raise CheckpointError(f"{path}: truncated safetensors header")
    data = 8 + n
    out: dict[str, TensorInfo] = {}
    for name, t in meta.items():
        if name == "__metadata__":
            continue
        try:
            begin, end = (int(x) for x in t["data_offsets"])
            info = TensorInfo(path, str(t["dtype"]), tuple(int(d) for d in t["shape"]), data + begin, data + end)
        except (KeyError, TypeError, ValueError) as e:
            raise CheckpointError(f"{path}: tensor {name!r} has a malformed header entry ({e})") from None
        if not (data <= info.begin <= info.end <= size):
            raise CheckpointError(f"{path}: tensor {name!r} lies outside the file (truncated?)")
        out[name] = info
    return out


def check_dtype(name: str, info: TensorInfo) -> np.dtype:
    dtype = DTYPES.get(info.dtype)
    if dtype is None:
        raise CheckpointError(f"tensor {name!r} is {info.dtype}: only {', '.join(DTYPES)} weights are supported")
    if int(np.prod(info.shape, dtype=np.int64)) * dtype.itemsize != info.end - info.begin:
        raise CheckpointError(f"tensor {name!r}: {info.end - info.begin} bytes for a {info.dtype} {info.shape}")
    return dtype


class LazyWeights(Mapping[str, np.ndarray]):
    """name -> float32 array, read from a memory map on access (never all at once). Each access maps the
    file anew and the map goes with the view, so the pages of tensors already read (of any shard) leave
    the process once their copies are made: host memory holds one tensor's pages, not every shard's."""

    def __init__(self, infos: dict[str, TensorInfo]) -> None:
        self.infos = infos

    def raw(self, name: str) -> np.ndarray:
        """The tensor in its stored dtype, as a view of a memory map of its file."""
        info = self.infos[name]
        dtype = check_dtype(name, info)
        if info.end == info.begin:  # an empty tensor: nothing to map
            return np.zeros(info.shape, dtype)
        mm = np.memmap(info.file, dtype=np.uint8, mode="r", offset=info.begin, shape=(info.end - info.begin,))
        return mm.view(dtype).reshape(info.shape)

    def __getitem__(self, name: str) -> np.ndarray:
        return self.raw(name).astype(np.float32)  # exact for F16 and BF16

    def __iter__(self) -> Iterator[str]:
        return iter(self.infos)

    def __len__(self) -> int:
        return len(self.infos)

    @property
    def dtypes(self) -> set[str]:
        return {i.dtype for i in self.infos.values()}
