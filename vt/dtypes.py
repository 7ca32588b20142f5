"""Storage dtypes: weights and the KV cache may be held in bf16 or fp16 while activations stay float32.

bf16 is held as its bits in uint16 everywhere: CuPy has no bfloat16 dtype and cannot take NumPy's (from
ml_dtypes), so one representation lets every kernel run unchanged on both backends. The host-side helpers
live here; the conversions inside kernels (widen, narrow) are backends/kernels/convert.py's, whose NumPy
bodies are the two helpers below.
"""

from __future__ import annotations

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


def bf16_to_f32(u: np.ndarray) -> np.ndarray:
    """bf16 bits (uint16) to float32, exactly: a bf16 is the high half of a float32."""
    return (u.astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16(x: np.ndarray) -> np.ndarray:
    """float32 to bf16 bits, rounding to nearest even (a NaN stays a quiet NaN), as torch's cast does."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    rne = (u + ((u >> 16) & 1) + 0x7FFF) >> 16
    return np.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, rne).astype(np.uint16)


def widen_host(a: np.ndarray) -> np.ndarray:
    """Any storage dtype (float32, bf16 bits, fp16) to float32, exactly."""
    if a.dtype == BF16_BITS:
        return bf16_to_f32(a)
    return a.astype(np.float32, copy=False)


def narrow_host(a: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float32 to a storage dtype, rounding to nearest even: what every kernel's narrowing writes."""
    if np.dtype(dtype) == BF16_BITS:
        return f32_to_bf16(a)
    return a.astype(dtype, copy=False)
