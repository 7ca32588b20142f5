"""The CuPy backend: the same Backend protocol over real CUDA stream capture.

- Driver allocations are raw cudaMalloc/cudaFree, counted like the CPU backend's.
- Captures run in GLOBAL mode unless a caller names another (CuPy's default, relaxed, lets cudaMalloc
  through and hides exactly the defect this project exists to catch).
- CuPy's own allocator is routed through the DevicePool, so CuPy's hidden temporaries are visible to
  the demand profile, the counters and the pre-grow. The hook is scoped to this backend's launches
  (CuPy's thread-local `using_allocator`), never set process-wide: two backends never take each
  other's hook.
- GEMM goes through a capture-safe cuBLAS path (backends/cublas.py).
- Event/stream queries, which silently invalidate a capture under CuPy, are refused by name.
CUDA errors come back as vt's typed errors with CUDA's names and texts.
"""

from __future__ import annotations

import time
import types
from typing import Any, cast

import numpy as np

from backends import cugraph
from backends.attribution import KernelAttribution
from backends.kernels.library import LIBRARY
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

_BY_STATUS: dict[int, type[CudaError]] = {
    900: CaptureUnsupported, 901: CaptureInvalidated, 904: CaptureUnjoined, 905: CaptureIsolation,
    401: IllegalState, 700: IllegalMemoryAccess,
}


def _translate(e: BaseException) -> BaseException:
    status = getattr(e, "status", None)
    if status in _BY_STATUS:
        return _BY_STATUS[status]()
    text = str(e)
    if "cannot capture on the default (legacy) stream" in text:
        return CaptureOnLegacyStream()
    if "H2D transfers are disallowed" in text:
        return H2DDuringCapture()
    return e


class _Lease:
    """Owner of a pool block lent to CuPy: when CuPy drops the memory, the block goes back."""

    __slots__ = ("pool", "block")

    def __init__(self, pool: Any, block: Any) -> None:
        self.pool, self.block = pool, block

    def __del__(self) -> None:
        try:
            self.pool.put(self.block)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class CudaGraph(Graph):
    def __init__(self, backend: CudaBackend, graph: Any, graph_buffers: list[Buffer],
                 node_kinds: dict[int, int], programmatic_edges: int = 0) -> None:
        super().__init__(backend)
        self.graph = graph
        self.graph_buffers = graph_buffers
        self.node_kinds = node_kinds  # CUgraphNodeType -> count (backends/cugraph.py)
        self.programmatic_edges = programmatic_edges  # kernels that may start before the one ahead completes

    @property
    def cuda(self) -> CudaBackend:
        return cast(CudaBackend, self.backend)

    @property
    def num_nodes(self) -> int:
        return sum(self.node_kinds.values())

    def _replay(self, stream: Stream) -> None:
        try:
            self.graph.launch(stream.handle)
        except Exception as e:
            raise _translate(e) from e

    def __del__(self) -> None:  # a dropped graph may be collected in the middle of another capture
        if getattr(self, "graph", None) is not None:
            self.cuda._bury(self.graph)

    def _destroy(self) -> None:
        self.cuda._bury(self.graph)
        self.graph = None
        for buf in self.graph_buffers:
            self.backend._mark_freed(buf)


