"""Tensor parallelism: one rank's view of its group, and the collectives the model launches.

Collectives come from existing engines: torch.distributed with gloo on the CPU backend (so CPU CI runs
TP = 2 across real processes), and NCCL through CuPy's binding on the CUDA backend (it enqueues on vt's
own CuPy streams, so an all-reduce is captured into the decode graph like any kernel). The ranks meet at a
TCP store that one process hosts on a port the OS picks as it binds: a port probed free and bound later
can be taken in between by another process (another group's store, any client's outgoing connection).
The NCCL unique id travels through that store. Nothing here waits on a peer without a bound: the gloo
group and the store time out (the scheduler outputs travel elsewhere, over the workers' stdin pipes).

A collective is launched through the backend like a kernel (recorded in a capture, replayed with the
graph). NCCL sets up a communicator's connections and buffers lazily, at the first enqueue of each kind
of collective (NCCL_RUNTIME_CONNECT, the default since NCCL 2.22): inside a capture that is a device
allocation, which global mode refuses. The CPU model does the same with one driver allocation per kind,
and `warm_up` (run by the graph driver's pre-grow) enqueues every kind once, outside any capture.
"""

from __future__ import annotations

import datetime
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from vt.backend import Backend, Tensor

KINDS = ("all_reduce", "all_gather")
LAZY_BYTES = 1 << 20  # the CPU model's stand-in for a collective kind's connection buffers


@dataclass(slots=True)
class Shard:
    """Which slice of the model a rank holds."""

    rank: int
    size: int

    def heads(self, num_heads: int) -> tuple[int, int]:
        """(first head, count) of a rank's attention heads (num_heads is a multiple of size)."""
        n = num_heads // self.size
        return self.rank * n, n

    def kv_heads(self, num_kv_heads: int) -> tuple[int, int]:
        """(first KV head, count): split when there are at least as many as ranks, else the one KV head
        this rank's query heads read, replicated across the ranks that share it."""
        if num_kv_heads >= self.size:
            return self.heads(num_kv_heads)
        return self.rank * num_kv_heads // self.size, 1

    def rows(self, total: int) -> tuple[int, int]:
        """(start, count) of an evenly split dimension (a multiple of size)."""
        n = total // self.size
        return self.rank * n, n

    def vocab(self, vocab_size: int) -> tuple[int, int]:
        """(start, count) of a vocabulary-parallel slice: ceil(V / size) rows, the last padded."""
        n = -(-vocab_size // self.size)
        return self.rank * n, n


def gloo_wait(work: Any, watch: Any) -> None:
    """The end of an asynchronous gloo collective, polled: every few polls `watch` checks the peers (rank
    0: the workers' exit codes) and raises if one is gone. A killed peer can leave gloo waiting out its
    whole timeout on a send; the watch ends that wait within milliseconds."""
    polls = 0
    while not work.is_completed():
        polls += 1
        if watch is not None and polls % 64 == 0:
            watch()
        time.sleep(0 if polls < 256 else 1e-4)  # a tiny collective ends within the first, spun, polls
    work.wait()  # the collective's own error, if it failed


def _all_reduce_gloo(xp: Any, x: Any, pg: Any, watch: Any = None, shadow: bool = False) -> None:
    """shadow: the CPU capture's charging run (temporaries drawn, nothing sent)."""
    import torch
    import torch.distributed as dist

    if not shadow:
        gloo_wait(dist.all_reduce(torch.from_numpy(x), group=pg, async_op=True), watch)


def _all_gather_gloo(xp: Any, local: Any, full: Any, pg: Any, watch: Any = None, shadow: bool = False) -> None:
    """full [n, size * cols]: rank r's local [n, cols] lands in columns r * cols ... (gathered rank-major,
    then transposed into place, as the NCCL body does: the same temporaries on both backends)."""
    import torch
    import torch.distributed as dist

    size, n, cols = full.shape[1] // local.shape[1], local.shape[0], local.shape[1]
    stacked = xp.empty((size, n, cols), dtype=xp.float32)
    if not shadow:
        # gloo receives into tensors torch owns: its work object can hold them past the wait (until a gloo
        # thread drops them), and a pool block held that way would be free at no predictable moment (a
        # capture right after could find its class empty and allocate: CaptureUnsupported, one run in many).
        parts = [torch.empty((n, cols), dtype=torch.float32) for _ in range(size)]
        gloo_wait(dist.all_gather(parts, torch.from_numpy(local), group=pg, async_op=True), watch)
        for r, part in enumerate(parts):
            stacked[r] = part.numpy()
    full[...] = stacked.transpose(1, 0, 2).reshape(n, size * cols)


def _all_reduce_nccl(xp: Any, x: Any, comm: Any) -> None:
    from cupy.cuda import nccl

    comm.allReduce(x.data.ptr, x.data.ptr, x.size, nccl.NCCL_FLOAT32, nccl.NCCL_SUM, xp.cuda.get_current_stream().ptr)


def _all_gather_nccl(xp: Any, local: Any, full: Any, comm: Any) -> None:
    """NCCL gathers rank-major ([size, n, cols]); the columns are put in place by a transpose."""
    from cupy.cuda import nccl

    size, n, cols = full.shape[1] // local.shape[1], local.shape[0], local.shape[1]
    stacked = xp.empty((size, n, cols), dtype=xp.float32)
    comm.allGather(local.data.ptr, stacked.data.ptr, local.size, nccl.NCCL_FLOAT32, xp.cuda.get_current_stream().ptr)
    full[...] = stacked.transpose(1, 0, 2).reshape(n, size * cols)


for _k in (_all_reduce_gloo, _all_gather_gloo, _all_reduce_nccl, _all_gather_nccl):
    setattr(_k, "is_collective", True)  # noqa: B010 - the CPU capture shadow-runs it with shadow=True


class Group:
    """A rank's tensor-parallel group: the data collectives on its backend, and the store the ranks met at."""

    def __init__(self, backend: Backend, shard: Shard, store: Any, data: Any) -> None:
        self.backend, self.shard = backend, shard
        self.store = store  # a torch.distributed TCPStore (every backend)
        self.data = data  # the same gloo group on the CPU; a cupy NcclCommunicator on CUDA
        self.is_nccl = backend.name == "cuda"
        self.ready: set[str] = set()  # collective kinds whose lazy setup has run
        self.lazy_buffers: list[Any] = []

    @property
    def rank(self) -> int:
        return self.shard.rank

    @property
    def size(self) -> int:
        return self.shard.size

    def all_reduce(self, t: Tensor) -> None:
        """Sums t over the ranks, in place, on the current stream."""
        self._setup("all_reduce")
        self.backend.launch(_all_reduce_nccl if self.is_nccl else _all_reduce_gloo, t, **self._peers())

    def all_gather(self, local: Tensor, full: Tensor) -> None:
        """full[:, r * cols : (r + 1) * cols] = rank r's local [n, cols]."""
        self._setup("all_gather")
        self.backend.launch(_all_gather_nccl if self.is_nccl else _all_gather_gloo, local, full, **self._peers())

    def _peers(self) -> dict[str, Any]:
        """The collective's keywords: NCCL's communicator, or gloo's group and the peers' watch."""
        return {"comm": self.data} if self.is_nccl else {"pg": self.data, "watch": self._watch}

    def _watch(self) -> None:
        if self.backend.watchdog is not None:  # rank 0 of an engine: raises if a worker died
            self.backend.watchdog()

    def warm_up(self) -> None:
        """Every kind of collective once, eagerly, so none sets itself up inside a capture."""
        pool = self.backend.pool
        x, full = pool.empty((1, 8), np.float32), pool.empty((1, 8 * self.size), np.float32)
        self.backend.copy_h2d(x, np.zeros((1, 8), np.float32))
        self.all_reduce(x)
        self.all_gather(x, full)
        pool.release(x)
        pool.release(full)

    def _setup(self, kind: str) -> None:
        """The CPU model of NCCL's lazy setup: one driver allocation at a kind's first enqueue (CUDA: NCCL
        does its own)."""
        if kind in self.ready:
            return
        if not self.is_nccl:
            self.lazy_buffers.append(self.backend.alloc(LAZY_BYTES))
        self.ready.add(kind)


def leave_group(peer_died: bool) -> None:
    """This process leaves the torch.distributed group. After a peer died, the group object is leaked on
    purpose: a gloo collective that the dead peer left pending keeps one of the group's threads waiting out the
    group's timeout (60 s), and gloo's destructor joins that thread (abort does not wake it, torch 2.13), so
    whatever dropped the last reference would wait that long: the engine process's teardown did, and `vt serve`
    killed it after 30 s (CI, one run in about forty here). A leaked group keeps its threads and sockets (about 4
    and 15; rank 0's store among them): once per dead peer, in a process whose engine is dead."""
    import ctypes

    import torch.distributed as dist

    if not dist.is_initialized():
        return
    if peer_died:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(dist.group.WORLD))  # never returned: no destructor runs
    dist.destroy_process_group()  # out of torch's registry (at once): a later group may start in this process


