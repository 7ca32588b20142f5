"""Storage dtypes: weights and the KV cache may be held in bf16 or fp16 while activations stay float32.

bf16 is held as its bits in uint16 everywhere: CuPy has no bfloat16 dtype and cannot take NumPy's (from
ml_dtypes), so one representation lets every kernel run unchanged on both backends. These two helpers,
written against the array namespace `xp`, are the only places that know it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

BF16_BITS = np.dtype(np.uint16)
STORAGE = {"float32": np.dtype(np.float32), "bfloat16": BF16_BITS, "float16": np.dtype(np.float16)}


def to_storage(a: np.ndarray, dtype: str) -> np.ndarray:
    """A host float32 array in the storage of `dtype` (bf16 rounded to nearest even by ml_dtypes)."""
    if dtype == "bfloat16":
        import ml_dtypes

        return np.ascontiguousarray(a, dtype=np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)
    return np.ascontiguousarray(a, dtype=STORAGE[dtype])


def widen(xp: Any, x: Any) -> Any:
    """Low-precision storage to float32, exactly. bf16 is held as its bits in uint16 (CuPy has no
    bfloat16 dtype; NumPy's comes from ml_dtypes and CuPy cannot take it), so the same code runs on
    both backends: a bf16 is the high half of a float32."""
    if x.dtype == xp.uint16:
        return (x.astype(xp.uint32) << 16).view(xp.float32)
    if x.dtype == xp.float16:
        return x.astype(xp.float32)
    return x


def narrow(xp: Any, x: Any, dtype: Any) -> Any:
    """float32 to a storage dtype, rounding to nearest even as torch's cast and cuBLAS do (uint16: bf16
    bits; a NaN stays a quiet NaN)."""
    if dtype == xp.uint16:
        u = xp.ascontiguousarray(x, dtype=xp.float32).view(xp.uint32)
        rne = (u + ((u >> 16) & 1) + 0x7FFF) >> 16
        return xp.where((u & 0x7FFFFFFF) > 0x7F800000, (u >> 16) | 0x40, rne).astype(xp.uint16)
    if dtype == xp.float16:
        return x.astype(xp.float16)
    return x