class CudaBackend(Backend):
    name = "cuda"
    can_capture = True

    def __init__(self, *, sanitize: bool | None = None) -> None:
        try:
            import cupy
        except ImportError as e:
            from vt.errors import ConfigError

            raise ConfigError(f"backend='cuda' needs CuPy with a CUDA GPU (pip install 'vt[cuda]'): {e}") from None

        from backends.cublas import WORKSPACE_BYTES, Cublas
        from backends.cublaslt import CublasLt
        from backends.gemm import staged_matmul
        from vt.pool import DevicePool

        self.cp = cupy
        super().__init__(sanitize=False)  # the poisoning sanitizer is the CPU backend's
        self.attribution = KernelAttribution(self)
        DevicePool(self)  # attaches itself as self.pool
        self.kernels = LIBRARY  # the bodies of the named operations (vt/ops.py)
        # cudaGraphExecDestroy inside a global-mode capture invalidates it (seen on the H200 when a
        # dropped graph was garbage-collected mid-capture): graphs let go while anything captures
        # wait here until the last capture ends.
        self._graveyard: list[Any] = []
        self._workspace = self.alloc(WORKSPACE_BYTES)  # long-lived, set on the cuBLAS handle up front
        self._lt_workspace = self.alloc(WORKSPACE_BYTES)  # cuBLASLt's, passed to every call
        self._scratches: list[Buffer] = []  # kernels' long-lived scratch (_zeroed_scratch)
        from vt.env import flags

        lt = CublasLt(self._lt_workspace.mem, WORKSPACE_BYTES, self._tuning_scratch,
                      self._skinny_scratch()) if flags().gemm_tuned else None
        if lt is not None and flags().gemm_plan_cache != "0":
            lt.open_plan_cache(flags().cache_dir, flags().pdl, flags().skinny_cluster,
                               retime=flags().gemm_plan_cache == "retime")
        self._scratch: Buffer | None = None
        self.decode_merge_counters = self._decode_merge_counters()
        self.blas = Cublas(self._workspace.mem, WORKSPACE_BYTES, lt)
        xp = types.SimpleNamespace(**{k: getattr(cupy, k) for k in dir(cupy) if not k.startswith("__")})
        xp.matmul = lambda a, b, out=None: staged_matmul(cupy, self.blas.sgemm, a, b, out)
        xp.gemm_add_rms_norm = self.blas.gemm_add_rms_norm  # the GEMM and its consumer as timed (else False)
        xp.gemm_silu_mul = self.blas.gemm_silu_mul
        xp.gemm_add = self.blas.gemm_add  # the consumer's norm (VT_CONSUMER_NORM)
        xp.rms_norm_gemm = self.blas.rms_norm_gemm
        self.xp = xp
        self._allocator = self._cupy_alloc  # installed around each launch only (_call)

    @classmethod
    def check_model(cls, config: Any) -> None:
        """A shape the CUDA kernels cannot run, refused by its config field when the model loads (its twins, which
        the CPU backend runs, take any): not a kernel's ValueError at the first step."""
        from backends.kernels.fused import HEAD_DIMS
        from backends.kernels.moe import MAX_EXPERTS, MAX_TOP_K
        from backends.kernels.norm import NORM_VECS
        from vt.errors import CheckpointError

        def refuse(field: str, why: str) -> None:
            raise CheckpointError(f"config.json: {field} is not served by the CUDA backend's kernels ({why}); the CPU "
                                  f"backend runs it")

        if config.head_dim not in HEAD_DIMS:  # the attention kernels' layouts (backends/kernels/fused.py)
            refuse(f"head_dim {config.head_dim}", f"attention: head dims {', '.join(map(str, HEAD_DIMS))}")
        max_hidden = 4 * NORM_VECS * 1024  # a row a block, NORM_VECS float4s a thread (norm.cu)
        if config.hidden_size % 4 or config.hidden_size > max_hidden:
            refuse(f"hidden_size {config.hidden_size}", f"RMSNorm: a multiple of 4, at most {max_hidden}")
        if config.is_moe and config.num_experts > MAX_EXPERTS:  # the routing kernel's per-block tables (moe.cu)
            refuse(f"num_experts {config.num_experts}", f"MoE routing: at most {MAX_EXPERTS}")
        if config.is_moe and config.num_experts_per_tok > MAX_TOP_K:
            refuse(f"num_experts_per_tok {config.num_experts_per_tok}", f"MoE routing: at most {MAX_TOP_K}")

    def end_start_up(self) -> None:
        if self.blas.lt is not None:
            self.blas.lt.stop_tuning()

    def _skinny_scratch(self) -> tuple[int, int]:
        """The skinny GEMM's partials and its zeroed tile counters, long-lived (backends/kernels/skinny_gemm.py)."""
        from backends.kernels.skinny_gemm import MAX_TILES, SCRATCH_FLOATS

        base = self._zeroed_scratch(4 * (SCRATCH_FLOATS + MAX_TILES), zero_from=4 * SCRATCH_FLOATS)
        return base, base + 4 * SCRATCH_FLOATS

    def _decode_merge_counters(self) -> int:
        """The rope attention's counters, zeroed and long-lived: its last block of a token's partitions merges them
        (backends/kernels/decode_attention.py MERGE_COUNTERS) and leaves its counter at zero again."""
        from backends.kernels.decode_attention import MERGE_COUNTERS

        return self._zeroed_scratch(4 * MERGE_COUNTERS)

    def _zeroed_scratch(self, nbytes: int, zero_from: int = 0) -> int:
        """A long-lived buffer (held for the backend's life) whose bytes from zero_from on are zero before any kernel
        runs: the kernels' counters, which each launch leaves at zero again. Its device pointer."""
        buf = self.alloc(nbytes)
        self._scratches.append(buf)
        self.cp.cuda.runtime.memset(int(buf.mem) + zero_from, 0, nbytes - zero_from)
        self.cp.cuda.runtime.deviceSynchronize()  # the memset is the legacy stream's; the compute streams are others
        return int(buf.mem)

    def _tuning_scratch(self) -> int:
        """A long-lived buffer the GEMM tuner overwrites to flush the L2 cache (allocated at the first tuning,
        which runs in a cold step, never inside a capture)."""
        from backends.cublaslt import L2_FLUSH_BYTES

        if self._scratch is None:
            self._scratch = self.alloc(L2_FLUSH_BYTES)
        return int(self._scratch.mem)

    # ---- memory -----------------------------------------------------------------------------
    def _legacy_stream_handle(self) -> Any:
        return self.cp.cuda.Stream.null

    def _new_stream_handle(self) -> Any:
        return self.cp.cuda.Stream(non_blocking=True)

    def _alloc(self, nbytes: int) -> Any:
        try:
            return self.cp.cuda.runtime.malloc(nbytes)
        except Exception as e:
            err = _translate(e)
            if isinstance(err, CaptureUnsupported):
                for cap in self._captures:
                    cap.invalid = cap.invalid or err
            raise err from e

    def _free(self, buf: Buffer) -> None:
        self.cp.cuda.runtime.free(buf.mem)

    def poison(self, buf: Buffer) -> None:
        self.cp.cuda.runtime.memset(buf.mem, 0xFF, buf.nbytes)

    def _alloc_async(self, nbytes: int, stream: Stream) -> tuple[Any, bool]:
        try:
            ptr = self.cp.cuda.runtime.mallocAsync(nbytes, stream.handle.ptr)
        except Exception as e:
            raise _translate(e) from e
        return ptr, stream.capture is not None

    def _cupy_alloc(self, nbytes: int) -> Any:
        """CuPy's allocator, routed through the pool: CuPy's hidden temporaries are pool blocks."""
        blk = self.attribution.get(nbytes)
        mem = self.cp.cuda.UnownedMemory(blk.buffer.mem, blk.nbytes, _Lease(self.pool, blk))
        return self.cp.cuda.MemoryPointer(mem, 0)

    def _as_array(self, t: Tensor) -> Any:
        mem = self.cp.cuda.UnownedMemory(t.buffer.mem, t.buffer.nbytes, t.buffer)
        return self.cp.ndarray(t.shape, t.dtype, memptr=self.cp.cuda.MemoryPointer(mem, t.offset))

    # ---- launches and copies ----------------------------------------------------------------
    def launch(self, kernel: Kernel, *args: Any, stream: Stream | None = None, **kw: Any) -> None:
        stream = stream or self.current_stream()
        arrays = [a.array() if isinstance(a, Tensor) else a for a in args]
        kwarrays = {k: (v.array() if isinstance(v, Tensor) else v) for k, v in kw.items()}
        with self.attribution.running(kernel):
            self._call(stream, lambda: kernel(self.xp, *arrays, **kwarrays))
        stream.num_ops += 1

    def fuses_norm(self, a: Tensor, b: Tensor, out: Tensor, x: Tensor, w: Tensor, h: Tensor, *, eps: float) -> bool:
        ops = a.array(), b.array(), out.array(), x.array(), w.array(), h.array()
        return bool(self._call(self.current_stream(), lambda: self.blas.fuses_norm(*ops, eps=eps)))

    def _call(self, stream: Stream, fn: Any) -> Any:
        if stream.capture is not None and stream.capture.invalid is not None:
            raise CaptureInvalidated(f"first failure: {stream.capture.invalid}")
        try:
            with stream.handle, self.cp.cuda.using_allocator(self._allocator):
                return fn()
        except CudaError:
            raise
        except Exception as e:
            err = _translate(e)
            if isinstance(err, CudaError) and stream.capture is not None:
                stream.capture.invalid = stream.capture.invalid or err
            raise err from e

    def copy_h2d(self, dst: Tensor, src: Any) -> None:
        host = np.ascontiguousarray(np.asarray(src, dtype=dst.dtype).reshape(dst.shape))
        s = self.current_stream()
        self._call(s, lambda: dst.array().set(host, stream=s.handle))

    def copy_h2d_async(self, dst: Tensor, src: Any, stream: Stream | None = None) -> None:
        s = stream or self.current_stream()
        rt = self.cp.cuda.runtime
        self._call(s, lambda: rt.memcpyAsync(dst.buffer.mem + dst.offset, src.ctypes.data, dst.nbytes,
                                             rt.memcpyHostToDevice, s.handle.ptr))

    def copy_d2h(self, src: Tensor) -> Any:
        s = self.current_stream()
        return self._call(s, lambda: src.array().get(stream=s.handle))

    def pinned_empty(self, shape: tuple[int, ...], dtype: Any) -> Any:
        import cupyx

        return cupyx.empty_pinned(shape, dtype)

    def copy_d2h_async(self, src: Tensor, dst: Any, stream: Stream | None = None) -> None:
        s = stream or self.current_stream()
        rt = self.cp.cuda.runtime
        self._call(s, lambda: rt.memcpyAsync(dst.ctypes.data, src.buffer.mem + src.offset, src.nbytes,
                                             rt.memcpyDeviceToHost, s.handle.ptr))
        s.num_ops += 1

    def host_wait(self, event: Event) -> None:
        if self._captures:  # cudaEventSynchronize would wait on work a capture never runs
            for cap in self._captures:
                cap.invalid = cap.invalid or CaptureUnsupported("event synchronize")
            raise CaptureUnsupported("event synchronize during capture")
        if self.watchdog is None:
            event.handle.synchronize()
            return
        while not event.handle.done:  # tensor parallel: an NCCL collective waits for a dead peer forever
            self.watchdog()
            time.sleep(20e-6)

    def host_view(self, pinned: Any) -> Any:
        return pinned

    # ---- streams and events -----------------------------------------------------------------
    def record_event(self, stream: Stream | None = None) -> Event:
        stream = stream or self.current_stream()
        ev = self.cp.cuda.Event(disable_timing=True)
        self._call(stream, lambda: ev.record(stream.handle))
        return Event(self, stream, stream.num_ops, stream.capture, handle=ev)

    def wait_event(self, stream: Stream, event: Event) -> None:
        self._call(stream, lambda: stream.handle.wait_event(event.handle))
        cap = event.capture if event.capture in self._captures else None
        if cap is not None and stream.capture is None:  # fork: CUDA pulled the stream into the capture
            stream.capture = cap
            cap.members.append(stream)
        stream.num_ops += 1

    def query_event(self, event: Event) -> bool:
        # cudaEventQuery inside a capture invalidates it and CuPy answers False: refuse by name.
        if self._captures:
            for cap in self._captures:
                cap.invalid = cap.invalid or CaptureUnsupported("event query")
            raise CaptureUnsupported("event query during capture")
        return bool(event.handle.done)

    def synchronize(self, stream: Stream | None = None) -> None:
        s = stream or self.current_stream()
        if stream is None and self._captures and s.capture is None:
            s = self._captures[0].origin  # a device-wide sync while something captures
        self._call(s, lambda: (s.handle.synchronize() if stream is not None else self.cp.cuda.Device().synchronize()))

    # ---- capture ----------------------------------------------------------------------------
    def begin_capture(self, stream: Stream, mode: CaptureMode = CaptureMode.GLOBAL) -> None:
        rt = self.cp.cuda.runtime
        cuda_mode = {CaptureMode.GLOBAL: rt.streamCaptureModeGlobal, CaptureMode.THREAD_LOCAL:
                     rt.streamCaptureModeThreadLocal, CaptureMode.RELAXED: rt.streamCaptureModeRelaxed}[mode]
        if stream.capture is None and not stream.is_legacy:
            self.blas.bind(stream.handle.ptr)  # outside the capture: stream and preset workspace
        try:
            stream.handle.begin_capture(mode=cuda_mode)
        except Exception as e:
            err = _translate(e)
            if stream.capture is not None and isinstance(err, CudaError):
                stream.capture.invalid = stream.capture.invalid or err
            raise err from e
        self._open_capture(stream, CaptureSequence(stream, CaptureMode(mode)))

    def end_capture(self, stream: Stream) -> Graph:
        cap = self._close_capture(stream)
        census_error: Exception | None = None
        try:
            kinds = cugraph.node_kinds(stream.handle.ptr)  # read while the capture is open
        except Exception as e:  # noqa: BLE001 - reported after the capture is closed
            kinds, census_error = {}, e
        try:
            programmatic = cugraph.programmatic_edges(stream.handle.ptr)
        except Exception:  # noqa: BLE001 - a figure for the lane, not a rule: unknown (-1) costs no capture
            programmatic = -1
        try:
            graph = stream.handle.end_capture()
        except Exception as e:
            raise _translate(e) from e
        if not self._captures:
            self._graveyard.clear()
        if cap.invalid is not None:
            self._bury(graph)
            raise CaptureInvalidated(f"first failure: {cap.invalid}")
        if census_error is not None:
            raise IllegalState(f"could not read the captured graph's nodes: {census_error}")
        # Allocation nodes vt did not ask for (alloc_async makes the ones it did): a library allocated
        # inside the capture with cudaMallocAsync, which global mode permits. vt counts them as the
        # driver allocations inside a capture that they are.
        hidden = kinds.get(cugraph.MEM_ALLOC, 0) - len(cap.graph_buffers)
        with self._lock:
            self.allocs_in_capture += max(hidden, 0)
        return CudaGraph(self, graph, cap.graph_buffers, kinds, programmatic)

    def _bury(self, cupy_graph: Any) -> None:
        if self._captures:
            self._graveyard.append(cupy_graph)  # destroyed when the last capture ends
