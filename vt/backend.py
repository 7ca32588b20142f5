"""The Backend protocol: every device allocation and kernel launch goes through here.

A backend is a small set of `_hooks` under public methods on this base class (tinygrad's allocator
shape). The base class owns what both backends must agree on: argument checks, the allocation counters,
buffer ownership, and the named operations models launch (vt/ops.py). Capture semantics live in the
hooks: the CPU backend simulates CUDA stream capture; the CUDA backend performs it.
"""

from __future__ import annotations

import enum
import threading
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from vt.errors import (  # re-exported: DESIGN.md says vt.backend defines the typed errors
    BadBufferError,
    CaptureInvalidated,
    CaptureIsolation,
    CaptureOnLegacyStream,
    CaptureUnjoined,
    CaptureUnsupported,
    CudaError,
    GraphDestroyed,
    H2DDuringCapture,
    IllegalMemoryAccess,
    IllegalState,
)
from vt.ops import Ops

__all__ = ["Backend", "Buffer", "Tensor", "Stream", "Event", "Graph", "CaptureMode", "CaptureSequence", "Kernel",
           "BadBufferError", "CaptureInvalidated", "CaptureIsolation", "CaptureOnLegacyStream", "CaptureUnjoined",
           "CaptureUnsupported", "CudaError", "GraphDestroyed", "H2DDuringCapture", "IllegalMemoryAccess",
           "IllegalState", "MAX_ALLOC_BYTES"]

# One allocation larger than this is a bug upstream (a negative size gone unsigned, a shape
# multiplied twice), not a request: refuse it by name instead of asking the driver.
MAX_ALLOC_BYTES = 1 << 40

Kernel = Callable[..., None]  # kernel(xp, *arrays, **kw): writes into caller-provided outputs


class CaptureMode(enum.Enum):
    GLOBAL = "global"  # unsafe calls refused from any thread while the capture runs
    THREAD_LOCAL = "thread_local"  # refused from the capturing thread only
    RELAXED = "relaxed"  # unsafe calls let through (CuPy's default: hides allocation in capture)


class Buffer:
    """One driver allocation. `mem` is the backend's memory object."""

    __slots__ = ("backend", "nbytes", "mem", "id", "is_freed", "is_graph_owned", "alloc_stack",
                 "free_stack", "__weakref__")

    def __init__(self, backend: Backend, nbytes: int, mem: Any, id: int, alloc_stack: str | None) -> None:
        self.backend = backend
        self.nbytes = nbytes
        self.mem = mem
        self.id = id
        self.is_freed = False
        self.is_graph_owned = False  # stream-ordered allocation made inside a capture
        self.alloc_stack = alloc_stack
        self.free_stack: str | None = None

    def __repr__(self) -> str:
        state = "freed" if self.is_freed else "live"
        return f"Buffer#{self.id}({self.nbytes} B, {state}, {self.backend.name})"


