"""A kernel launch with programmatic stream serialization (programmatic dependent launch, sm_90+), which CuPy does
not offer: `cuLaunchKernelEx` through ctypes, its arguments marshalled as CuPy marshals a RawKernel's.

Inside a capture such a launch becomes a programmatic edge of the graph: the kernel's blocks may be scheduled while
the kernel before it still runs, and each waits in its first statement (`vt::pdl_entry`, common.cuh) until that
kernel has completed. A decode step of hundreds of small kernels then pays less of each launch's latency
(docs/ has the H200's figures). Only kernels whose source opens with that wait are launched this way
(backends/kernels/build.py decides).

The same call launches a grid as thread-block clusters (sm_90), which CuPy's launch does not offer either: a kernel
that reads its cluster's shared memory (the decode attention's cluster merge) is always launched so, eager or captured.
"""

from __future__ import annotations

import ctypes
from functools import cache
from typing import Any

import numpy as np

CLUSTER_DIMENSION = 4  # CUlaunchAttributeID: the value's first 12 bytes, the cluster's blocks in x, y, z
PROGRAMMATIC_STREAM_SERIALIZATION = 6


class LaunchAttribute(ctypes.Structure):  # CUlaunchAttribute: a 4-byte id, padding, a 64-byte value union
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_char * 64)]


class LaunchConfig(ctypes.Structure):  # CUlaunchConfig (cuda.h)
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_mem", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(LaunchAttribute)), ("num_attrs", ctypes.c_uint)]


@cache
def _driver() -> ctypes.CDLL:
    lib = ctypes.CDLL("libcuda.so.1")
    lib.cuLaunchKernelEx.argtypes = [ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    return lib


def _attribute(attr_id: int, *values: int) -> LaunchAttribute:
    attr = LaunchAttribute(id=attr_id)
    packed = (ctypes.c_uint * len(values))(*values)
    ctypes.memmove(ctypes.addressof(attr) + LaunchAttribute.value.offset, packed, ctypes.sizeof(packed))
    return attr


def argument(x: Any) -> ctypes._SimpleCData | ctypes.Array:
    """One kernel argument's bytes, as CuPy passes it: a device array's pointer, a NumPy scalar's own bytes, a
    Python int as int64 and a float as double."""
    data = getattr(x, "data", None)
    if data is not None and hasattr(data, "ptr"):
        return ctypes.c_uint64(data.ptr)
    if isinstance(x, np.generic):
        raw = x.tobytes()
        return (ctypes.c_char * len(raw)).from_buffer_copy(raw)
    if isinstance(x, bool):
        return ctypes.c_bool(x)
    if isinstance(x, int):
        return ctypes.c_int64(x)
    if isinstance(x, float):
        return ctypes.c_double(x)
    raise TypeError(f"a kernel argument of type {type(x).__name__} cannot be passed")


def dims(d: tuple[int, ...]) -> tuple[int, int, int]:
    full = (tuple(d) + (1, 1))[:3]
    return (max(1, int(full[0])), max(1, int(full[1])), max(1, int(full[2])))


def launch_ex(function_ptr: int, grid: tuple[int, ...], block: tuple[int, ...], args: tuple, shared_mem: int,
              stream_ptr: int, *, programmatic: bool, cluster: tuple[int, int, int] | None = None) -> None:
    """Launches a CUfunction on a stream: with programmatic stream serialization allowed (`programmatic`), and as
    thread-block clusters of `cluster` blocks (sm_90; the grid a multiple of it in each dimension), either or both."""
    values = [argument(a) for a in args]
    params = (ctypes.c_void_p * max(1, len(values)))(*[ctypes.addressof(v) for v in values])
    wanted = ([_attribute(PROGRAMMATIC_STREAM_SERIALIZATION, 1)] if programmatic else []) + \
        ([_attribute(CLUSTER_DIMENSION, *dims(cluster))] if cluster is not None else [])
    attrs = (LaunchAttribute * max(1, len(wanted)))(*wanted)
    config = LaunchConfig(grid=(ctypes.c_uint * 3)(*dims(grid)), block=(ctypes.c_uint * 3)(*dims(block)),
                          shared_mem=shared_mem, stream=stream_ptr, attrs=attrs, num_attrs=len(wanted))
    rc = _driver().cuLaunchKernelEx(ctypes.byref(config), function_ptr, params, None)
    if rc != 0:
        raise LaunchError(rc)


class LaunchError(RuntimeError):
    """A failed launch, its CUresult as `status` (as CuPy's errors carry theirs): the CUDA backend turns a capture's
    refusal (900, 901, 905 ...) into vt's typed error from it, whichever path launched the kernel."""

    def __init__(self, status: int) -> None:
        super().__init__(f"cuLaunchKernelEx failed with CUresult {status}")
        self.status = status
