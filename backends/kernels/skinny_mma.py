"""Decode's GEMM on tensor cores for 2..16 rows (skinny_mma.cu), beside its NumPy twins.

A candidate of the GEMM tuner (backends/cublaslt.py), as the CUDA-core skinny GEMM is: timed beside cuBLASLt's
algorithms on each shape it serves, kept only where it is the fastest. It runs the consumers a multi-row step's
plans have in its own launch, as the CUDA-core kernel does at one row: the residual add + RMSNorm after an o or down
projection (`norm=`, the grid's last column tile to be final runs it) and SwiGLU after the gate/up projection
(`act=`, a tile's final sums become the activation; C is not written). After cuBLASLt each of those is a launch of
its own. The consumer's norm (one row only: models/decoder.py's CONSUMER_NORM_ROWS) is not among them: such a plan
runs its consumer after this kernel, as after cuBLASLt. The twin is the skinny GEMM's: float32 partial products per
K slice (this kernel's slices), added in slice order, the kernel's order across slices; then the consumer's own twin.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.kernels.activation import PAIR_COLS, silu_mul
from backends.kernels.build import Instance, function
from backends.kernels.fused import FusedKernel, ctype
from backends.kernels.skinny_gemm import DONE, MAX_TILES, SCRATCH_FLOATS, SMS, ptr, sliced_product

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


EPILOGUES = ("", "norm", "swiglu")  # skinny_mma.cu's MMA_PLAIN, MMA_NORM, MMA_SWIGLU: the consumers it runs itself


def instance(dtype: Any, config: MmaConfig, epilogue: str = "") -> Instance:
    epi = f", {EPILOGUES.index(epilogue)}" if epilogue else ""
    return Instance("skinny_mma.cu", f"vt::skinny_mma<{ctype(dtype)}, {config.nt}, {config.stages}{epi}>")


CI_INSTANCES = sorted({instance(t, c, e) for t in ("uint16", "float16") for c in CONFIGS for e in EPILOGUES}, key=str)


def fits(m: int, n: int, k: int, dtype: Any, epilogue: str = "") -> bool:
    """The shapes the kernel serves: 2..16 rows, 16-bit operands, whole 16-byte column groups (whole gate/up pairs of
    them for SwiGLU), K in whole 16-byte rows of A."""
    pairs = epilogue == "swiglu"
    return (MIN_ROWS <= m <= ROWS and n % (2 * PAIR_COLS if pairs else 8) == 0 and k % 8 == 0
            and np.dtype(dtype).itemsize == 2)


def fuses(epilogue: str) -> bool:
    """Whether the kernel runs a plan's consumer in its own launch (else the consumer's kernel runs after it)."""
    return epilogue in EPILOGUES


def taken(m: int, n: int, k: int, dtype: Any, epilogue: str = "") -> bool:
    """Whether a plan of this shape times the kernel: VT_SKINNY_MMA, and a shape it serves (with the consumer it
    fuses, or before the one it does not)."""
    from vt.env import flags

    return flags().skinny_mma and fits(m, n, k, dtype, epilogue if fuses(epilogue) else "")


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
           config: MmaConfig = CONFIGS[0], norm: tuple[Any, Any, Any, float] | None = None, act: Any = None) -> None:
    """The kernel on CuPy's current stream; a, b, c, partials, counters are arrays or device pointers (counters the
    skinny GEMM's MAX_TILES of them, zeros: the norm takes its DONE). norm: (x, w, h, eps), x [m, n] float32 += C,
    then h [m, n] = RMSNorm(x) * w. act: SwiGLU's output [m, n / 2] (c is then not written)."""
    if norm is not None and act is not None:
        raise ValueError("skinny_mma: one epilogue a launch (norm or act)")
    epilogue = "norm" if norm is not None else "swiglu" if act is not None else ""
    if not fits(m, n, k, dtype, epilogue):
        raise ValueError(f"skinny_mma: {m}x{n}x{k} {np.dtype(dtype)} is not a shape it serves ({epilogue or 'plain'})")
    step, s = split(m, n, k, config)
    fn = function(cp, instance(dtype, config, epilogue))
    if config.smem_bytes > 48 << 10:
        fn.max_dynamic_shared_size_bytes = config.smem_bytes
    x, w, h, eps = norm or (0, 0, act if act is not None else 0, 0.0)
    done = 0
    if norm is not None:
        done = counters[DONE:] if hasattr(counters, "shape") else int(counters) + 4 * DONE
    fn((-(-n // config.cols), s), (THREADS,), (ptr(a), ptr(b), ptr(c), ptr(partials), ptr(counters), np.int32(m),
                                               np.int32(n), np.int32(k), np.int32(step), ptr(x), ptr(w), ptr(h),
                                               ptr(done), np.float32(eps)),
       shared_mem=config.smem_bytes)


def _cuda(cp: Any, a: Any, b: Any, out: Any, partials: Any, counters: Any, config: MmaConfig = CONFIGS[0]) -> None:
    m, k = a.shape
    if a.dtype != b.dtype:
        raise ValueError(f"skinny_mma: {a.dtype} @ {b.dtype}")
    launch(cp, b.dtype, a, b, out, partials, counters, m, out.shape[1], k, config)


skinny_mma = FusedKernel("skinny_mma", _twin, _cuda, writes=(2,))


def _norm_twin(a: np.ndarray, b: np.ndarray, out: np.ndarray, partials: Any, counters: Any, x: np.ndarray,
               w: np.ndarray, h: np.ndarray, eps: float, config: MmaConfig = CONFIGS[0]) -> None:
    """The GEMM's twin, then add_rms_norm's: what the two launches the epilogue replaces compute."""
    from backends.kernels.norm import add_rms_norm

    _twin(a, b, out, partials, counters, config)
    add_rms_norm(np, x, out, None, w, h, eps=eps)


def _norm_cuda(cp: Any, a: Any, b: Any, out: Any, partials: Any, counters: Any, x: Any, w: Any, h: Any, eps: float,
               config: MmaConfig = CONFIGS[0]) -> None:
    m, k = a.shape
    if a.dtype != b.dtype or h.dtype != b.dtype or x.shape != out.shape:
        raise ValueError(f"skinny_mma_norm: {a.shape} {a.dtype} @ {b.shape} {b.dtype} into x {x.shape}, h {h.dtype}")
    launch(cp, b.dtype, a, b, out, partials, counters, m, out.shape[1], k, config, norm=(x, w, h, eps))


skinny_mma_norm = FusedKernel("skinny_mma_norm", _norm_twin, _norm_cuda, writes=(2, 5, 7))


def _swiglu_twin(a: np.ndarray, b: np.ndarray, gate_up: np.ndarray, act: np.ndarray, partials: Any, counters: Any,
                 config: MmaConfig = CONFIGS[0]) -> None:
    """The GEMM's twin into gate_up, then silu_mul's over the interleaved pairs (the CUDA kernel leaves gate_up
    unwritten: it is the unfused path's scratch)."""
    _twin(a, b, gate_up, partials, counters, config)
    silu_mul(np, gate_up, act, group=PAIR_COLS)


def _swiglu_cuda(cp: Any, a: Any, b: Any, gate_up: Any, act: Any, partials: Any, counters: Any,
                 config: MmaConfig = CONFIGS[0]) -> None:
    m, k = a.shape
    n = b.shape[1]
    if a.dtype != b.dtype or act.dtype != b.dtype or act.shape != (m, n // 2):
        raise ValueError(f"skinny_mma_swiglu: {a.shape} {a.dtype} @ {b.shape} {b.dtype} into {act.shape} {act.dtype}")
    launch(cp, b.dtype, a, b, gate_up, partials, counters, m, n, k, config, act=act)


skinny_mma_swiglu = FusedKernel("skinny_mma_swiglu", _swiglu_twin, _swiglu_cuda, writes=(2, 3))
