"""Storage dtypes: weights and the KV cache may be held in bf16 or fp16 while activations stay float32.

bf16 is held as its bits in uint16 everywhere: CuPy has no bfloat16 dtype and cannot take NumPy's (from
ml_dtypes), so one representation lets every kernel run unchanged on both backends. These two helpers,
written against the array namespace `xp`, are the only places that know it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BF16_BITS = np.dtype(np.uint16)
STORAGE: dict[str, np.dtype] = {"float32": np.dtype(np.float32), "bfloat16": BF16_BITS,
                                 "float16": np.dtype(np.float16)}


def to_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    """A host float32 array in the storage of `dtype` (bf16 rounded to nearest even by ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.ascontiguousarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    return np.ascontiguousarray(a, dtype=STORAGE[dtype])


def _is_cupy(xp: Any) -> bool:
    return hasattr(xp, "ElementwiseKernel")


def _widen_bf16(u: np.ndarray) -> np.ndarray:
    return (u.astype(np.uint32) << 16).view(np.float32)


def _narrow_bf16(x: np.ndarray) -> np.ndarray:
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rne = (u + ((u >> 16) & 1) + 0x7FFF) >> 16
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, rne).astype(np.uint16)


# The same two conversions as single CUDA kernels: one output array and no temporaries, which is what
# the NumPy versions are charged as (they run on plain arrays into one `xp.empty`), so the CPU's model
# of CuPy's allocations stays exact.
_CUDA_WIDEN = ("uint16 x", "float32 y", "y = __uint_as_float(((unsigned int)x) << 16)", "vt_widen_bf16")
_CUDA_NARROW = ("float32 x", "uint16 y", """
    unsigned int u = __float_as_uint(x);
    y = (u & 0x7FFFFFFFu) > 0x7F800000u ? (unsigned short)((u >> 16) | 0x40u)
                                        : (unsigned short)((u + ((u >> 16) & 1u) + 0x7FFFu) >> 16);""",
                "vt_narrow_bf16")
_kernels: dict[str, Any] = {}


def _cuda_kernel(xp: Any, spec: tuple[str, str, str, str]) -> Any:
    if spec[3] not in _kernels:
        _kernels[spec[3]] = xp.ElementwiseKernel(*spec)
    return _kernels[spec[3]]


def widen(xp: Any, x: Any) -> Any:
    """Low-precision storage to float32, exactly: a bf16 is the high half of a float32."""
    if x.dtype == xp.uint16:
        out = xp.empty(x.shape, xp.float32)
        if _is_cupy(xp):
            _cuda_kernel(xp, _CUDA_WIDEN)(x, out)
        else:
            out[...] = _widen_bf16(np.asarray(x))
        return out
    if x.dtype == xp.float16:
        return x.astype(xp.float32)
    return x


def narrow(xp: Any, x: Any, dtype: Any) -> Any:
    """float32 to a storage dtype, rounding to nearest even as torch's cast and cuBLAS do (uint16: bf16
    bits; a NaN stays a quiet NaN)."""
    if dtype == xp.uint16:
        out = xp.empty(x.shape, xp.uint16)
        if _is_cupy(xp):
            _cuda_kernel(xp, _CUDA_NARROW)(x, out)
        else:
            out[...] = _narrow_bf16(np.asarray(x))
        return out
    if dtype == xp.float16:
        return x.astype(xp.float16)
    return x
