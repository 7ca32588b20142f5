"""The NumPy backend: executes eagerly, and simulates CUDA stream capture faithfully.

On a capturing stream a launch is recorded, not executed (as on CUDA); `Graph.replay` executes the
recording over the same buffers, so staging new inputs into persistent buffers and replaying gives
new answers, and forgetting to stage gives stale ones. Every call listed in
shared/device-facts.md answers as CUDA does, in each capture mode, with sticky invalidation.
"""

from __future__ import annotations

import threading
import traceback
from typing import Any

import numpy as np

from backends.attribution import KernelAttribution
from backends.cupy_model import Charger, modeled_numpy
from backends.kernels.library import LIBRARY
from backends.streams import Policy, StreamOrder, in_order, tensors_of
from vt.backend import (
    Backend,
    Buffer,
    CaptureMode,
    CaptureSequence,
    Event,
    Graph,
    Kernel,
    Stream,
    Tensor,
)
from vt.errors import (
    CaptureInvalidated,
    CaptureIsolation,
    CaptureOnLegacyStream,
    CaptureUnjoined,
    CaptureUnsupported,
    CudaError,
    H2DDuringCapture,
    IllegalMemoryAccess,
    IllegalState,
)

POISON_BYTE = 0xFF  # float32 0xFFFFFFFF is a NaN: poisoned reads show up in every result


class _Capture(CaptureSequence):
    """A capture sequence, plus what the simulation records: its launches and its joins."""

    def __init__(self, origin: Stream, mode: CaptureMode) -> None:
        super().__init__(origin, mode)
        self.ops: list[tuple[Any, tuple, dict]] = []
        # Buffers of the temporaries kernels drew while recording: on CUDA their addresses are baked into
        # the graph (CuPy allocated them during capture), so a replay after they were freed is a
        # use-after-free even though no recorded argument names them.
        self.hidden: list[Buffer] = []
        # side stream id -> (the stream that waited on it, the side stream's num_ops covered by that wait).
        # A side stream is joined when a chain of such waits reaches the origin (B joins A, C joins B).
        self.joined: dict[int, tuple[Stream, int]] = {}

    def forbids_unsafe_calls(self) -> bool:
        if self.mode is CaptureMode.GLOBAL:
            return True
        return self.mode is CaptureMode.THREAD_LOCAL and self.thread == threading.get_ident()

    def fail(self, err: CudaError) -> CudaError:
        if self.invalid is None:
            self.invalid = err
        return err


class CpuGraph(Graph):
    def __init__(self, backend: CpuBackend, ops: list, graph_buffers: list[Buffer], hidden: list[Buffer]) -> None:
        super().__init__(backend)
        self.ops = ops
        self.graph_buffers = graph_buffers
        self.hidden = hidden

    @property
    def num_nodes(self) -> int:
        return len(self.ops)

    def _replay(self, stream: Stream) -> None:
        backend: CpuBackend = self.backend  # type: ignore[assignment]
        if stream.capture is not None:  # a graph launched into a capture becomes a child node
            backend._check_capture_call(stream)
            stream.capture.ops.extend(self.ops)
            return
        if backend.is_sanitizing:
            for buf in self.hidden:
                if buf.is_freed:
                    raise IllegalMemoryAccess(
                        f"a graph replayed over {buf!r}, a temporary its capture drew, freed since\n"
                        f"--- allocated at:\n{buf.alloc_stack}--- freed at:\n{buf.free_stack}")
        if backend.order is not None:  # one op on its stream, touching everything its nodes touch
            tensors = [t for kernel, args, kw in self.ops for t in tensors_of(kernel, args, kw)]
            backend.order.submit(stream, self._run, tensors, f"a graph of {len(self.ops)} nodes")
        else:
            self._run()

    def _run(self) -> None:
        for kernel, args, kw in self.ops:
            self.backend._execute(kernel, args, kw, replay=True)  # type: ignore[attr-defined]

    def _destroy(self) -> None:
        for buf in self.graph_buffers:
            self.backend._mark_freed(buf)
        self.graph_buffers = []


def _copy_kernel(xp: Any, dst: Any, src: Any) -> None:
    dst[...] = src


_copy_kernel.writes = (0,)  # type: ignore[attr-defined]


def limit_blas_threads() -> int:
    """NumPy's BLAS to VT_BLAS_THREADS threads, process-wide (threadpoolctl): left at one per core, its
    threads compete with the server's and the clients' (on 2 cores the README's main job at c=16 fell from
    880 to 272 output tok/s). Returns the limit."""
    from threadpoolctl import threadpool_limits

    from vt.env import flags

    n = flags().blas_threads
    threadpool_limits(limits=n, user_api="blas")  # set now, never restored: the process's one setting
    return n


