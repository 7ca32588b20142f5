"""cuBLASLt GEMMs with the algorithm measured, not guessed: a decode GEMM is a matrix-vector product, where
cuBLAS's first heuristic pick runs a 64x8 tile over a 1,024 x 4,096 weight on 64 blocks, half the H200's SMs,
at a quarter of its bandwidth (Nsight Compute, docs/). For each GEMM shape, the first time it is seen (outside
any capture: a slot's cold step), every algorithm the heuristic offers is timed on the real shape as a step runs
it: a captured chain of launches, each over weights no other launch of the chain reads (in a step the weights
come from DRAM; timed back to back on one weight they would sit in the 50 MB L2 and reward the wrong algorithm,
measured on the H200), and the fastest kept. Later calls, captured or eager, run it with the preset workspace, so
nothing allocates inside a capture and a shape's replay and eager results agree bit for bit (one algorithm per
shape for the process).

Row-major C[m, n] = A[m, k] @ B[k, n] is column-major C^T = B^T A^T, as in backends/cublas.py.

Besides cuBLASLt's own, a decode-sized shape (at most 8 rows, 16-bit operands) also times the kernel library's
skinny GEMM (backends/kernels/skinny_gemm.py) in each of its configurations, built to stream the weights at the
memory's speed; whichever candidate is fastest runs the shape.

Only shapes of at most TUNED_MAX_ROWS rows are timed: those are the captured steps' (decode keys and the prefill
buckets, all seen at start-up). A larger step runs eagerly with a row count that changes from step to step; it
is compute-bound, where the heuristic's first pick is good, and timing each new count cost a request tens of
milliseconds (H200: 4 shapes of a 1,024-token prompt, 30 ms of its TTFT).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
import time
from typing import Any

from backends.kernels import skinny_gemm

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF, CUBLAS_COMPUTE_32F = 0, 2, 14, 68
ITEM_BYTES = {CUDA_R_32F: 4, CUDA_R_16F: 2, CUDA_R_16BF: 2}
PREF_MAX_WORKSPACE_BYTES = 1
REQUESTED = 16  # algorithms asked of the heuristic per shape
TIMED_REPS = 5
CHAIN = 8  # launches in a candidate's timing graph, at least
MAX_CHAIN = 128  # ... and at most (a tiny weight's chain need not cover the L2)
COLD_MAX_ROWS = 64  # GEMMs of at most this many rows are timed over weights not in L2
L2_FLUSH_BYTES = 128 << 20  # more than the H200's L2
L2_BYTES = 50 << 20  # the H200's L2
TUNED_MAX_ROWS = 2048  # the largest prefill bucket (vt/engine/worker/piecewise.py)


class HeuristicResult(ctypes.Structure):
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


def _load() -> ctypes.CDLL:
    names = [ctypes.util.find_library("cublasLt"), "libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"]
    try:
        import cupy

        names += glob.glob(os.path.join(cupy.cuda.get_cuda_path() or "", "lib*", "libcublasLt.so*"))
    except Exception:  # noqa: BLE001 - a best-effort search path
        pass
    for name in names:
        if name:
            try:
                return ctypes.CDLL(name)
            except OSError:
                continue
    raise OSError("libcublasLt not found")


def name(algo: Any) -> str:
    """A candidate as a log names it: a skinny GEMM configuration, or cuBLASLt."""
    return str(algo) if isinstance(algo, skinny_gemm.Config) else "cuBLASLt"


class Plan:
    """One GEMM shape: its descriptors and the algorithm chosen for it."""

    def __init__(self, lt: CublasLt, dtype: int, m: int, n: int, k: int) -> None:
        self.lt, self.dtype, self.m, self.n, self.k = lt, dtype, m, n, k
        lib, c = lt.lib, ctypes
        self.desc, self.a, self.b, self.c = c.c_void_p(), c.c_void_p(), c.c_void_p(), c.c_void_p()
        lt.check(lib.cublasLtMatmulDescCreate(c.byref(self.desc), CUBLAS_COMPUTE_32F, CUDA_R_32F), "MatmulDescCreate")
        # column-major operands: the weights B^T [n, k] (ld n), the activations A^T [k, m] (ld k), C^T [n, m]
        lt.check(lib.cublasLtMatrixLayoutCreate(c.byref(self.a), dtype, c.c_uint64(n), c.c_uint64(k),
                                                c.c_int64(n)), "MatrixLayoutCreate")
        lt.check(lib.cublasLtMatrixLayoutCreate(c.byref(self.b), dtype, c.c_uint64(k), c.c_uint64(m),
                                                c.c_int64(k)), "MatrixLayoutCreate")
        lt.check(lib.cublasLtMatrixLayoutCreate(c.byref(self.c), CUDA_R_32F, c.c_uint64(n), c.c_uint64(m),
                                                c.c_int64(n)), "MatrixLayoutCreate")
        results = (HeuristicResult * REQUESTED)()
        found = c.c_int()
        lt.check(lib.cublasLtMatmulAlgoGetHeuristic(lt.handle, self.desc, self.a, self.b, self.c, self.c, lt.pref,
                                                    REQUESTED, results, c.byref(found)), "MatmulAlgoGetHeuristic")
        self.candidates: list[Any] = [results[i] for i in range(found.value) if results[i].state == 0
                           and results[i].workspace_size <= lt.workspace_bytes]
        if not self.candidates:
            raise RuntimeError(f"cuBLASLt offers no algorithm for {m}x{n}x{k}")
        self.storage = {CUDA_R_16BF: "uint16", CUDA_R_16F: "float16"}.get(dtype)
        if lt.skinny is not None and self.storage is not None and skinny_gemm.fits(m, n, self.storage):
            self.candidates += skinny_gemm.CONFIGS  # timed last: the heuristic's first pick stays candidates[0]
        self.algo = self.candidates[0]
        self.times_us: list[float] = []

    @property
    def picked(self) -> str:
        return name(self.algo)

    def run(self, a_ptr: int, b_ptr: int, c_ptr: int, stream: int, algo: Any = None) -> None:
        lt = self.lt
        algo = algo or self.algo
        if isinstance(algo, skinny_gemm.Config):  # on CuPy's current stream, which is `stream` (CublasLt.gemm)
            import cupy

            assert lt.skinny is not None and self.storage is not None  # a Config is a candidate only then
            partials, counters = lt.skinny
            skinny_gemm.launch(cupy, self.storage, a_ptr, b_ptr, c_ptr, partials, counters, self.m, self.n, self.k,
                               algo)
            return
        lt.check(lt.lib.cublasLtMatmul(
            lt.handle, self.desc, ctypes.byref(lt.one), ctypes.c_void_p(b_ptr), self.a, ctypes.c_void_p(a_ptr), self.b,
            ctypes.byref(lt.zero), ctypes.c_void_p(c_ptr), self.c, ctypes.c_void_p(c_ptr), self.c,
            ctypes.byref(algo.algo), ctypes.c_void_p(lt.workspace_ptr),
            ctypes.c_size_t(lt.workspace_bytes), ctypes.c_void_p(stream)), "cublasLtMatmul")

    def tune(self, a_ptr: int, b_ptr: int, c_ptr: int, stream: Any) -> None:
        """Times every candidate as a captured step runs it (outside any capture) and keeps the fastest: a chain of
        launches back to back in a CUDA graph, as a step's GEMMs and the kernels between them are (a launch's latency
        partly hidden, and with programmatic launch its start overlapping the launch ahead), each over weights no
        other launch of the chain reads (regions of the tuner's scratch, so none finds them in L2, as no layer of a
        step finds its own; `_timing_weights`). Timed one launch at a time after an L2 flush, on the H200 every 0.6B
        decode GEMM cost 8-10 us whatever its size, and the skinny GEMM lost shapes it wins inside a step (docs/)."""
        import cupy

        lt = self.lt
        caller = cupy.cuda.get_current_stream()
        ready = caller.record()
        tuning = lt.tuning_stream()
        tuning.wait_event(ready)  # the operands are written
        with tuning:
            lt.flush_l2(tuning)
            weights = self._timing_weights(b_ptr)
            best, best_t = self.candidates[0], float("inf")
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            for cand in self.candidates:
                self.run(a_ptr, weights[0], c_ptr, tuning.ptr, cand)  # eager first: modules load outside a capture
                graph = self._chain(cand, a_ptr, weights, c_ptr, tuning)
                graph.launch(tuning)  # warm
                times = []
                for _ in range(TIMED_REPS):
                    start.record(tuning)
                    graph.launch(tuning)
                    end.record(tuning)
                    end.synchronize()
                    times.append(cupy.cuda.get_elapsed_time(start, end) * 1e3 / len(weights))
                t = sorted(times)[len(times) // 2]
                self.times_us.append(round(t, 2))
                if t < best_t:
                    best, best_t = cand, t
        self.algo = best
        if isinstance(best, skinny_gemm.Config) and self.storage is not None:  # gemm_add_rms_norm's variant, loaded
            skinny_gemm.load_norm(cupy, self.storage, self.m, best)  # here: a capture may launch it, not load it

    def _chain(self, cand: Any, a_ptr: int, weights: list[int], c_ptr: int, stream: Any) -> Any:
        """One candidate's launches over every weight pointer, captured (relaxed: nothing else's business)."""
        import cupy

        stream.begin_capture(mode=cupy.cuda.runtime.streamCaptureModeRelaxed)
        try:
            for w in weights:
                self.run(a_ptr, w, c_ptr, stream.ptr, cand)
        except BaseException:
            try:
                stream.end_capture()
            except Exception:  # noqa: BLE001 - the launch's own error is the one to report
                pass
            raise
        return stream.end_capture()

    def _timing_weights(self, b_ptr: int) -> list[int]:
        """The weight pointers of a timing chain, each read after more than the L2 cache holds of other weights (so
        no launch finds its weights in L2, as no layer of a step does): every region of the scratch the weight fits,
        whole chains of them (at least CHAIN launches); or, for a weight larger than the L2 cache by itself (the LM
        head), the weight itself. Their values do not matter: only the time is kept, and the output the chain wrote
        is overwritten by the real call after the tuning. A GEMM of more than COLD_MAX_ROWS rows (a prefill bucket's)
        is bound by its arithmetic, not by where its weights come from: its chain reuses the weight, and stays short
        (start-up times every bucket's shapes)."""
        size = self.n * self.k * ITEM_BYTES[self.dtype]
        stride = -(-size // 256) * 256  # cuBLASLt's heuristic assumes 256-byte aligned operands
        regions = min(L2_FLUSH_BYTES // stride, -(-2 * L2_BYTES // stride), MAX_CHAIN)  # twice the L2, if it may
        if self.m > COLD_MAX_ROWS or stride >= L2_BYTES or regions < 2:
            return [b_ptr] * CHAIN
        base = self.lt.scratch()
        return [base + (i % regions) * stride for i in range(max(CHAIN, regions))]


class CublasLt:
    def __init__(self, workspace_ptr: int, workspace_bytes: int, scratch: Any = None,
                 skinny: tuple[int, int] | None = None) -> None:
        self.scratch = scratch  # () -> device pointer of L2_FLUSH_BYTES the tuner may overwrite
        self.skinny = skinny  # the skinny GEMM's (partials, zeroed counters) device pointers; None: not a candidate
        self.lib = _load()
        self.handle = ctypes.c_void_p()
        self.check(self.lib.cublasLtCreate(ctypes.byref(self.handle)), "cublasLtCreate")
        self.workspace_ptr, self.workspace_bytes = workspace_ptr, workspace_bytes
        self.pref = ctypes.c_void_p()
        self.check(self.lib.cublasLtMatmulPreferenceCreate(ctypes.byref(self.pref)), "MatmulPreferenceCreate")
        size = ctypes.c_uint64(workspace_bytes)
        self.check(self.lib.cublasLtMatmulPreferenceSetAttribute(self.pref, PREF_MAX_WORKSPACE_BYTES,
                                                                 ctypes.byref(size), 8), "PreferenceSetAttribute")
        self.one, self.zero = ctypes.c_float(1.0), ctypes.c_float(0.0)
        self.plans: dict[tuple[int, int, int, int], Plan] = {}
        self.tuning_s = 0.0
        self._tuning_stream: Any = None

    def tuning_stream(self) -> Any:
        """A stream of the tuner's own: a timing graph is captured on it, whatever stream the caller is on (the
        legacy default stream cannot capture)."""
        import cupy

        if self._tuning_stream is None:
            self._tuning_stream = cupy.cuda.Stream(non_blocking=True)
        return self._tuning_stream

    def flush_l2(self, stream: Any) -> None:
        import cupy

        cupy.cuda.runtime.memsetAsync(self.scratch(), 0, L2_FLUSH_BYTES, stream.ptr)

    @staticmethod
    def check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with cuBLAS status {status}")

    def gemm_add_rms_norm(self, dtype: int, a: Any, b: Any, c: Any, m: int, n: int, k: int, x: Any, w: Any, h: Any,
                          eps: float) -> bool:
        """C = A @ B, then x += C and h = RMSNorm(x) * w, in one launch where this shape's plan picked the skinny
        GEMM (its epilogue: backends/kernels/skinny_gemm.py); False, nothing launched, where it did not or the shape
        has no plan yet (its first call plans and tunes it through `gemm`)."""
        import cupy

        plan = self.plans.get((dtype, m, n, k))
        if plan is None or not isinstance(plan.algo, skinny_gemm.Config) or plan.storage is None:
            return False
        if cupy.cuda.get_current_stream().is_capturing() and not skinny_gemm.norm_loaded(plan.storage, m, plan.algo):
            return False  # its module was never loaded (tune loads it): the two launches, not a load in a capture
        assert self.skinny is not None  # a Config is a candidate only then
        partials, counters = self.skinny
        skinny_gemm.launch(cupy, plan.storage, a.data.ptr, b.data.ptr, c.data.ptr, partials, counters, m, n, k,
                           plan.algo, (x.data.ptr, w.data.ptr, h.data.ptr, eps))
        return True

    def gemm(self, dtype: int, a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        """C = A @ B for one matrix each (row-major, dtype operands, float32 C) on CuPy's current stream. A new
        shape is planned (host work only) and, outside a capture, tuned; inside one (a shape the cold step did
        not see) it keeps the heuristic's first pick for good."""
        import cupy

        stream = cupy.cuda.get_current_stream()
        key = (dtype, m, n, k)
        plan = self.plans.get(key)
        if plan is None:
            t = time.perf_counter()
            plan = self.plans[key] = Plan(self, dtype, m, n, k)
            if m <= TUNED_MAX_ROWS and not stream.is_capturing():
                plan.tune(a.data.ptr, b.data.ptr, c.data.ptr, stream)
            self.tuning_s += time.perf_counter() - t
        plan.run(a.data.ptr, b.data.ptr, c.data.ptr, stream.ptr)