HOST = "127.0.0.1"
NCCL_ID_KEY = "vt/nccl-unique-id"


def host_store(size: int, timeout_s: float) -> Any:
    """The group's rendezvous store, listening on a port the OS picks (`.port` says which)."""
    import torch.distributed as dist

    return dist.TCPStore(HOST, 0, size, True, timeout=datetime.timedelta(seconds=timeout_s), wait_for_workers=False)


def join_store(port: int, size: int, timeout_s: float) -> Any:
    """A client of the store another process hosts at HOST:port (waits timeout_s at most for it)."""
    import torch.distributed as dist

    return dist.TCPStore(HOST, port, size, False, timeout=datetime.timedelta(seconds=timeout_s))


def init_group(backend: Backend, rank: int, size: int, store: Any, timeout_s: float) -> Group:
    """Joins the process group through `store` and builds the data collectives: gloo on the CPU (a
    collective waits timeout_s at most for a peer), NCCL on CUDA."""
    import torch.distributed as dist

    dist.init_process_group("gloo", store=store, rank=rank, world_size=size,
                            timeout=datetime.timedelta(seconds=timeout_s))
    data: Any = dist.group.WORLD
    if backend.name == "cuda":
        import pickle

        from cupy.cuda import nccl

        if rank == 0:
            store.set(NCCL_ID_KEY, pickle.dumps(nccl.get_unique_id()))
        data = nccl.NcclCommunicator(size, pickle.loads(store.get(NCCL_ID_KEY)), rank)
    return Group(backend, Shard(rank, size), store, data)