class CpuBackend(Backend):
    name = "cpu"
    can_capture = True

    def __init__(self, *, sanitize: bool | None = None) -> None:
        from vt.pool import DevicePool

        super().__init__(sanitize=sanitize)
        self.attribution = KernelAttribution(self)
        self._charger = Charger(self)  # the arrays a kernel creates go through the pool, as on CUDA
        self.xp = modeled_numpy(self._charger)
        self.order: StreamOrder | None = None  # the stream-order simulator, when a test attaches one
        DevicePool(self)  # attaches itself as self.pool
        self.kernels = LIBRARY  # the bodies of the named operations (vt/ops.py)
        limit_blas_threads()

    def simulate_streams(self, policy: Policy = in_order) -> StreamOrder:
        """From now on each stream is a queue of deferred work run in the order the policy picks, and
        a touch of bytes another stream wrote without a wait between is a StreamRace."""
        self.order = StreamOrder(policy)
        return self.order

    # ---- memory -----------------------------------------------------------------------------
    def _alloc(self, nbytes: int) -> Any:
        self._refuse_if_forbidden()
        return np.empty(nbytes, dtype=np.uint8)

    def _free(self, buf: Buffer) -> None:
        self._refuse_if_forbidden("driver free")  # cudaFree is an unsafe call: it invalidates a global capture
        if self.is_sanitizing:
            buf.mem.fill(POISON_BYTE)  # keep the memory: a later touch must read poison, not reuse

    def poison(self, buf: Buffer) -> None:
        buf.mem.fill(POISON_BYTE)

    def _alloc_async(self, nbytes: int, stream: Stream) -> tuple[Any, bool]:
        if stream.capture is not None:
            self._check_capture_call(stream)
            return np.empty(nbytes, dtype=np.uint8), True  # a graph alloc node, owned by the graph
        with self._lock:
            self.allocs += 1
            self.allocs_in_step += 1
        return np.empty(nbytes, dtype=np.uint8), False

    def _as_array(self, t: Tensor) -> Any:
        return np.ndarray(t.shape, t.dtype, buffer=t.buffer.mem, offset=t.offset)

    # ---- launches ---------------------------------------------------------------------------
    def launch(self, kernel: Kernel, *args: Any, stream: Stream | None = None, **kw: Any) -> None:
        stream = stream or self.current_stream()
        if stream.capture is not None:
            self._check_capture_call(stream)
            self._shadow_run(kernel, args, kw, stream.capture)
            stream.capture.ops.append((kernel, args, kw))
        elif self.order is not None:
            self.order.submit(stream, lambda: self._execute(kernel, args, kw, charged=True),
                              tensors_of(kernel, args, kw), f"kernel {getattr(kernel, '__name__', kernel)!r}")
        else:
            self._execute(kernel, args, kw, charged=True)
        stream.num_ops += 1

    def _execute(self, kernel: Kernel, args: tuple, kw: dict, *, charged: bool = False, replay: bool = False) -> None:
        """Runs a kernel on its tensors' memory. Charged (an eager launch): the arrays it creates go
        through the pool, as CuPy's do; a replay creates nothing, as a CUDA graph replay allocates nothing."""
        if self.is_sanitizing:
            for a in (*args, *kw.values()):
                if isinstance(a, Tensor):
                    self._check_access(kernel, a, owned_by_graph=replay)
        arrays = [a.array() if isinstance(a, Tensor) else a for a in args]
        kwarrays = {k: (v.array() if isinstance(v, Tensor) else v) for k, v in kw.items()}
        if charged:
            self._charged(kernel, arrays, kwarrays, execute=True)
        else:
            kernel(self.xp, *arrays, **kwarrays)

    def _shadow_run(self, kernel: Kernel, args: tuple, kw: dict, cap: _Capture) -> None:
        """Nothing executes during a capture, but CuPy allocates a kernel's temporaries while it records
        it: charge them here too. Charging may need a run (a kernel's first launch at its signature):
        it runs on zero stand-ins of its tensors, since a capturable kernel's allocations depend on
        shapes only and the tensors' values may not exist yet. Its results are dropped."""
        if getattr(kernel, "is_collective", False):
            kw = {**kw, "shadow": True}  # its temporaries are charged as any kernel's; nothing is sent
        stand_ins: dict[int, Any] = {}

        def stand_in(t: Tensor) -> Any:
            if id(t) not in stand_ins:  # one stand-in per tensor keeps in-place kernels in place
                stand_ins[id(t)] = np.zeros(t.shape, t.dtype)
            return stand_ins[id(t)]

        arrays = [stand_in(a) if isinstance(a, Tensor) else a for a in args]
        kwarrays = {k: (stand_in(v) if isinstance(v, Tensor) else v) for k, v in kw.items()}
        with np.errstate(all="ignore"), self.attribution.collecting() as drawn:  # zeros make NaNs: only
            self._charged(kernel, arrays, kwarrays, execute=False)  # the allocations matter here
        cap.hidden.extend(blk.buffer for blk in drawn)

    def _charged(self, kernel: Kernel, arrays: list, kwarrays: dict, *, execute: bool) -> None:
        with self.attribution.running(kernel):
            self._charger.call(kernel, self.xp, arrays, kwarrays, execute=execute)

    def _check_access(self, kernel: Kernel, t: Tensor, owned_by_graph: bool = False) -> None:
        """A freed or out-of-range buffer is always illegal; a released pool block is illegal unless a graph
        replays over its own temporaries (pinned for its life; check_idle keeps others off them)."""
        buf = t.buffer
        name = getattr(kernel, "__name__", repr(kernel))
        def here() -> str:  # formatted only for the error: a stack per checked tensor would dominate the lane
            return "".join(traceback.format_stack(limit=11)[:-4])

        blk = t.block
        if not owned_by_graph and blk is not None and (not blk.is_live or blk.generation != t.generation):
            state = "released" if not blk.is_live else "released and handed to another owner"
            raise IllegalMemoryAccess(
                f"kernel {name!r} touched {t!r}, a pool block {state}\n"
                f"--- handed out at:\n{blk.owner_stack}--- released at:\n{blk.release_stack}--- launched at:\n{here()}")
        if buf.is_freed:
            raise IllegalMemoryAccess(
                f"kernel {name!r} touched freed {buf!r} via {t!r}\n"
                f"--- allocated at:\n{buf.alloc_stack}--- freed at:\n{buf.free_stack}--- launched at:\n{here()}")
        if not t.is_in_range:
            raise IllegalMemoryAccess(
                f"kernel {name!r} touched {t!r} out of range: bytes [{t.offset}, {t.offset + t.nbytes}) "
                f"of a {buf.nbytes}-byte buffer\n"
                f"--- allocated at:\n{buf.alloc_stack}--- launched at:\n{here()}")

    # ---- copies -----------------------------------------------------------------------------
    def copy_h2d(self, dst: Tensor, src: Any) -> None:
        if self.current_stream().capture is not None:
            raise H2DDuringCapture()  # refused before reaching the driver: capture not invalidated
        host = np.asarray(src, dtype=dst.dtype).reshape(dst.shape)
        if self.order is not None:  # CuPy's set(): the source staged now, the copy in order on the stream; the
            host = host.copy()  # host has not thereby seen anything the stream ran before it
            self.order.submit(self.current_stream(), lambda: self._execute(_copy_kernel, (dst, host), {}),
                              [(dst, True)], "a host->device copy")
            return
        self._execute(_copy_kernel, (dst, host), {})

    def copy_h2d_async(self, dst: Tensor, src: Any, stream: Stream | None = None) -> None:
        # Inside a capture the host array is captured by reference, as cudaMemcpyAsync captures the
        # host pointer: replay reads whatever it holds at replay time.
        self.launch(_copy_kernel, dst, src, stream=stream)

    def copy_d2h(self, src: Tensor) -> Any:
        stream = self.current_stream()
        if stream.capture is not None:  # a synchronous copy waits on the stream: illegal in capture
            raise stream.capture.fail(CaptureUnsupported("synchronous device->host copy"))
        if self.is_sanitizing:
            self._check_access(_copy_kernel, src)
        if self.order is not None:  # CuPy's get(): the copy on the current stream, then a synchronize of it
            self.order.synchronize(stream)
            self.order.host_read(src)
        return src.array().copy()

    def pinned_empty(self, shape: tuple[int, ...], dtype: Any) -> Tensor:
        """Pinned host memory, modelled as a buffer the host may only look at through host_view (where the
        stream simulator checks that the copy into it was waited for)."""
        return self.empty(shape, dtype)

    def copy_d2h_async(self, src: Tensor, dst: Any, stream: Stream | None = None) -> None:
        self.launch(_copy_kernel, dst, src, stream=stream)

    def host_wait(self, event: Event) -> None:
        if self._captures:
            for cap in self._captures:
                cap.fail(CaptureUnsupported("event synchronize"))
            raise CaptureUnsupported("event synchronize during capture")
        if self.order is not None and event.clock is not None:
            self.order.host_wait(event.clock)

    def host_view(self, pinned: Tensor) -> Any:
        if self.order is not None:
            self.order.host_read(pinned)
        return pinned.array()

    # ---- streams and events -----------------------------------------------------------------
    def record_event(self, stream: Stream | None = None) -> Event:
        stream = stream or self.current_stream()
        if stream.capture is not None:
            self._check_capture_call(stream)
        clock = self.order.record(stream) if self.order is not None and stream.capture is None else None
        return Event(self, stream, stream.num_ops, stream.capture, clock=clock)

    def wait_event(self, stream: Stream, event: Event) -> None:
        cap = event.capture if event.capture in self._captures else None
        if stream.capture is None and cap is None:
            if self.order is not None and event.clock is not None:
                self.order.wait(stream, event.clock)
            return  # without the simulator CPU work is synchronous: an outside event is always complete
        if stream.capture is not None and cap is None:
            raise stream.capture.fail(CaptureIsolation(f"{stream!r} waited on an event recorded outside"))
        assert cap is not None
        if stream.capture is None:  # fork: the side stream joins the capture sequence
            stream.capture = cap
            cap.members.append(stream)
            stream.num_ops += 1  # the fork itself is work that must be joined back
            return
        self._check_capture_call(stream)
        if event.stream is not stream and event.stream is not cap.origin:
            _, seen = cap.joined.get(event.stream.id, (stream, -1))
            cap.joined[event.stream.id] = (stream, max(seen, event.seq))
        stream.num_ops += 1

    def query_event(self, event: Event) -> bool:
        # cudaEventQuery in a capture invalidates it (CuPy then answers False silently). vt refuses
        # by name instead, and the capture is invalidated, as CUDA does underneath.
        if self._captures:
            for cap in self._captures:
                cap.fail(CaptureUnsupported("event query"))
            raise CaptureUnsupported("event query during capture")
        if self.order is not None and event.clock is not None:  # queued work under the simulator: not done yet
            return self.order.query(event.clock)
        return True

    def synchronize(self, stream: Stream | None = None) -> None:
        caps = [stream.capture] if stream is not None and stream.capture else ([] if stream else self._captures)
        if caps:
            for cap in caps:
                cap.fail(CaptureUnsupported("synchronize"))
            raise CaptureUnsupported("synchronize during capture")
        if self.order is not None:
            self.order.synchronize(stream)

    # ---- capture ----------------------------------------------------------------------------
    def begin_capture(self, stream: Stream, mode: CaptureMode = CaptureMode.GLOBAL) -> None:
        if stream.is_legacy:
            raise CaptureOnLegacyStream()
        if stream.capture is not None:
            raise stream.capture.fail(IllegalState("begin_capture on a stream that is capturing"))
        self._open_capture(stream, _Capture(stream, CaptureMode(mode)))

    def end_capture(self, stream: Stream) -> Graph:
        cap: _Capture = self._close_capture(stream)
        unjoined = [s for s in cap.members[1:] if not self._is_joined(cap, s)]
        if cap.invalid is not None:
            self._drop(cap)
            raise CaptureInvalidated(f"first failure: {cap.invalid}")
        if unjoined:
            self._drop(cap)
            raise CaptureUnjoined(", ".join(repr(s) for s in unjoined))
        return CpuGraph(self, cap.ops, cap.graph_buffers, cap.hidden)

    @staticmethod
    def _is_joined(cap: _Capture, s: Stream) -> bool:
        """All of s's work reaches the origin through a chain of waits, each covering its last op."""
        seen: set[int] = set()
        while s is not cap.origin:
            if s.id in seen or s.id not in cap.joined:
                return False
            seen.add(s.id)
            waiter, covered = cap.joined[s.id]
            if covered < s.num_ops:
                return False
            s = waiter
        return True

    def _drop(self, cap: _Capture) -> None:
        for buf in cap.graph_buffers:
            self._mark_freed(buf)

    def _check_capture_call(self, stream: Stream) -> None:
        cap = stream.capture
        if cap is not None and cap.invalid is not None:
            raise CaptureInvalidated(f"first failure: {cap.invalid}")

    def _refuse_if_forbidden(self, call: str = "driver allocation") -> None:
        forbidding = [c for c in self._captures if c.forbids_unsafe_calls()]
        if forbidding:
            err = CaptureUnsupported(call)
            for cap in forbidding:
                cap.fail(err)
            raise err
