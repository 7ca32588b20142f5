"""Decode's GEMM (skinny_gemm.cu) beside its NumPy twin: C = A @ B for at most 8 rows, B [K, N] bf16 / fp16.

It is one of the algorithms the cuBLASLt plan of a shape times (backends/cublaslt.py), once per configuration in
CONFIGS: the fastest one on the H200 runs that shape for the life of the process, so the kernel serves exactly
where it beats cuBLAS. A configuration is the kernel's column width (TC threads of 8 columns), its loads in flight
a thread (U) and the blocks it aims at per SM, which set how K is split into S slices (`split`). S > 1 needs the
owner's scratch (partials [S, M, N] float32 and a zeroed counter per column tile), which the CUDA backend
allocates once, long-lived. One GEMM at a time uses it: every GEMM runs on the step's compute stream.

With a norm (`launch(..., norm=...)`, the op gemm_add_rms_norm), the grid's last block to finish adds the output
into the residual stream and writes the next norm's output (norm.cu's add_rms_norm over the M rows): the decode
step's o and down projections, where the plan picked this kernel, launch once where they launched twice. Its
counter is the scratch's last (DONE), which no column tile uses.

With SwiGLU (`launch(..., act=...)`, the op gemm_silu_mul), the GEMM is the MLP's gate/up projection with its columns
interleaved PAIR_COLS at a time (models/decoder.py): a tile's last sum writes SiLU(gate) x up into act (activation.py's
silu_mul) and C is not written, so the f32 gate/up rows never leave the SM and the activation is not a launch.

With the consumer's norm (VT_CONSUMER_NORM, models/decoder.py), the norm moves from the o/down GEMM's grid-wide
tail into the GEMM that reads it: `launch(..., resid=x)` (the op gemm_add) adds a column tile's sums into the
residual stream x as soon as they are final (C is not written); `launch(..., norm_in=(x, w, eps))` (the ops
rms_norm_gemm and rms_norm_gemm_silu_mul) computes A = RMSNorm(x) * w in every block, the row's sum of squares in the
norm epilogue's order, and stages the block's K slice of it in shared memory (at most STAGE values: M x the slice).

A cluster configuration (`Config(cluster=True)`, skinny_gemm_cluster) splits K into CLUSTER slices launched as one
thread-block cluster a column tile, whose first block adds the slices' tiles through distributed shared memory:
no partials, no counters. The tuner times them only under VT_SKINNY_CLUSTER=1 (`configs()`): on the H200 they pass
the same GPU tests, win some shapes by ~0.5 us a launch and leave the step's replay where it was (session 23).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.kernels.activation import PAIR_COLS, silu_mul
from backends.kernels.build import Instance, function, is_loaded
from backends.kernels.fused import FusedKernel, ctype

MAX_M, THREADS, CLUSTER, STAGE = 8, 256, 8, 8192  # skinny_gemm.cu's SKINNY_* constants
SCRATCH_FLOATS = 2 << 20  # partials: S x M x N at most (8 MiB)
MAX_TILES = 4096  # counters: one per column tile of a split GEMM, and the norm's (the last, DONE)
DONE = MAX_TILES - 1
SMS = 132  # the H200's


@dataclass(frozen=True, slots=True)
class Config:
    """One way to run the kernel: TC threads side by side (a block's columns are 8 TC), U loads in flight a thread,
    enough K slices for `per_sm` blocks a multiprocessor."""

    tc: int = 8
    unroll: int = 4
    per_sm: int = 2  # a cluster configuration's K is CLUSTER slices whatever this says
    cluster: bool = False  # a column tile's K slices as one thread-block cluster (skinny_gemm_cluster)

    @property
    def cols(self) -> int:
        return 8 * self.tc

    @property
    def thread_rows(self) -> int:
        return THREADS // self.tc

    def __str__(self) -> str:
        return f"skinny_gemm[tc{self.tc} u{self.unroll} {'cluster' if self.cluster else f'x{self.per_sm}'}]"


DEFAULT = Config()
# What the tuner times beside cuBLASLt: narrow tiles split deep, wide tiles with more loads in flight.
CONFIGS = (DEFAULT, Config(8, 8, 4), Config(16, 8, 2), Config(32, 8, 2), Config(32, 4, 4))
CLUSTER_CONFIGS = (Config(8, 4, cluster=True), Config(16, 4, cluster=True))
EPILOGUES = ("", "norm", "swiglu")  # none, gemm_add_rms_norm's, gemm_silu_mul's
# the consumer's norm: gemm_add's epilogue, and rms_norm_gemm's and rms_norm_gemm_silu_mul's prologue (+ SwiGLU)
CONSUMER_NORM_KINDS = ("resid", "norm_in", "norm_in_swiglu")
_FLAGS = {"": "", "norm": ", true", "swiglu": ", false, true", "resid": ", false, false, false, true",
          "norm_in": ", false, false, true", "norm_in_swiglu": ", false, true, true"}


def configs() -> tuple[Config, ...]:
    """The configurations the tuner times: the cluster ones too under VT_SKINNY_CLUSTER=1."""
    from vt.env import flags

    return CONFIGS + CLUSTER_CONFIGS if flags().skinny_cluster else CONFIGS


def instance(dtype: Any, m: int, config: Config, epilogue: str = "") -> Instance:
    name = "skinny_gemm_cluster" if config.cluster else "skinny_gemm"
    args = f"{ctype(dtype)}, {m}, {config.tc}, {config.unroll}{_FLAGS[epilogue]}"
    return Instance("skinny_gemm.cu", f"vt::{name}<{args}>")


CI_INSTANCES = sorted({instance(t, m, c) for t in ("uint16", "float16") for m in range(1, MAX_M + 1)
                       for c in CONFIGS + CLUSTER_CONFIGS}
                      | {instance(t, m, c, e) for t in ("uint16", "float16") for m in (1, MAX_M)
                         for c in CONFIGS + CLUSTER_CONFIGS for e in EPILOGUES[1:]}
                      | {instance(t, m, c, e) for t in ("uint16", "float16") for m in (1, MAX_M) for c in CONFIGS
                         for e in CONSUMER_NORM_KINDS}, key=str)


def fits(m: int, n: int, dtype: Any, epilogue: str = "") -> bool:
    """The shapes the kernel serves: a few rows, 16-bit operands, whole 16-byte column groups (whole gate/up pairs
    of them for SwiGLU)."""
    pairs = epilogue in ("swiglu", "norm_in_swiglu")
    return 0 < m <= MAX_M and n % (2 * PAIR_COLS if pairs else 8) == 0 and np.dtype(dtype).itemsize == 2


def serves(m: int, n: int, k: int, config: Config, epilogue: str = "") -> bool:
    """Whether a configuration runs an epilogue at this shape: the consumer's norm only on the split kernel, its
    prologue's staged A (M x a K slice) within STAGE and K whole float4s."""
    if epilogue not in CONSUMER_NORM_KINDS:
        return True
    if config.cluster:
        return False
    return not epilogue.startswith("norm_in") or (k % 4 == 0 and m * split(m, n, k, config)[0] <= STAGE)


def split(m: int, n: int, k: int, config: Config = DEFAULT) -> tuple[int, int]:
    """(rows of K a slice takes, S): blocks enough for the configuration's count a SM, a slice at least two rows
    a row of threads, the partials and counters within the scratch. A cluster configuration: CLUSTER slices (the
    cluster's blocks; the last ones empty where K is short), nothing in the scratch."""
    if config.cluster:
        return -(-k // CLUSTER), CLUSTER
    tiles = -(-n // config.cols)
    s = max(1, min(-(-config.per_sm * SMS // tiles), k // (2 * config.thread_rows)))
    if s > 1 and (s * m * n > SCRATCH_FLOATS or tiles >= MAX_TILES):
        s = 1
    step = -(-k // s)
    return step, -(-k // step)


def sliced_product(a: np.ndarray, b: np.ndarray, out: np.ndarray, step: int, s: int) -> None:
    """out = a @ b as float32 partial products over s K slices of `step` rows, added in slice order (a split-K
    kernel's order across slices): the twin of both skinny GEMMs, each with its own split."""
    from vt.dtypes import widen_host

    k = a.shape[1]
    acc = np.zeros(out.shape, np.float32)
    for i in range(s):
        ks = slice(i * step, min(k, (i + 1) * step))
        acc += widen_host(a[:, ks]) @ widen_host(b[ks])
    out[...] = acc


def _twin(a: np.ndarray, b: np.ndarray, out: np.ndarray, partials: Any = None, counters: Any = None,
          config: Config = DEFAULT) -> None:
    sliced_product(a, b, out, *split(a.shape[0], out.shape[1], a.shape[1], config))


def load(cp: Any, dtype: Any, m: int, config: Config, epilogue: str) -> None:
    """Compiles and loads an epilogue's variant now (outside any capture: a capture may not load a module)."""
    function(cp, instance(dtype, m, config, epilogue))


def loaded(dtype: Any, m: int, config: Config, epilogue: str) -> bool:
    return is_loaded(instance(dtype, m, config, epilogue))


def kind(norm: Any = None, act: Any = None, resid: Any = None, norm_in: Any = None) -> str:
    """The epilogue (and prologue) a launch's arguments name: one epilogue at most (norm_in's prologue may take
    SwiGLU's)."""
    named = sum(e is not None and e is not False for e in (norm, act, resid))
    if named > 1 or (norm_in is not None and (norm or resid is not None)):
        raise ValueError("skinny_gemm: one epilogue a launch (norm, act or resid; norm_in with act at most)")
    if norm_in is not None:
        return "norm_in_swiglu" if act is not None else "norm_in"
    return "norm" if norm else "swiglu" if act is not None else "resid" if resid is not None else ""


def launch(cp: Any, dtype: Any, a: Any, b: Any, c: Any, partials: Any, counters: Any, m: int, n: int,
           k: int, config: Config = DEFAULT, norm: tuple[Any, Any, Any, float] | None = None, act: Any = None,
           resid: Any = None, norm_in: tuple[Any, Any, float] | None = None) -> None:
    """The kernel on CuPy's current stream; a, b, c, partials, counters are arrays or device pointers (counters
    the whole MAX_TILES of them). norm: (x, w, h, eps) of the epilogue, x [m, n] float32 and h [m, n] in dtype.
    act: SwiGLU's output [m, n / 2] in dtype (the epilogue's; c is then not written). resid: the residual stream x
    [m, n] float32 the sums are added into (c is not written). norm_in: (x, w, eps), A = RMSNorm(x [m, k] float32)
    * w (a is not read)."""
    step, s = split(m, n, k, config)
    epilogue = kind(norm, act, resid, norm_in)
    if not serves(m, n, k, config, epilogue):
        raise ValueError(f"skinny_gemm: {config} does not run {epilogue} at {m}x{n}x{k}")
    fn = function(cp, instance(dtype, m, config, epilogue))
    x, w, h, eps = norm or (0, 0, act if act is not None else 0, 0.0)
    if resid is not None:
        x = resid
    if norm_in is not None:
        x, w, eps = norm_in
    done = 0
    if norm:
        done = counters[DONE:] if hasattr(counters, "shape") else int(counters) + 4 * DONE
    fn((-(-n // config.cols), s), (THREADS,), (ptr(a), ptr(b), ptr(c), ptr(partials), ptr(counters), np.int32(n),
                                               np.int32(k), np.int32(step), ptr(x), ptr(w), ptr(h), ptr(done),
                                               np.float32(eps)))


def ptr(x: Any) -> Any:
    """A kernel argument: an array as it is, a raw device pointer as a 64-bit value."""
    return np.uint64(x) if isinstance(x, int) else x


def _cuda(cp: Any, a: Any, b: Any, out: Any, partials: Any, counters: Any, config: Config = DEFAULT) -> None:
    m, k = a.shape
    if not fits(m, out.shape[1], b.dtype) or a.dtype != b.dtype:
        raise ValueError(f"skinny_gemm: {a.shape} {a.dtype} @ {b.shape} {b.dtype} is not a shape it serves")
    launch(cp, b.dtype, a, b, out, partials, counters, m, out.shape[1], k, config)


skinny_gemm = FusedKernel("skinny_gemm", _twin, _cuda, writes=(2,))


def _norm_twin(a: np.ndarray, b: np.ndarray, out: np.ndarray, partials: Any, counters: Any, x: np.ndarray,
               w: np.ndarray, h: np.ndarray, eps: float, config: Config = DEFAULT) -> None:
    """The GEMM's twin, then add_rms_norm's: what the two launches the epilogue replaces compute."""
    from backends.kernels.norm import add_rms_norm

    _twin(a, b, out, partials, counters, config)
    add_rms_norm(np, x, out, None, w, h, eps=eps)


def _norm_cuda(cp: Any, a: Any, b: Any, out: Any, partials: Any, counters: Any, x: Any, w: Any, h: Any, eps: float,
               config: Config = DEFAULT) -> None:
    m, k = a.shape
    if not fits(m, out.shape[1], b.dtype) or a.dtype != b.dtype or h.dtype != b.dtype or x.shape != out.shape:
        raise ValueError(f"skinny_gemm_norm: {a.shape} {a.dtype} @ {b.shape} {b.dtype} into x {x.shape}, h {h.dtype}")
    launch(cp, b.dtype, a, b, out, partials, counters, m, out.shape[1], k, config, (x, w, h, eps))


skinny_gemm_norm = FusedKernel("skinny_gemm_norm", _norm_twin, _norm_cuda, writes=(2, 5, 7))


def _swiglu_twin(a: np.ndarray, b: np.ndarray, gate_up: np.ndarray, act: np.ndarray, partials: Any, counters: Any,
                 config: Config = DEFAULT) -> None:
    """The GEMM's twin into gate_up, then silu_mul's over the interleaved pairs (the CUDA kernel leaves gate_up
    unwritten: it is the unfused path's scratch)."""
    _twin(a, b, gate_up, partials, counters, config)
    silu_mul(np, gate_up, act, group=PAIR_COLS)


def _swiglu_cuda(cp: Any, a: Any, b: Any, gate_up: Any, act: Any, partials: Any, counters: Any,
                 config: Config = DEFAULT) -> None:
    m, k = a.shape
    n = b.shape[1]
    if not fits(m, n, b.dtype, "swiglu") or a.dtype != b.dtype or act.dtype != b.dtype or act.shape != (m, n // 2):
        raise ValueError(f"skinny_gemm_swiglu: {a.shape} {a.dtype} @ {b.shape} {b.dtype} into {act.shape} {act.dtype}")
    launch(cp, b.dtype, a, b, gate_up, partials, counters, m, n, k, config, act=act)


skinny_gemm_swiglu = FusedKernel("skinny_gemm_swiglu", _swiglu_twin, _swiglu_cuda, writes=(2, 3))
