"""A capture-safe GEMM: cuBLAS called directly through ctypes.

CuPy refuses cuBLAS while a stream captures ("calling cuBLAS API during stream capture is currently
unsupported"), and cuBLAS without a preset workspace may allocate lazily inside a capture. So: one
handle of our own, its stream and a preallocated workspace set OUTSIDE any capture (`bind`), and
the GEMM entry point called directly, inside or outside a capture alike (one path, so replay and
eager agree bit for bit).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import glob
import os
from typing import Any

OP_N = 0
WORKSPACE_BYTES = 32 << 20
CUDA_R_32F, CUDA_R_16F, CUDA_R_16BF = 0, 2, 14
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
_CUDA_TYPE = {"float16": CUDA_R_16F, "uint16": CUDA_R_16BF}  # uint16 holds bf16 bits (vt/dtypes.py)


def _load() -> ctypes.CDLL:
    names = [ctypes.util.find_library("cublas"), "libcublas.so.13", "libcublas.so.12", "libcublas.so"]
    try:
        import cupy

        names += glob.glob(os.path.join(cupy.cuda.get_cuda_path() or "", "lib*", "libcublas.so*"))
    except Exception:  # noqa: BLE001 - a best-effort search path
        pass
    for name in names:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise OSError("libcublas not found (tried: " + ", ".join(n for n in names if n) + ")")


def _norm_operands(cupy: Any, a: Any, b: Any, c: Any, x: Any, w: Any, h: Any) -> bool:
    """gemm_add_rms_norm's operands as its plan takes them (and fuses_norm asks about them): 2-D, contiguous, A in
    B's 16-bit dtype, C and x float32 [m, n], w float32 [n], h [m, n] in B's dtype."""
    return (a.ndim == 2 and b.ndim == 2 and a.dtype == b.dtype and h.dtype == b.dtype and a.dtype.name in _CUDA_TYPE
            and b.shape[0] == a.shape[1] and x.shape == c.shape and h.shape == c.shape
            and all(t.dtype == cupy.float32 for t in (c, x, w)) and w.shape == (c.shape[1],)
            and all(t.flags.c_contiguous for t in (a, b, c, x, w, h)))


class Cublas:
    def __init__(self, workspace_ptr: int | None, workspace_bytes: int, lt: Any = None) -> None:
        self.lt = lt  # backends/cublaslt.py: single GEMMs with a measured algorithm (None: GemmEx for all)
        self.lib = _load()
        self.handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(self.handle)), "cublasCreate_v2")
        self.workspace = (workspace_ptr, workspace_bytes)
        self.bound_stream: int | None = None
        f = self.lib.cublasSgemmStridedBatched
        f.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.POINTER(ctypes.c_float), ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong,
                      ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.POINTER(ctypes.c_float),
                      ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong, ctypes.c_int]
        g = self.lib.cublasGemmStridedBatchedEx
        g.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                      ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong,
                      ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_void_p,
                      ctypes.c_void_p, ctypes.c_int, ctypes.c_int, ctypes.c_longlong, ctypes.c_int, ctypes.c_int,
                      ctypes.c_int]
        self._one, self._zero = ctypes.c_float(1.0), ctypes.c_float(0.0)

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with cuBLAS status {status}")

    def bind(self, stream_ptr: int) -> None:
        """Set the handle's stream, then the preset workspace (setting a stream resets the workspace).
        Must run outside any capture."""
        if self.bound_stream == stream_ptr:
            return
        self._check(self.lib.cublasSetStream_v2(self.handle, ctypes.c_void_p(stream_ptr)), "cublasSetStream_v2")
        ptr, size = self.workspace
        if ptr is not None:
            self._check(self.lib.cublasSetWorkspace_v2(self.handle, ctypes.c_void_p(ptr), ctypes.c_size_t(size)),
                        "cublasSetWorkspace_v2")
        self.bound_stream = stream_ptr

    def sgemm_batched(self, a: int, b: int, c: int, m: int, n: int, k: int, batch: int,
                      stride_a: int, stride_b: int, stride_c: int) -> None:
        """Row-major C[batch, m, n] = A[batch, m, k] @ B[batch, k, n] (as column-major C^T = B^T A^T)."""
        self._check(self.lib.cublasSgemmStridedBatched(
            self.handle, OP_N, OP_N, n, m, k, ctypes.byref(self._one), ctypes.c_void_p(b), n, stride_b,
            ctypes.c_void_p(a), k, stride_a, ctypes.byref(self._zero), ctypes.c_void_p(c), n, stride_c, batch),
            "cublasSgemmStridedBatched")

    def gemm_ex_batched(self, dtype: int, a: int, b: int, c: int, m: int, n: int, k: int, batch: int,
                        stride_a: int, stride_b: int, stride_c: int) -> None:
        """As sgemm_batched with bf16 / fp16 operands (`dtype`), float32 C, float32 accumulation."""
        self._check(self.lib.cublasGemmStridedBatchedEx(
            self.handle, OP_N, OP_N, n, m, k, ctypes.byref(self._one), ctypes.c_void_p(b), dtype, n, stride_b,
            ctypes.c_void_p(a), dtype, k, stride_a, ctypes.byref(self._zero), ctypes.c_void_p(c), CUDA_R_32F, n,
            stride_c, batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT), "cublasGemmStridedBatchedEx")

    def gemm_add_rms_norm(self, a: Any, b: Any, c: Any, x: Any, w: Any, h: Any, eps: float) -> bool:
        """C = A @ B then the residual add + RMSNorm, as the shape's norm plan times them (CublasLt.gemm_add_rms_norm);
        False, nothing launched, where it has none. Operands as the plan's: 2-D, contiguous, A in B's 16-bit dtype,
        C and x float32, h in B's dtype."""
        import cupy

        if self.lt is None or not _norm_operands(cupy, a, b, c, x, w, h):
            return False
        self.bind(cupy.cuda.get_current_stream().ptr)
        m, k = a.shape
        return self.lt.gemm_add_rms_norm(_CUDA_TYPE[a.dtype.name], a, b, c, m, b.shape[1], k, x, w, h, eps)

    def fuses_norm(self, a: Any, b: Any, c: Any, x: Any, w: Any, h: Any, eps: float) -> bool:
        """Whether gemm_add_rms_norm of these operands runs the norm in the skinny GEMM's epilogue (the shape's norm
        plan's pick: CublasLt.fuses_norm). False where no plan serves them (the op then runs two launches)."""
        import cupy

        if self.lt is None or not _norm_operands(cupy, a, b, c, x, w, h):
            return False
        m, k = a.shape
        return self.lt.fuses_norm(_CUDA_TYPE[a.dtype.name], a, b, c, m, b.shape[1], k, x, w, h, eps)

    def gemm_add(self, a: Any, b: Any, c: Any, x: Any) -> bool:
        """C = A @ B then x += C, as the shape's resid plan times them (CublasLt.gemm_add); False, nothing launched,
        where it has none. A in B's 16-bit dtype, C and x float32 [m, n], all contiguous."""
        import cupy

        if (self.lt is None or a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or a.dtype.name not in _CUDA_TYPE
                or b.shape[0] != a.shape[1] or c.shape != (a.shape[0], b.shape[1])
                or c.dtype != cupy.float32 or x.dtype != cupy.float32 or x.shape != c.shape
                or not all(t.flags.c_contiguous for t in (a, b, c, x))):
            return False
        self.bind(cupy.cuda.get_current_stream().ptr)
        m, k = a.shape
        return self.lt.gemm_add(_CUDA_TYPE[a.dtype.name], a, b, c, m, b.shape[1], k, x)

    def rms_norm_gemm(self, x: Any, w: Any, h: Any, b: Any, c: Any, act: Any, eps: float) -> bool:
        """h = RMSNorm(x) * w, C = h @ B (then act = SiLU(gate) x up where act is given), as the shape's norm_in plan
        times them (CublasLt.rms_norm_gemm); False, nothing launched, where it has none. x [m, k] and w [k]
        float32, h [m, k] and act in B's 16-bit dtype, C float32 [m, n], all contiguous."""
        import cupy

        if (self.lt is None or h.ndim != 2 or b.ndim != 2 or h.dtype != b.dtype or h.dtype.name not in _CUDA_TYPE
                or b.shape[0] != h.shape[1] or x.shape != h.shape or x.dtype != cupy.float32 or w.dtype != cupy.float32
                or w.shape != (h.shape[1],) or c.dtype != cupy.float32 or c.shape != (h.shape[0], b.shape[1])
                or (act is not None and (act.dtype != b.dtype or act.shape != (c.shape[0], c.shape[1] // 2)))
                or not all(t.flags.c_contiguous for t in (x, w, h, b, c) + ((act,) if act is not None else ()))):
            return False
        self.bind(cupy.cuda.get_current_stream().ptr)
        m, k = h.shape
        return self.lt.rms_norm_gemm(_CUDA_TYPE[h.dtype.name], x, w, h, b, c, m, b.shape[1], k, eps, act)

    def gemm_silu_mul(self, a: Any, b: Any, c: Any, act: Any) -> bool:
        """C = A @ B over the interleaved gate/up weights, then act = SiLU(gate) x up, as the shape's SwiGLU plan
        times them (CublasLt.gemm_silu_mul); False, nothing launched, where it has none. A, B and act in one 16-bit
        dtype, C float32 [m, n], act [m, n / 2], all contiguous."""
        import cupy

        if (self.lt is None or a.ndim != 2 or b.ndim != 2 or a.dtype != b.dtype or act.dtype != b.dtype
                or a.dtype.name not in _CUDA_TYPE or c.dtype != cupy.float32 or c.shape[1] % 2
                or act.shape != (c.shape[0], c.shape[1] // 2) or not all(t.flags.c_contiguous for t in (a, b, c, act))):
            return False
        self.bind(cupy.cuda.get_current_stream().ptr)
        m, k = a.shape
        return self.lt.gemm_silu_mul(_CUDA_TYPE[a.dtype.name], a, b, c, m, b.shape[1], k, act)

    def sgemm(self, a: Any, b: Any, c: Any, m: int, n: int, k: int, batch: int, stride_a: int, stride_b: int) -> None:
        """backends.gemm's StridedSgemm over CuPy arrays, on CuPy's current stream: float32 operands through
        Sgemm, bf16 / fp16 ones through GemmEx."""
        import cupy

        self.bind(cupy.cuda.get_current_stream().ptr)
        if self.lt is not None and batch == 1 and a.dtype.name in _CUDA_TYPE:
            self.lt.gemm(_CUDA_TYPE[a.dtype.name], a, b, c, m, n, k)
        elif a.dtype.name in _CUDA_TYPE:
            self.gemm_ex_batched(_CUDA_TYPE[a.dtype.name], a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, batch,
                                 stride_a, stride_b, m * n)
        else:
            self.sgemm_batched(a.data.ptr, b.data.ptr, c.data.ptr, m, n, k, batch, stride_a, stride_b, m * n)
