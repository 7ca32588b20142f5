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

A GEMM whose consumer the skinny GEMM can run in its last block (an epilogue: the residual add + RMSNorm after an o
or down projection, SiLU x up after the gate/up projection) has a plan of its own, which times each candidate with
its consumer: a cuBLASLt algorithm followed by the consumer's own kernel, against the skinny GEMM's fused variant.
Timed alone, a GEMM picks the faster GEMM, not the faster pair (H200, 0.6B, one row: the o projection and its norm
took 7.3 us as the skinny GEMM's epilogue, 9.7 us as cuBLASLt's algorithm and the norm kernel). Under VT_SKINNY_MMA
the tensor-core GEMM (2..16 rows) is a candidate of those plans too, with the norm and SwiGLU in its launch.

Only shapes of at most TUNED_MAX_ROWS rows, seen before `stop_tuning` (the engine's start-up), are timed: those are
the captured steps' (decode keys and the prefill buckets). A shape first seen later keeps the heuristic's first pick:
an eager mixed step's LM head over its few logit rows was a new shape for each new row count, and its timing, with
the skinny GEMM's configurations compiled for it, stalled serving for 2-4 s a step (H200, 8 requests of 8k tokens).
A step of more rows runs eagerly with a row count that changes from step to step; it is compute-bound, where the
heuristic's first pick is good, and timing each new count cost a request tens of milliseconds (H200: 4 shapes of a
1,024-token prompt, 30 ms of its TTFT).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import logging
import math
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from backends.gemm_plans import PlanCache, machine_tag, plan_key
from backends.kernels import skinny_gemm, skinny_mma
from backends.kernels.activation import PAIR_COLS

CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF, CUBLAS_COMPUTE_32F = 0, 2, 14, 68
ITEM_BYTES = {CUDA_R_32F: 4, CUDA_R_16F: 2, CUDA_R_16BF: 2}
PREF_MAX_WORKSPACE_BYTES = 1
REQUESTED = 16  # algorithms asked of the heuristic per shape
TIMED_PAIRS = 3  # rounds of timing a candidate: there and back, three times
CHAIN = 8  # launches in a candidate's timing graph, at least
MAX_CHAIN = 128  # ... and at most (a tiny weight's chain need not cover the L2)
COLD_MAX_ROWS = 64  # GEMMs of at most this many rows are timed over weights not in L2
L2_FLUSH_BYTES = 128 << 20  # more than the H200's L2
L2_BYTES = 50 << 20  # the H200's L2
TUNED_MAX_ROWS = 2048  # the largest prefill bucket (vt/engine/worker/piecewise.py)
EPILOGUE_BYTES = 4 << 20  # the tuning scratch's tail: a timed epilogue's outputs (never a timing chain's weight)
STORAGE = {CUDA_R_16BF: "uint16", CUDA_R_16F: "float16"}
log = logging.getLogger("vt")


