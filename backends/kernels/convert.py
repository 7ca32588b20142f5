"""Storage conversions inside xp kernels (the GEMM's staged operand, a widened cache row): each makes its
output array, as a CuPy expression would, and fills it with one kernel (convert.cu) on CUDA or with the
NumPy twin (vt/dtypes.py's bit-level helpers) on the CPU, so the CPU's model of CuPy's allocations charges
exactly the one output."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import ctype, grid_1d
from vt.dtypes import bf16_to_f32, f32_to_bf16

CI_INSTANCES = [Instance("convert.cu", f"vt::convert<{a}, {b}>")
                for a, b in (("vt::bf16", "float"), ("float", "vt::bf16"), ("vt::f16", "float"), ("float", "vt::f16"))]


def _is_cupy(xp: Any) -> bool:
    return hasattr(xp, "RawModule")


def _convert(xp: Any, x: Any, dtype: Any) -> Any:
    out = xp.empty(x.shape, dtype)
    if _is_cupy(xp):
        src = xp.ascontiguousarray(x)
        grid, block = grid_1d(x.size)
        function(xp, Instance("convert.cu", f"vt::convert<{ctype(src.dtype)}, {ctype(dtype)}>"))(
            grid, block, (src, out, np.int64(x.size)))
    elif np.dtype(dtype) == np.float32:
        out[...] = bf16_to_f32(np.asarray(x))
    else:
        out[...] = f32_to_bf16(np.asarray(x))
    return out


def widen(xp: Any, x: Any) -> Any:
    """Low-precision storage to float32, exactly: a bf16 is the high half of a float32."""
    if x.dtype == xp.uint16:
        return _convert(xp, x, xp.float32)
    if x.dtype == xp.float16:
        return x.astype(xp.float32)
    return x


def narrow(xp: Any, x: Any, dtype: Any) -> Any:
    """float32 to a storage dtype, rounding to nearest even as torch's cast and cuBLAS do (uint16: bf16 bits; a
    NaN stays a quiet NaN). An operand already in that dtype is returned as it is."""
    if x.dtype == dtype:
        return x
    if dtype == xp.uint16:
        return _convert(xp, x, xp.uint16)
    if dtype == xp.float16:
        return x.astype(xp.float16)
    return x
