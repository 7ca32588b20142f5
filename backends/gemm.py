"""np.matmul semantics (float32 out, batch dims broadcast) over one strided-batched GEMM call.

A bf16 (uint16 bits) or fp16 right operand (the weights) makes a mixed-precision GEMM: the left
operand is rounded to that dtype and the products accumulate in float32, as cuBLAS's GemmEx does.

Both backends stage a GEMM here, in the same order, so the arrays it creates (an operand made
contiguous, an output staged when `out` cannot take the result directly) are the same arrays on
both: the CPU backend's demand profile then holds what the CUDA backend's does. Each backend
supplies only `sgemm`: cuBLAS on CUDA (backends/cublas.py), NumPy on the CPU.
"""

from __future__ import annotations

from typing import Any, Protocol


class StridedSgemm(Protocol):
    def __call__(self, a: Any, b: Any, c: Any, m: int, n: int, k: int, batch: int,
                 stride_a: int, stride_b: int) -> None:
        """Row-major C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]; a stride of 0 broadcasts."""


def staged_matmul(xp: Any, sgemm: StridedSgemm, a: Any, b: Any, out: Any = None) -> Any:
    from backends.kernels.convert import narrow

    m, k = a.shape[-2], a.shape[-1]
    n = b.shape[-1]
    if b.dtype != xp.float32:
        a = narrow(xp, a, b.dtype)
    batch_shape = tuple(xp.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
    batch = 1
    for d in batch_shape:
        batch *= d
    A, stride_a = _operand(xp, a, batch_shape, m, k)
    B, stride_b = _operand(xp, b, batch_shape, k, n)
    want = batch_shape + (m, n)
    direct = out is not None and out.flags.c_contiguous and out.shape == want and out.dtype == xp.float32
    C = out if direct else xp.empty(want, xp.float32)
    sgemm(A, B, C, m, n, k, batch, stride_a, stride_b)
    if out is not None and not direct:
        out[...] = C
        return out
    return C


def _operand(xp: Any, x: Any, batch_shape: tuple, rows: int, cols: int) -> tuple[Any, int]:
    if x.dtype not in (xp.float32, xp.float16, xp.uint16):
        x = x.astype(xp.float32)
    if x.ndim == 2 and x.flags.c_contiguous:
        return x, 0  # one matrix broadcast over the batch: stride 0, no copy
    return xp.ascontiguousarray(xp.broadcast_to(x, batch_shape + (rows, cols))), rows * cols


def numpy_sgemm(a: Any, b: Any, c: Any, m: int, n: int, k: int, batch: int, stride_a: int, stride_b: int) -> None:
    """The CPU backend's GEMM: NumPy over the staged operands, writing C in place. Low-precision operands
    widen exactly to float32 here, on plain arrays: cuBLAS reads them as they are, so the widened copies
    are the CPU's own and not part of the modeled demand."""
    import numpy as np

    from backends.kernels.convert import widen

    a, b = widen(np, np.asarray(a)), widen(np, np.asarray(b))
    A = a.reshape(batch, m, k) if stride_a else a
    B = b.reshape(batch, k, n) if stride_b else b
    np.matmul(A, B, out=c.reshape(batch, m, n))
