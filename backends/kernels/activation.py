"""SiLU(gate) x up (activation.cu), beside its NumPy twin."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import FusedKernel, ctype, grid_1d
from vt.dtypes import narrow_host

CI_INSTANCES = [Instance("activation.cu", f"vt::silu_mul<{t}>") for t in ("float", "vt::bf16", "vt::f16")]


def _twin(gate_up: np.ndarray, out: np.ndarray) -> None:
    n = out.shape[-1]
    g = gate_up[..., :n]
    out[...] = narrow_host(g / (np.float32(1.0) + np.exp(-g)) * gate_up[..., n:], out.dtype)


def _cuda(cp: Any, gate_up: Any, out: Any) -> None:
    grid, block = grid_1d(out.size)
    function(cp, Instance("activation.cu", f"vt::silu_mul<{ctype(out.dtype)}>"))(
        grid, block, (gate_up, out, np.int32(out.shape[-1]), np.int64(out.size)))


silu_mul = FusedKernel("silu_mul", _twin, _cuda, writes=(1,))