class Tensor:
    """A typed view into a Buffer. Creating one checks nothing (like a raw pointer); a launch does."""

    __slots__ = ("buffer", "offset", "shape", "dtype", "nbytes", "_array", "block", "generation")

    def __init__(self, buffer: Buffer, shape: tuple[int, ...], dtype: Any, offset: int = 0) -> None:
        import numpy as np

        self.buffer = buffer
        self.offset = offset
        self.shape = tuple(int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        n = 1
        for d in self.shape:
            n *= d
        self.nbytes = n * self.dtype.itemsize
        self._array: Any = None
        self.block: Any = None  # the pool block it lives on, if it came from a DevicePool
        self.generation = 0  # the block's hand-out it belongs to: another number means another owner now

    @property
    def is_in_range(self) -> bool:
        return 0 <= self.offset and self.offset + self.nbytes <= self.buffer.nbytes

    def array(self) -> Any:
        """The backend array (NumPy or CuPy) viewing this tensor's memory; cached."""
        if self._array is None:
            self._array = self.buffer.backend._as_array(self)
        return self._array

    def view(self, shape: tuple[int, ...], dtype: Any = None, offset: int = 0) -> Tensor:
        t = Tensor(self.buffer, shape, self.dtype if dtype is None else dtype, self.offset + offset)
        t.block, t.generation = self.block, self.generation  # a view belongs to the same owner
        return t

    def __repr__(self) -> str:
        return f"Tensor({self.shape}, {self.dtype}, {self.buffer!r}+{self.offset})"


class Stream:
    __slots__ = ("backend", "id", "is_legacy", "handle", "capture", "num_ops")

    def __init__(self, backend: Backend, id: int, is_legacy: bool = False, handle: Any = None) -> None:
        self.backend = backend
        self.id = id
        self.is_legacy = is_legacy
        self.handle = handle  # the backend's own stream object
        self.capture: Any = None  # the capture sequence this stream belongs to, or None
        self.num_ops = 0  # work items issued (the CPU backend's join bookkeeping reads it)

    def __repr__(self) -> str:
        return f"Stream#{self.id}{' (legacy)' if self.is_legacy else ''}"


class CaptureSequence:
    """One open capture: the origin stream plus every stream forked into it. Backends extend it."""

    def __init__(self, origin: Stream, mode: CaptureMode) -> None:
        self.origin = origin
        self.mode = mode
        self.thread = threading.get_ident()
        self.members: list[Stream] = [origin]  # streams pulled into this capture by a fork
        self.invalid: CudaError | None = None  # sticky: once set, every later capture call fails
        self.graph_buffers: list[Buffer] = []  # stream-ordered allocations the graph will own


class Event:
    __slots__ = ("backend", "stream", "seq", "capture", "handle", "clock")

    def __init__(self, backend: Backend, stream: Stream, seq: int, capture: Any, handle: Any = None,
                 clock: Any = None) -> None:
        self.backend = backend
        self.clock = clock  # the CPU stream simulator's vector clock at the record
        self.stream = stream
        self.seq = seq  # stream.num_ops when recorded
        self.capture = capture  # the capture it was recorded in, or None (recorded outside)
        self.handle = handle

    @property
    def done(self) -> bool:
        return self.backend.query_event(self)


class Graph:
    """A captured graph. Backends subclass it; `replay` and `destroy` are the public surface."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.is_destroyed = False

    def replay(self, stream: Stream | None = None) -> None:
        if self.is_destroyed:
            raise GraphDestroyed("replay of a destroyed graph")
        self._replay(stream or self.backend.current_stream())

    def destroy(self) -> None:
        if self.is_destroyed:
            raise GraphDestroyed("destroy of a destroyed graph")
        self.is_destroyed = True
        self._destroy()

    def _replay(self, stream: Stream) -> None:
        raise NotImplementedError("need _replay")

    def _destroy(self) -> None:
        pass


class Backend(Ops):
    """Public methods here; each backend supplies the `_hooks` and its kernel library (`kernels`)."""

    name = "abstract"
    can_capture = False
    xp: Any = None  # the array namespace kernels are written against

    def __init__(self, *, sanitize: bool | None = None) -> None:
        from vt.env import flags

        self.watchdog: Any = None  # host waits on CUDA call it while they poll (tensor parallel: peers' health)
        self.is_sanitizing = flags().sanitize if sanitize is None else sanitize
        self._lock = threading.RLock()
        self._next_id = 1
        self.pool: Any = None  # its DevicePool, which attaches itself (vt/pool.py); backends make theirs
        self._tls = threading.local()
        self.allocs = 0  # driver allocations over the backend's life
        self.frees = 0
        self.allocs_in_step = 0  # driver allocations since reset_counters()
        self.frees_in_step = 0
        self.allocs_in_capture = 0  # driver allocations made while any stream captured (any mode)
        self.live_bytes = 0
        self.default_stream = Stream(self, 0, is_legacy=True, handle=self._legacy_stream_handle())
        self._captures: list[Any] = []  # open CaptureSequences (each backend's own kind), oldest first

    @classmethod
    def check_model(cls, config: Any) -> None:
        """Refuses, with a CheckpointError, a model this backend's kernels cannot run; called before any weight is
        loaded (and, with tensor parallelism, before any worker starts). The CPU backend's NumPy twins run any
        shape the config allows."""

    # ---- counters ---------------------------------------------------------------------------
    def reset_counters(self) -> None:
        with self._lock:
            self.allocs_in_step = self.frees_in_step = self.allocs_in_capture = 0

    # ---- driver allocation ------------------------------------------------------------------
    def alloc(self, nbytes: int) -> Buffer:
        nbytes = _check_nbytes(nbytes)
        with self._lock:
            if self._any_capture_active():
                self.allocs_in_capture += 1
            self.allocs += 1
            self.allocs_in_step += 1
        try:
            mem = self._alloc(nbytes)  # may raise CaptureUnsupported (and invalidate the capture)
        except BaseException:
            with self._lock:
                self.allocs -= 1
                self.allocs_in_step -= 1
            raise
        return self._new_buffer(nbytes, mem)

    def free(self, buf: Buffer) -> None:
        self._check_own(buf, "free")
        if buf.is_graph_owned:
            raise BadBufferError(f"free of {buf!r}: it belongs to a graph; destroy the graph instead")
        self._free(buf)
        self._mark_freed(buf)
        with self._lock:
            self.frees += 1
            self.frees_in_step += 1

    def alloc_async(self, nbytes: int, stream: Stream | None = None) -> Buffer:
        """Stream-ordered allocation (cudaMallocAsync): inside a capture it is a graph node."""
        nbytes = _check_nbytes(nbytes)
        stream = stream or self.current_stream()
        mem, is_graph_owned = self._alloc_async(nbytes, stream)
        buf = self._new_buffer(nbytes, mem)
        buf.is_graph_owned = is_graph_owned
        if is_graph_owned:
            stream.capture.graph_buffers.append(buf)
        return buf

    def _new_buffer(self, nbytes: int, mem: Any) -> Buffer:
        with self._lock:
            bid = self._next_id
            self._next_id += 1
            self.live_bytes += nbytes
        stack = "".join(traceback.format_stack(limit=12)[:-2]) if self.is_sanitizing else None
        return Buffer(self, nbytes, mem, bid, stack)

    def _mark_freed(self, buf: Buffer) -> None:
        buf.is_freed = True
        with self._lock:
            self.live_bytes -= buf.nbytes
        if self.is_sanitizing:
            buf.free_stack = "".join(traceback.format_stack(limit=12)[:-2])

    def _check_own(self, buf: Any, what: str) -> None:
        if not isinstance(buf, Buffer):
            raise BadBufferError(f"{what}: expected a Buffer, got {type(buf).__name__}")
        if buf.backend is not self:
            raise BadBufferError(f"{what} of {buf!r}: it belongs to another backend ({buf.backend.name})")
        if buf.is_freed:
            raise BadBufferError(f"{what} of {buf!r}: already freed (double free)")

    # ---- tensors ----------------------------------------------------------------------------
    def empty(self, shape: tuple[int, ...], dtype: Any) -> Tensor:
        """A long-lived tensor on its own driver allocation (never from the transient free lists)."""
        import numpy as np

        nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        return Tensor(self.alloc(max(nbytes, 1)), shape, dtype)

    def _as_array(self, t: Tensor) -> Any:
        raise NotImplementedError("need _as_array")

    # ---- streams ----------------------------------------------------------------------------
    def current_stream(self) -> Stream:
        return getattr(self._tls, "stream", None) or self.default_stream

    @contextmanager
    def use_stream(self, stream: Stream) -> Iterator[Stream]:
        prev = getattr(self._tls, "stream", None)
        self._tls.stream = stream
        try:
            yield stream
        finally:
            self._tls.stream = prev

    def new_stream(self) -> Stream:
        with self._lock:
            sid = self._next_id
            self._next_id += 1
        return Stream(self, sid, handle=self._new_stream_handle())

    def is_capturing(self, stream: Stream | None = None) -> bool:
        return (stream or self.current_stream()).capture is not None

    # ---- hooks every backend supplies -------------------------------------------------------
    def _legacy_stream_handle(self) -> Any:
        return None

    def _new_stream_handle(self) -> Any:
        return None

    def _any_capture_active(self) -> bool:
        return bool(self._captures)

    def _open_capture(self, stream: Stream, cap: CaptureSequence) -> None:
        stream.capture = cap
        self._captures.append(cap)

    def _close_capture(self, stream: Stream) -> Any:
        """The capture `stream` began, closed on vt's side (its streams stop capturing); returned."""
        cap = stream.capture
        if cap is None or cap.origin is not stream:
            raise IllegalState(f"end_capture on {stream!r}, which did not begin a capture")
        self._captures.remove(cap)
        for s in cap.members:
            s.capture = None
        return cap

    def _alloc(self, nbytes: int) -> Any:
        raise NotImplementedError("need _alloc")

    def _free(self, buf: Buffer) -> None:
        raise NotImplementedError("need _free")

    def _alloc_async(self, nbytes: int, stream: Stream) -> tuple[Any, bool]:
        raise NotImplementedError("need _alloc_async")

    def poison(self, buf: Buffer) -> None:
        """Sanitizer: overwrite a released block so a stale read shows (NaN in float32)."""
        raise NotImplementedError("need poison")

    def record_event(self, stream: Stream | None = None) -> Event:
        raise NotImplementedError("need record_event")

    def wait_event(self, stream: Stream, event: Event) -> None:
        raise NotImplementedError("need wait_event")

    def query_event(self, event: Event) -> bool:
        raise NotImplementedError("need query_event")

    def synchronize(self, stream: Stream | None = None) -> None:
        raise NotImplementedError("need synchronize")

    def copy_h2d(self, dst: Tensor, src: Any) -> None:
        raise NotImplementedError("need copy_h2d")

    def copy_h2d_async(self, dst: Tensor, src: Any, stream: Stream | None = None) -> None:
        raise NotImplementedError("need copy_h2d_async")

    def copy_d2h(self, src: Tensor) -> Any:
        raise NotImplementedError("need copy_d2h")

    # Read-back through pinned host memory: an async copy on a stream, an event, a host wait on that event
    # and only then a host view (vt/engine/worker/readback.py).
    def pinned_empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        raise NotImplementedError("need pinned_empty")

    def copy_d2h_async(self, src: Tensor, dst: Any, stream: Stream | None = None) -> None:
        raise NotImplementedError("need copy_d2h_async")

    def host_wait(self, event: Event) -> None:
        raise NotImplementedError("need host_wait")

    def host_view(self, pinned: Any) -> Any:
        raise NotImplementedError("need host_view")

    def end_start_up(self) -> None:
        """Start-up is over: every shape a captured step runs has been seen. A backend that measures its kernels'
        algorithms on first sight (CUDA's GEMM tuner) stops, so a shape first seen later (an eager step's row count)
        costs a request no timing and no compilation. Nothing to do on a backend that measures nothing."""

    def begin_capture(self, stream: Stream, mode: CaptureMode = CaptureMode.GLOBAL) -> None:
        raise NotImplementedError("need begin_capture")

    def end_capture(self, stream: Stream) -> Graph:
        raise NotImplementedError("need end_capture")


def _check_nbytes(nbytes: Any) -> int:
    if isinstance(nbytes, bool) or not isinstance(nbytes, int):
        try:
            import numpy as np

            if isinstance(nbytes, np.integer):
                nbytes = int(nbytes)
            else:
                raise TypeError
        except TypeError:
            raise BadBufferError(f"nbytes must be an int, got {type(nbytes).__name__}") from None
    if nbytes <= 0:
        raise BadBufferError(f"nbytes must be > 0, got {nbytes}")
    if nbytes > MAX_ALLOC_BYTES:
        raise BadBufferError(f"nbytes={nbytes} is absurd (limit {MAX_ALLOC_BYTES} B)")
    return nbytes
