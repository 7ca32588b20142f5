"""Decode's GEMM on tensor cores for 2..16 rows (skinny_mma.cu), beside its NumPy twin.

A candidate of the GEMM tuner (backends/cublaslt.py), as the CUDA-core skinny GEMM is: timed beside cuBLASLt's
algorithms on each shape it serves, kept only where it is the fastest. It runs no epilogue of its own: a plan with a
consumer (the norm after an o projection, SwiGLU after gate/up) runs the consumer's kernel after it, as after
cuBLASLt. The twin is the skinny GEMM's: float32 partial products per K slice (this kernel's slices), added in slice
order, the kernel's order across slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import FusedKernel, ctype
from backends.kernels.skinny_gemm import MAX_TILES, SCRATCH_FLOATS, SMS, ptr, sliced_product

ROWS, THREADS, WARPS = 16, 128, 4  # skinny_mma.cu's MMA_GEMM_* constants
MIN_ROWS = 2  # one row is the CUDA-core kernel's: a read of B, 8 FMAs a load


@dataclass(frozen=True, slots=True)
class MmaConfig:
    """One way to run the kernel: NT n8 tiles a block (its columns are 8 NT), a ring of STAGES k16 steps a warp,
    enough K slices for `per_sm` blocks a multiprocessor."""

    nt: int = 8
    stages: int = 4
    per_sm: int = 2

    @property
    def cols(self) -> int:
        return 8 * self.nt

    @property
    def smem_bytes(self) -> int:
        """skinny_mma_smem<NT, STAGES>(): the warps' rings, or the warps' sums where larger."""
        return max(WARPS * self.stages * 16 * (self.cols + 8) * 2, WARPS * ROWS * (self.cols + 8) * 4)

    def __str__(self) -> str:
        return f"skinny_mma[nt{self.nt} s{self.stages} x{self.per_sm}]"


# What the tuner times: wide tiles with two or four blocks a SM, a narrow one split deeper, a deeper ring.
CONFIGS = (MmaConfig(), MmaConfig(8, 4, 4), MmaConfig(4, 4, 4), MmaConfig(8, 8, 2))


def instance(dtype: Any, config: MmaConfig) -> Instance:
    return Instance("skinny_mma.cu", f"vt::skinny_mma<{ctype(dtype)}, {config.nt}, {config.stages}>")


CI_INSTANCES = sorted({instance(t, c) for t in ("uint16", "float16") for c in CONFIGS}, key=str)


def fits(m: int, n: int, k: int, dtype: Any) -> bool:
    """The shapes the kernel serves: 2..16 rows, 16-bit operands, whole 16-byte column groups, K in whole 16-byte
    rows of A."""
    return MIN_ROWS <= m <= ROWS and n % 8 == 0 and k % 8 == 0 and np.dtype(dtype).itemsize == 2


def taken(m: int, n: int, k: int, dtype: Any) -> bool:
    """Whether a plan of this shape times the kernel: VT_SKINNY_MMA, and a shape it serves."""
    from vt.env import flags

    return flags().skinny_mma and fits(m, n, k, dtype)


def split(m: int, n: int, k: int, config: MmaConfig = CONFIGS[0]) -> tuple[int, int]:
    """(rows of K a slice takes, a multiple of 16; S): blocks enough for the configuration's count a SM, each warp
    two k16 steps at least, the partials and counters within the skinny GEMM's scratch (which the tuner's plans
    share)."""
    tiles = -(-n // config.cols)
    s = max(1, min(-(-config.per_sm * SMS // tiles), k // (2 * 16 * WARPS)))
    if s > 1 and (s * m * n > SCRATCH_FLOATS or tiles >= MAX_TILES):
        s = 1
    step = -(-k // s)
    step = -(-step // 16) * 16
    return step, -(-k // step)


def _twin(a: np.ndarray, b: np.ndarray, out: np.ndarray, partials: Any = None, counters: Any = None,
          config: MmaConfig = CONFIGS[0]) -> None:
    sliced_product(a, b, out, *split(a.shape[0], out.shape[1], a.shape[1], config))


def launch(cp: Any, dtype: Any, a: Any, b: Any, c: Any, partials: Any, counters: Any, m: int, n: int, k: int,
           config: MmaConfig = CONFIGS[0]) -> None:
    """The kernel on CuPy's current stream; a, b, c, partials, counters are arrays or device pointers (counters
    MAX_TILES of them, zeros, as the skinny GEMM's)."""
    if not fits(m, n, k, dtype):
        raise ValueError(f"skinny_mma: {m}x{n}x{k} {np.dtype(dtype)} is not a shape it serves")
    step, s = split(m, n, k, config)
    fn = function(cp, instance(dtype, config))
    if config.smem_bytes > 48 << 10:
        fn.max_dynamic_shared_size_bytes = config.smem_bytes
    fn((-(-n // config.cols), s), (THREADS,), (ptr(a), ptr(b), ptr(c), ptr(partials), ptr(counters), np.int32(m),
                                               np.int32(n), np.int32(k), np.int32(step)),
       shared_mem=config.smem_bytes)


def _cuda(cp: Any, a: Any, b: Any, out: Any, partials: Any, counters: Any, config: MmaConfig = CONFIGS[0]) -> None:
    m, k = a.shape
    if a.dtype != b.dtype:
        raise ValueError(f"skinny_mma: {a.dtype} @ {b.dtype}")
    launch(cp, b.dtype, a, b, out, partials, counters, m, out.shape[1], k, config)


skinny_mma = FusedKernel("skinny_mma", _twin, _cuda, writes=(2,))
