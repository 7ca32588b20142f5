"""SiLU(gate) x up (activation.cu), beside its NumPy twin, over the fused gate/up projection's interleaved columns."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import FusedKernel, ctype, grid_1d
from vt.dtypes import narrow_host

PAIR_COLS = 8  # common.cuh's: gate's columns, then up's, this many at a time (the skinny GEMM's SwiGLU epilogue)
CI_INSTANCES = [Instance("activation.cu", f"vt::silu_mul<{t}>") for t in ("float", "vt::bf16", "vt::f16")]


def gate_up_columns(intermediate: int, group: int) -> tuple[np.ndarray, np.ndarray]:
    """The columns of the fused gate/up projection that hold gate's and up's outputs, in output order: `group`
    gate columns, then the same group's up columns, and so on (group = intermediate: all of gate, then all of up)."""
    o = np.arange(intermediate)
    gate = o // group * 2 * group + o % group
    return gate, gate + group


def pair_group(intermediate: int) -> int:
    """The interleave the model lays its gate/up weights out in: PAIR_COLS where whole pairs of them fit (the
    skinny GEMM's SwiGLU epilogue reads such pairs), else gate then up."""
    return PAIR_COLS if intermediate % PAIR_COLS == 0 else intermediate


def _twin(gate_up: np.ndarray, out: np.ndarray, group: int) -> None:
    gate, up = gate_up_columns(out.shape[-1], group)
    g = gate_up[..., gate]
    out[...] = narrow_host(g / (np.float32(1.0) + np.exp(-g)) * gate_up[..., up], out.dtype)


def _cuda(cp: Any, gate_up: Any, out: Any, group: int) -> None:
    grid, block = grid_1d(out.size)
    function(cp, Instance("activation.cu", f"vt::silu_mul<{ctype(out.dtype)}>"))(
        grid, block, (gate_up, out, np.int32(out.shape[-1]), np.int32(group), np.int64(out.size)))


silu_mul = FusedKernel("silu_mul", _twin, _cuda, writes=(1,))
