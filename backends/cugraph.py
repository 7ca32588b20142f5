"""What a capture has recorded so far, from the CUDA driver (CuPy does not expose a capture's graph).

`node_kinds` asks the driver for the capturing stream's graph and counts its nodes by kind. The CUDA
backend reads it just before ending a capture, to count the memory-allocation nodes a library put
into the graph behind vt's back (cuBLAS without a preset workspace allocates its workspace this way,
with cudaMallocAsync, inside the capture), and to report each graph's size.
"""

from __future__ import annotations

import ctypes
from functools import cache

KERNEL, MEMCPY, MEM_ALLOC, MEM_FREE = 0, 1, 10, 11  # CUgraphNodeType


@cache
def _driver() -> ctypes.CDLL:
    return ctypes.CDLL("libcuda.so.1")


def _capturing_graph(stream_ptr: int) -> ctypes.c_void_p:
    lib = _driver()
    status, capture_id, graph = ctypes.c_int(), ctypes.c_uint64(), ctypes.c_void_p()
    deps, num_deps = ctypes.c_void_p(), ctypes.c_size_t()
    rc = lib.cuStreamGetCaptureInfo_v2(ctypes.c_void_p(stream_ptr), ctypes.byref(status), ctypes.byref(capture_id),
                                       ctypes.byref(graph), ctypes.byref(deps), ctypes.byref(num_deps))
    if rc != 0 or not graph.value:
        raise RuntimeError(f"cuStreamGetCaptureInfo_v2 failed with CUresult {rc}")
    return graph


class EdgeData(ctypes.Structure):  # CUgraphEdgeData
    _fields_ = [("from_port", ctypes.c_ubyte), ("to_port", ctypes.c_ubyte), ("type", ctypes.c_ubyte),
                ("reserved", ctypes.c_ubyte * 5)]


PROGRAMMATIC = 1  # CUgraphDependencyType: the downstream kernel may start before the upstream one completes


def programmatic_edges(stream_ptr: int) -> int:
    """How many edges of the graph the stream is capturing are programmatic (backends/kernels/launch.py made them)."""
    lib, graph = _driver(), _capturing_graph(stream_ptr)
    n = ctypes.c_size_t(0)
    rc = lib.cuGraphGetEdges_v2(graph, None, None, None, ctypes.byref(n))
    if rc != 0:
        raise RuntimeError(f"cuGraphGetEdges_v2 failed with CUresult {rc}")
    if n.value == 0:  # an empty graph (asking for zero edges into arrays is an invalid value)
        return 0
    ends = (ctypes.c_void_p * n.value)(), (ctypes.c_void_p * n.value)()
    data = (EdgeData * n.value)()
    rc = lib.cuGraphGetEdges_v2(graph, ends[0], ends[1], data, ctypes.byref(n))
    if rc != 0:
        raise RuntimeError(f"cuGraphGetEdges_v2 failed with CUresult {rc}")
    return sum(1 for i in range(n.value) if data[i].type == PROGRAMMATIC)


def node_kinds(stream_ptr: int) -> dict[int, int]:
    """CUgraphNodeType -> count, for the graph the stream is capturing."""
    lib, graph = _driver(), _capturing_graph(stream_ptr)
    n = ctypes.c_size_t(0)
    lib.cuGraphGetNodes(graph, None, ctypes.byref(n))
    nodes = (ctypes.c_void_p * n.value)()
    lib.cuGraphGetNodes(graph, nodes, ctypes.byref(n))
    kinds: dict[int, int] = {}
    kind = ctypes.c_int()
    for node in nodes:
        lib.cuGraphNodeGetType(ctypes.c_void_p(node), ctypes.byref(kind))
        kinds[kind.value] = kinds.get(kind.value, 0) + 1
    return kinds