def fastest(candidates: Sequence[Any], time_once: Callable[[Any], float], pairs: int = TIMED_PAIRS
            ) -> tuple[int, list[float]]:
    """(the index of the fastest candidate, every candidate's time): each timed once a round, in the heuristic's
    order and then in reverse, `pairs` times; a candidate's time is the median of its pairs' means. A drift of the
    GPU's clocks while start-up tunes that is linear over a pair adds the same to every candidate's mean (first
    in one round, last in the other), where each candidate's reps timed together handed the drift to whichever ran
    at the better moment. The median over pairs drops a pair a stray stall hit. A tie keeps the earlier candidate."""
    order = list(range(len(candidates)))
    times: list[list[float]] = [[] for _ in candidates]
    for _ in range(pairs):
        there = {i: time_once(candidates[i]) for i in order}
        back = {i: time_once(candidates[i]) for i in reversed(order)}
        for i in order:
            times[i].append((there[i] + back[i]) / 2)
    medians = [sorted(t)[len(t) // 2] for t in times]
    return min(order, key=medians.__getitem__), medians


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
    """A candidate as a log names it: a skinny GEMM configuration (CUDA cores or tensor cores), or cuBLASLt."""
    return str(algo) if isinstance(algo, skinny_gemm.Config | skinny_mma.MmaConfig) else "cuBLASLt"


def fingerprint(algo: Any) -> str:
    """A candidate as the plan cache knows it: a configuration's name, or cuBLASLt's algorithm, all 64 bytes."""
    if isinstance(algo, skinny_gemm.Config | skinny_mma.MmaConfig):
        return str(algo)
    return "cuBLASLt:" + "".join(f"{word:016x}" for word in algo.algo)


def ranking_sources() -> list[tuple[str, str]]:
    """What could change which candidate of a GEMM plan is fastest, as (name, text): the kernels a candidate or a
    consumer runs (the skinny GEMMs, the norm and SwiGLU kernels after cuBLASLt; each .cu with its headers inlined,
    as NVRTC compiles it), the modules that launch them, and the tuner's own timing (this file). Not the other
    kernels: a change to the decode attention leaves the GEMMs' picks where they were."""
    from backends.kernels import activation, build, launch, norm

    here = Path(__file__).resolve()
    modules = [here, *(Path(str(m.__file__)) for m in (skinny_gemm, skinny_mma, norm, activation, build, launch))]
    kernels = sorted({i.file for m in (skinny_gemm, skinny_mma, norm, activation) for i in m.CI_INSTANCES})
    return ([(p.name, p.read_text()) for p in modules] + [(f, build.source(f)) for f in kernels]
            + [("NVRTC_OPTIONS", " ".join(build.NVRTC_OPTIONS))])


def _view(cupy: Any, ptr: int, shape: tuple[int, ...], dtype: Any) -> Any:
    """A CuPy array over device memory vt owns (no allocation: safe inside a capture)."""
    size = cupy.dtype(dtype).itemsize * math.prod(shape)
    return cupy.ndarray(shape, dtype, cupy.cuda.MemoryPointer(cupy.cuda.UnownedMemory(ptr, size, None), 0))


@dataclass(frozen=True, slots=True)
class Norm:
    """gemm_add_rms_norm's consumer: x += C; h = RMSNorm(x) * w (x [m, n] and w [n] float32, h [m, n] 16-bit)."""

    x: Any
    w: Any
    h: Any
    eps: float
    kind = "norm"

    def fused(self) -> dict[str, Any]:
        return {"norm": (self.x.data.ptr, self.w.data.ptr, self.h.data.ptr, self.eps)}

    def before(self, cupy: Any) -> None:
        """What cuBLASLt's GEMM reads that the fused kernel computes itself: nothing."""

    def separate(self, cupy: Any, c: Any) -> None:
        from backends.kernels.norm import add_rms_norm

        add_rms_norm(cupy, self.x, c, None, self.w, self.h, eps=self.eps)

    def scratch_bytes(self, m: int, n: int) -> int:
        return m * n * (4 + self.h.dtype.itemsize)

    def on_scratch(self, cupy: Any, ptr: int, m: int, n: int) -> Norm:
        """The same consumer writing into the tuner's scratch (a timing chain must not move the residual stream)."""
        return Norm(_view(cupy, ptr, (m, n), cupy.float32), self.w, _view(cupy, ptr + 4 * m * n, (m, n), self.h.dtype),
                    self.eps)


@dataclass(frozen=True, slots=True)
class SwiGLU:
    """gemm_silu_mul's consumer: act = SiLU(gate) x up over C's interleaved gate/up pairs (act [m, n / 2] 16-bit)."""

    act: Any
    kind = "swiglu"

    def fused(self) -> dict[str, Any]:
        return {"act": self.act.data.ptr}

    def before(self, cupy: Any) -> None:
        """Nothing: SwiGLU only consumes."""

    def separate(self, cupy: Any, c: Any) -> None:
        from backends.kernels.activation import silu_mul

        silu_mul(cupy, c, self.act, group=PAIR_COLS)

    def scratch_bytes(self, m: int, n: int) -> int:
        return m * (n // 2) * self.act.dtype.itemsize

    def on_scratch(self, cupy: Any, ptr: int, m: int, n: int) -> SwiGLU:
        return SwiGLU(_view(cupy, ptr, (m, n // 2), self.act.dtype))


@dataclass(frozen=True, slots=True)
class Resid:
    """gemm_add's consumer: x += C (x [m, n] float32). The skinny GEMM adds a column tile's sums as they are final and
    leaves C unwritten; after cuBLASLt, an elementwise add."""

    x: Any
    kind = "resid"

    def fused(self) -> dict[str, Any]:
        return {"resid": self.x.data.ptr}

    def before(self, cupy: Any) -> None:
        """Nothing: the add only consumes."""

    def separate(self, cupy: Any, c: Any) -> None:
        cupy.add(self.x, c, out=self.x)

    def scratch_bytes(self, m: int, n: int) -> int:
        return m * n * 4

    def on_scratch(self, cupy: Any, ptr: int, m: int, n: int) -> Resid:
        return Resid(_view(cupy, ptr, (m, n), cupy.float32))


@dataclass(frozen=True, slots=True)
class NormIn:
    """rms_norm_gemm's producer: A = h = RMSNorm(x) * w (x [m, k], w [k] float32; h [m, k] 16-bit), then the GEMM and
    `then` (SwiGLU, or nothing). The skinny GEMM computes A from x in every block (h unwritten); cuBLASLt reads h,
    which add_rms_norm writes first."""

    x: Any
    w: Any
    h: Any
    eps: float
    then: SwiGLU | None = None

    @property
    def kind(self) -> str:
        return "norm_in_swiglu" if self.then is not None else "norm_in"

    def fused(self) -> dict[str, Any]:
        return {"norm_in": (self.x.data.ptr, self.w.data.ptr, self.eps), **(self.then.fused() if self.then else {})}

    def before(self, cupy: Any) -> None:
        from backends.kernels.norm import add_rms_norm

        add_rms_norm(cupy, self.x, None, None, self.w, self.h, eps=self.eps)

    def separate(self, cupy: Any, c: Any) -> None:
        if self.then is not None:
            self.then.separate(cupy, c)

    def scratch_bytes(self, m: int, n: int) -> int:
        return _aligned(self.h.nbytes) + (self.then.scratch_bytes(m, n) if self.then else 0)

    def on_scratch(self, cupy: Any, ptr: int, m: int, n: int) -> NormIn:
        """h (and SwiGLU's act) on the scratch; x is only read."""
        then = self.then.on_scratch(cupy, ptr + _aligned(self.h.nbytes), m, n) if self.then else None
        return NormIn(self.x, self.w, _view(cupy, ptr, self.h.shape, self.h.dtype), self.eps, then)


def _loaded(storage: str, m: int, algo: Any, kind: str) -> bool:
    """Whether a kernel library candidate's module is loaded (cuBLASLt's always is)."""
    if isinstance(algo, skinny_gemm.Config):
        return skinny_gemm.loaded(storage, m, algo, kind)
    if isinstance(algo, skinny_mma.MmaConfig):
        from backends.kernels.build import is_loaded

        return is_loaded(skinny_mma.instance(storage, algo, kind if skinny_mma.fuses(kind) else ""))
    return True


def _fusable(storage: str, m: int, n: int, k: int, kind: str) -> bool:
    """Whether a kernel of the library can run this consumer in the GEMM's own launch at this shape, so the shape has
    a plan of its own for the pair: the skinny GEMM (at most 8 rows), or the tensor-core one (2..16 rows, under
    VT_SKINNY_MMA) for the norm and SwiGLU."""
    return skinny_gemm.fits(m, n, storage, kind) or (skinny_mma.fuses(kind)
                                                     and skinny_mma.taken(m, n, k, storage, kind))


def _aligned(nbytes: int) -> int:
    return -(-nbytes // 256) * 256


Epilogue = Norm | SwiGLU | Resid | NormIn


class Plan:
    """One GEMM shape: its descriptors and the algorithm chosen for it."""

    def __init__(self, lt: CublasLt, dtype: int, m: int, n: int, k: int, epilogue: str = "") -> None:
        self.lt, self.dtype, self.m, self.n, self.k, self.epilogue = lt, dtype, m, n, k, epilogue
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
        self.storage = STORAGE.get(dtype)
        if lt.skinny is not None and self.storage is not None and skinny_gemm.fits(m, n, self.storage, epilogue):
            # timed last: the heuristic's first pick stays candidates[0]
            self.candidates += [c for c in skinny_gemm.configs() if skinny_gemm.serves(m, n, k, c, epilogue)]
        if lt.skinny is not None and self.storage is not None and skinny_mma.taken(m, n, k, self.storage, epilogue):
            self.candidates += list(skinny_mma.CONFIGS)  # the norm and SwiGLU in its launch, other consumers after it
        self.algo = self.candidates[0]
        self.times_us: list[float] = []
        self.from_cache = False  # the pick and its times are an earlier process's (the plan cache)

    @property
    def picked(self) -> str:
        return name(self.algo)

    def run(self, a_ptr: int, b_ptr: int, c_ptr: int, stream: int, algo: Any = None,
            epilogue: Epilogue | None = None) -> None:
        """C = A @ B by `algo` (the plan's own by default), then the epilogue's consumer: fused into the skinny GEMM,
        or its own kernel after cuBLASLt's. Every launch on CuPy's current stream, which is `stream`."""
        lt = self.lt
        algo = algo or self.algo
        if isinstance(algo, skinny_gemm.Config):
            import cupy

            assert lt.skinny is not None and self.storage is not None  # a Config is a candidate only then
            partials, counters = lt.skinny
            skinny_gemm.launch(cupy, self.storage, a_ptr, b_ptr, c_ptr, partials, counters, self.m, self.n, self.k,
                               algo, **(epilogue.fused() if epilogue else {}))
            return
        if isinstance(algo, skinny_mma.MmaConfig) and (epilogue is None or skinny_mma.fuses(epilogue.kind)):
            import cupy

            assert lt.skinny is not None and self.storage is not None  # an MmaConfig is a candidate only then
            partials, counters = lt.skinny
            skinny_mma.launch(cupy, self.storage, a_ptr, b_ptr, c_ptr, partials, counters, self.m, self.n, self.k,
                              algo, **(epilogue.fused() if epilogue else {}))
            return
        if epilogue is not None:
            import cupy

            epilogue.before(cupy)
        if isinstance(algo, skinny_mma.MmaConfig):
            import cupy

            assert lt.skinny is not None and self.storage is not None  # an MmaConfig is a candidate only then
            partials, counters = lt.skinny
            skinny_mma.launch(cupy, self.storage, a_ptr, b_ptr, c_ptr, partials, counters, self.m, self.n, self.k,
                              algo)
        else:
            self._cublaslt(a_ptr, b_ptr, c_ptr, stream, algo)
        if epilogue is not None:
            epilogue.separate(cupy, _view(cupy, c_ptr, (self.m, self.n), cupy.float32))

    def _cublaslt(self, a_ptr: int, b_ptr: int, c_ptr: int, stream: int, algo: Any) -> None:
        lt = self.lt
        lt.check(lt.lib.cublasLtMatmul(
            lt.handle, self.desc, ctypes.byref(lt.one), ctypes.c_void_p(b_ptr), self.a, ctypes.c_void_p(a_ptr), self.b,
            ctypes.byref(lt.zero), ctypes.c_void_p(c_ptr), self.c, ctypes.c_void_p(c_ptr), self.c,
            ctypes.byref(algo.algo), ctypes.c_void_p(lt.workspace_ptr),
            ctypes.c_size_t(lt.workspace_bytes), ctypes.c_void_p(stream)), "cublasLtMatmul")

    def tune(self, a_ptr: int, b_ptr: int, c_ptr: int, stream: Any, epilogue: Epilogue | None = None) -> None:
        """Times every candidate as a captured step runs it (outside any capture) and keeps the fastest: a chain of
        launches back to back in a CUDA graph, as a step's GEMMs and the kernels between them are (a launch's latency
        partly hidden, and with programmatic launch its start overlapping the launch ahead), each over weights no
        other launch of the chain reads (regions of the tuner's scratch, so none finds them in L2, as no layer of a
        step finds its own; `_timing_weights`). Timed one launch at a time after an L2 flush, on the H200 every 0.6B
        decode GEMM cost 8-10 us whatever its size, and the skinny GEMM lost shapes it wins inside a step (docs/).
        An epilogue plan times each candidate with its consumer, writing into the scratch's tail. The candidates'
        timings are interleaved (`fastest`). With the plan cache (VT_GEMM_PLAN_CACHE), a shape an earlier process
        timed among these very candidates takes that pick untimed, and a pick timed here is
        recorded for the next process."""
        import cupy

        lt = self.lt
        key = plan_key(self.dtype, self.m, self.n, self.k, self.epilogue)
        fingerprints = [fingerprint(c) for c in self.candidates]
        stored = lt.plan_cache.pick(key, fingerprints) if lt.plan_cache is not None else None
        if stored is not None:  # an earlier process's pick among these very candidates, taken untimed
            # no run of its own: tune is never called inside a capture, and its caller runs the pick eagerly right
            # after, which loads its module before any capture (the GPU test's second process checks it is loaded)
            self.algo, self.from_cache = self.candidates[stored], True
            self.times_us = lt.plan_cache.times_us(key, fingerprints)  # type: ignore[union-attr]
            return
        if epilogue is not None:
            epilogue = epilogue.on_scratch(cupy, lt.scratch() + L2_FLUSH_BYTES - EPILOGUE_BYTES, self.m, self.n)
        caller = cupy.cuda.get_current_stream()
        ready = caller.record()
        tuning = lt.tuning_stream()
        tuning.wait_event(ready)  # the operands are written
        with tuning:
            lt.flush_l2(tuning)
            weights = self._timing_weights(b_ptr)
            start, end = cupy.cuda.Event(), cupy.cuda.Event()
            chains = []
            for cand in self.candidates:
                self.run(a_ptr, weights[0], c_ptr, tuning.ptr, cand, epilogue)  # eager: modules load outside a capture
                chains.append(self._chain(cand, a_ptr, weights, c_ptr, tuning, epilogue))
                chains[-1].launch(tuning)  # warm

            def time_once(graph: Any) -> float:
                start.record(tuning)
                graph.launch(tuning)
                end.record(tuning)
                end.synchronize()
                return cupy.cuda.get_elapsed_time(start, end) * 1e3 / len(weights)

            best, times = fastest(chains, time_once)
        self.times_us = [round(t, 2) for t in times]
        self.algo = self.candidates[best]
        if lt.plan_cache is not None:
            lt.plan_cache.record(key, fingerprints, best, self.times_us)

    def _chain(self, cand: Any, a_ptr: int, weights: list[int], c_ptr: int, stream: Any,
               epilogue: Epilogue | None) -> Any:
        """One candidate's launches over every weight pointer, captured (relaxed: nothing else's business)."""
        import cupy

        stream.begin_capture(mode=cupy.cuda.runtime.streamCaptureModeRelaxed)
        try:
            for w in weights:
                self.run(a_ptr, w, c_ptr, stream.ptr, cand, epilogue)
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
        regions = min((L2_FLUSH_BYTES - EPILOGUE_BYTES) // stride, -(-2 * L2_BYTES // stride), MAX_CHAIN)  # 2x L2
        if self.m > COLD_MAX_ROWS or stride >= L2_BYTES or regions < 2:
            return [b_ptr] * CHAIN
        base = self.lt.scratch()
        return [base + (i % regions) * stride for i in range(max(CHAIN, regions))]


class CublasLt:
    def __init__(self, workspace_ptr: int, workspace_bytes: int, scratch: Any = None,
                 skinny: tuple[int, int] | None = None, plan_cache: PlanCache | None = None) -> None:
        self.scratch = scratch  # () -> device pointer of L2_FLUSH_BYTES the tuner may overwrite
        self.plan_cache = plan_cache  # earlier processes' picks (VT_GEMM_PLAN_CACHE), and where this one's go
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
        self.plans: dict[tuple[int, int, int, int, str], Plan] = {}  # (dtype, m, n, k, epilogue)
        self.tuning_s = 0.0
        self.is_tuning = True  # until stop_tuning: a new shape is timed
        self._tuning_stream: Any = None

    def stop_tuning(self) -> None:
        """From now on a new shape keeps the heuristic's first pick (start-up is over: backends/cuda.py). The picks
        timed so far go to the plan cache."""
        self.is_tuning = False
        if self.plan_cache is not None:
            timed = len(self.plan_cache.new)
            self.plan_cache.save()
            log.info("GEMM plans: %d timed (%.1f s), %d taken from %s", timed, self.tuning_s, self.plan_cache.hits,
                     self.plan_cache.path)

    def open_plan_cache(self, cache_dir: str, pdl: bool, skinny_cluster: bool, retime: bool = False) -> None:
        """This machine's plan file under cache_dir/gemm-plans (backends/gemm_plans.py): named by the GPU, the CUDA
        runtime, NVRTC, CuPy and cuBLASLt, the flags that change how candidates run (programmatic launch, the
        cluster kernel) and `ranking_sources`. The cache is optional: what cannot be read here is said, and the
        tuner times every shape as without it."""
        import cupy

        try:
            rt = cupy.cuda.runtime
            props = rt.getDeviceProperties(cupy.cuda.Device().id)
            self.lib.cublasLtGetVersion.restype = ctypes.c_size_t
            gpu = props["name"]
            parts = {"gpu": gpu.decode() if isinstance(gpu, bytes) else str(gpu),
                     "cc": f"{props['major']}.{props['minor']}", "sms": props["multiProcessorCount"],
                     "runtime": rt.runtimeGetVersion(), "driver_cuda_api": rt.driverGetVersion(),
                     "nvrtc": list(cupy.cuda.nvrtc.getVersion()), "cupy": cupy.__version__,
                     "cublaslt": int(self.lib.cublasLtGetVersion()), "pdl": pdl, "skinny_cluster": skinny_cluster}
            path = Path(cache_dir) / "gemm-plans" / f"{machine_tag(parts, ranking_sources())}.json"
        except Exception as e:  # noqa: BLE001 - the picks are a cache: without them the tuner times every shape
            log.warning("GEMM plan cache off: this machine's file could not be named (%s)", e)
            return
        self.plan_cache = PlanCache(path, retime)

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
        """C = A @ B, then x += C and h = RMSNorm(x) * w, as this shape's norm plan picked: one launch (the skinny
        GEMM's epilogue, backends/kernels/skinny_gemm.py, or the tensor-core one's) or cuBLASLt and add_rms_norm.
        False, nothing launched, where no kernel of the library fuses the pair at this shape (the caller runs the
        two)."""
        return self._gemm_epilogue(dtype, a, b, c, m, n, k, Norm(x, w, h, eps))

    def gemm_silu_mul(self, dtype: int, a: Any, b: Any, c: Any, m: int, n: int, k: int, act: Any) -> bool:
        """C = A @ B over the interleaved gate/up weights, then act = SiLU(gate) x up, as this shape's SwiGLU plan
        picked (the skinny GEMM's epilogue leaves C unwritten). False, nothing launched, as gemm_add_rms_norm."""
        return self._gemm_epilogue(dtype, a, b, c, m, n, k, SwiGLU(act))

    def fuses_norm(self, dtype: int, a: Any, b: Any, c: Any, m: int, n: int, k: int, x: Any, w: Any, h: Any,
                   eps: float) -> bool:
        """Whether this shape's norm plan (planned, and tuned while tuning, now if new, as gemm_add_rms_norm would)
        runs the norm in the skinny GEMM's epilogue."""
        import cupy

        epilogue = Norm(x, w, h, eps)
        storage = STORAGE.get(dtype)
        if (self.skinny is None or storage is None or not skinny_gemm.fits(m, n, storage, epilogue.kind)
                or epilogue.scratch_bytes(m, n) > EPILOGUE_BYTES):
            return False
        plan = self._plan(dtype, m, n, k, epilogue.kind, a, b, c, cupy.cuda.get_current_stream(), epilogue)
        return isinstance(plan.algo, skinny_gemm.Config)

    def gemm_add(self, dtype: int, a: Any, b: Any, c: Any, m: int, n: int, k: int, x: Any) -> bool:
        """C = A @ B, then x += C, as this shape's resid plan picked: one launch (the skinny GEMM adds a tile's sums
        into x, C unwritten) or cuBLASLt and an add. False, nothing launched, as gemm_add_rms_norm."""
        return self._gemm_epilogue(dtype, a, b, c, m, n, k, Resid(x))

    def rms_norm_gemm(self, dtype: int, x: Any, w: Any, h: Any, b: Any, c: Any, m: int, n: int, k: int, eps: float,
                      act: Any = None) -> bool:
        """h = RMSNorm(x) * w, C = h @ B, then act = SiLU(gate) x up where act is given, as this shape's norm_in plan
        picked: one launch (the skinny GEMM computes h itself; h, and C with act, unwritten) or add_rms_norm,
        cuBLASLt and silu_mul. False, nothing launched, as gemm_add_rms_norm."""
        then = SwiGLU(act) if act is not None else None
        return self._gemm_epilogue(dtype, h, b, c, m, n, k, NormIn(x, w, h, eps, then))

    def _gemm_epilogue(self, dtype: int, a: Any, b: Any, c: Any, m: int, n: int, k: int, epilogue: Epilogue) -> bool:
        import cupy

        storage = STORAGE.get(dtype)
        if (self.skinny is None or storage is None or not _fusable(storage, m, n, k, epilogue.kind)
                or epilogue.scratch_bytes(m, n) > EPILOGUE_BYTES):
            return False
        stream = cupy.cuda.get_current_stream()
        plan = self._plan(dtype, m, n, k, epilogue.kind, a, b, c, stream, epilogue)
        algo = plan.algo
        if stream.is_capturing() and not _loaded(storage, m, algo, epilogue.kind):
            algo = plan.candidates[0]  # its module was never loaded (tune loads it): a capture may not load one
        plan.run(a.data.ptr, b.data.ptr, c.data.ptr, stream.ptr, algo, epilogue)
        return True

    def _plan(self, dtype: int, m: int, n: int, k: int, epilogue_kind: str, a: Any, b: Any, c: Any, stream: Any,
              epilogue: Epilogue | None = None) -> Plan:
        """The shape's plan; a new one is planned (host work only) and, outside a capture and while tuning, tuned;
        otherwise (a shape the cold step did not see, or first seen after start-up) it keeps the heuristic's first
        pick for good."""
        key = (dtype, m, n, k, epilogue_kind)
        plan = self.plans.get(key)
        if plan is None:
            t = time.perf_counter()
            plan = self.plans[key] = Plan(self, dtype, m, n, k, epilogue_kind)
            if m <= TUNED_MAX_ROWS and self.is_tuning and not stream.is_capturing():
                plan.tune(a.data.ptr, b.data.ptr, c.data.ptr, stream, epilogue)
            self.tuning_s += time.perf_counter() - t
        return plan

    def gemm(self, dtype: int, a: Any, b: Any, c: Any, m: int, n: int, k: int) -> None:
        """C = A @ B for one matrix each (row-major, dtype operands, float32 C) on CuPy's current stream."""
        import cupy

        stream = cupy.cuda.get_current_stream()
        self._plan(dtype, m, n, k, "", a, b, c, stream).run(a.data.ptr, b.data.ptr, c.data.ptr, stream.ptr)
