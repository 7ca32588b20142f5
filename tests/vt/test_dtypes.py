"""Storage dtypes (vt/dtypes.py): bf16 held as uint16 bits, rounded as torch rounds, widened exactly, and
the mixed-precision GEMM both backends stage (backends/gemm.py)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from backends.cpu import CpuBackend
from backends.kernels.convert import narrow, widen
from vt.dtypes import to_storage


def _every_bf16_boundary() -> np.ndarray:
    """Every bf16 high half, each with the low halves where rounding decides: 0, just under / at / over
    the halfway point, and all ones; NaNs and infinities of both signs included."""
    high = np.arange(1 << 16, dtype=np.uint32) << 16
    low = np.array([0, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF], np.uint32)
    return (high[:, None] | low[None, :]).ravel().view(np.float32)


def test_narrow_rounds_every_float32_class_as_ml_dtypes_does() -> None:
    x = _every_bf16_boundary()
    with np.errstate(invalid="ignore", over="ignore"):
        want = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    got = narrow(np, x, np.dtype(np.uint16))
    nan = np.isnan(x)
    assert nan.sum() > 0 and np.isinf(x).sum() == 2, "non-vacuity: NaNs and both infinities are in the sweep"
    assert np.array_equal(got[~nan], want[~nan])
    assert np.isnan(widen(np, got[nan])).all(), "a NaN stays a NaN"
    assert (got != (x.view(np.uint32) >> 16)).any(), "non-vacuity: rounding differs from truncation somewhere"


def test_widen_is_exact_and_to_storage_agrees_with_narrow() -> None:
    bits = np.arange(1 << 16, dtype=np.uint16)
    finite = ~np.isnan(bits.view(ml_dtypes.bfloat16).astype(np.float32))
    assert np.array_equal(widen(np, bits)[finite], bits.view(ml_dtypes.bfloat16).astype(np.float32)[finite])
    x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
    assert np.array_equal(to_storage(x, "bfloat16"), narrow(np, x, np.dtype(np.uint16)))
    assert np.array_equal(widen(np, to_storage(x, "float16")), x.astype(np.float16).astype(np.float32))


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_a_low_precision_gemm_rounds_its_left_operand_and_accumulates_in_float32(dtype: str) -> None:
    """The CPU backend's staged GEMM is cuBLAS GemmEx's contract: A rounded to the weights' dtype, products
    summed in float32 (the GPU lane checks CUDA against it)."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((3, 64)).astype(np.float32)
    w = to_storage(rng.standard_normal((64, 48)).astype(np.float32), dtype)
    got = CpuBackend().xp.matmul(a, w)
    a_rounded = widen(np, to_storage(a, dtype))
    want = a_rounded.astype(np.float64) @ widen(np, w).astype(np.float64)
    assert np.abs(got - want).max() < 1e-4
    unrounded = a.astype(np.float64) @ widen(np, w).astype(np.float64)
    assert np.abs(got - unrounded).max() > 1e-3, "non-vacuity: rounding A changed the product"


@pytest.mark.gpu
def test_the_cuda_conversion_kernels_equal_the_numpy_ones() -> None:
    """CUDA narrows and widens with one kernel each (backends/kernels/convert.cu): bit for bit what NumPy computes."""
    import cupy

    x = _every_bf16_boundary()
    want = narrow(np, x, np.dtype(np.uint16))
    got = narrow(cupy, cupy.asarray(x), np.dtype(np.uint16)).get()
    assert np.array_equal(got, want)
    assert np.array_equal(widen(cupy, cupy.asarray(want)).get().view(np.uint32), widen(np, want).view(np.uint32))
