"""The embedding gather and residual add + RMSNorm (norm.cu), each beside its NumPy twin."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import NULL, FusedKernel, ctype
from vt.dtypes import narrow_host, widen_host

STORAGE_TYPES = ("float", "vt::bf16", "vt::f16")
CI_INSTANCES = ([Instance("norm.cu", f"vt::embed<{t}>") for t in STORAGE_TYPES]
                + [Instance("norm.cu", f"vt::add_rms_norm<{t}>") for t in STORAGE_TYPES])


NORM_VECS = 4  # float4s a thread holds (common.cuh): H up to 4 * 4 * 1024


def norm_threads(H: int) -> int:
    """Enough whole warps that each thread holds at most NORM_VECS float4s of a row (at least two each when the
    row is long, so a block stays small)."""
    return min(1024, max(32, -(-H // (4 * 2) // 32) * 32))


# ---- embed: out [T, H] float32 = table[ids] ---------------------------------------------------------------------
def _embed_twin(table: np.ndarray, ids: np.ndarray, out: np.ndarray) -> None:
    out[...] = widen_host(table[ids])


def _embed_cuda(cp: Any, table: Any, ids: Any, out: Any) -> None:
    T, H = out.shape
    fn = function(cp, Instance("norm.cu", f"vt::embed<{ctype(table.dtype)}>"))
    fn((T,), (norm_threads(H),), (table, ids, out, np.int32(H)))


embed = FusedKernel("embed", _embed_twin, _embed_cuda, writes=(2,))


# ---- add_rms_norm: x += delta (+ bias); out = narrow(rmsnorm(x) * w) ------------------------------------------
def _add_rms_norm_twin(x: np.ndarray, delta: np.ndarray | None, bias: np.ndarray | None, w: np.ndarray,
                       out: np.ndarray, eps: float) -> None:
    if delta is not None:
        np.add(x, delta if bias is None else delta + bias, out=x)
    var = np.mean(x * x, axis=-1, keepdims=True)
    out[...] = narrow_host(x / np.sqrt(var + np.float32(eps)) * w, out.dtype)


def _add_rms_norm_cuda(cp: Any, x: Any, delta: Any, bias: Any, w: Any, out: Any, eps: float) -> None:
    T, H = x.shape
    if H % 4 or H > 4 * NORM_VECS * 1024:
        raise ValueError(f"add_rms_norm: hidden size {H} must be a multiple of 4 and at most {4 * NORM_VECS * 1024}")
    fn = function(cp, Instance("norm.cu", f"vt::add_rms_norm<{ctype(out.dtype)}>"))
    fn((T,), (norm_threads(H),), (x, NULL if delta is None else delta, NULL if bias is None else bias, w, out,
                              np.int32(H), np.float32(eps)))


add_rms_norm = FusedKernel("add_rms_norm", _add_rms_norm_twin, _add_rms_norm_cuda, writes=(0, 4))
