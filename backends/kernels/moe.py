"""Routed MoE (moe.cu), each kernel beside its NumPy twin: only the experts a token chose run.

    moe_route     router logits -> each token's top-k experts and their weights
    moe_group     the routed rows (t k + j) grouped by expert: offsets, the row order, the experts with rows
    moe_gemm      one launch over every expert's routed rows (SwiGLU fused into the gate/up GEMM)
    moe_combine   each token's k expert outputs, weighted, summed in ascending expert order

and the one-token fusions: moe_gemm_rows (no grouping), moe_route_gemm_rows (routing + gate/up), with its input norm
(moe_norm_route_gemm_rows), moe_combine_add_rms_norm (the combine + the residual add + the next norm).

Every buffer's size follows T and k only (T x k routed rows, at most min(E, T k) experts with rows), so a step
with MoE layers captures; which experts run is data on the device. Expert weights stay in HF's Linear layout,
[E, out, in] (the gate's and the up projection's rows stacked), so a lane reads a weight row along K.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import NULL, FusedKernel, ctype
from backends.kernels.norm import NORM_VECS, add_rms_norm, norm_threads
from vt.dtypes import narrow_host, widen_host

MAX_EXPERTS, MAX_TOP_K, GEMM_ROWS, GEMM_WARPS = 512, 32, 8, 8  # moe.cu's MOE_* constants
STORAGE_TYPES = ("float", "vt::bf16", "vt::f16")


def _vec(dtype: Any, K: int) -> int:
    """Elements a lane loads at once: 16 bytes when every weight row starts 16-byte aligned, else one."""
    per = 16 // np.dtype(dtype).itemsize
    return per if K % per == 0 else 1


def _cols(swiglu: bool) -> tuple[int, int]:
    """(columns a block owns, columns a warp loads together). A block owns 16 gate/up or 32 down columns: enough
    blocks at decode's few rows. Each warp issues its 2 or 4 columns' loads together: one DRAM latency a stretch of
    K, not one a column (H200, session 21: the 30B-A3B shape's decode graph 2.161 -> 2.018 ms at 8 rows, grouped;
    0.686 -> 0.677 at one row, by row)."""
    per_warp = 2 if swiglu else 4
    return GEMM_WARPS * per_warp, per_warp


def _gemm_expr(t: str, out: str, vec: int, swiglu: bool, by_row: bool = False) -> str:
    kernel = ("moe_gemm_rows_bounded" if t == "vt::bf16" else "moe_gemm_rows") if by_row else "moe_gemm"
    return f"vt::{kernel}<{t}, {out}, {vec}, {'true' if swiglu else 'false'}, {_cols(swiglu)[1]}>"


def _route_gemm_expr(t: str, vec: int, norm_in: bool = False) -> str:
    return f"vt::moe_route_gemm_rows<{t}, {t}, {vec}, {_cols(True)[1]}{', true' if norm_in else ''}>"


CI_INSTANCES = ([Instance("moe.cu", "vt::moe_route"), Instance("moe.cu", "vt::moe_group"),
                 Instance("moe.cu", "vt::moe_combine")]
                + [Instance("moe.cu", f"vt::moe_combine_add_rms_norm<{t}>") for t in STORAGE_TYPES]
                + [Instance("moe.cu", _gemm_expr(t, o, v, s, r)) for t in STORAGE_TYPES
                   for v in (1, 4 if t == "float" else 8) for o, s in ((t, True), ("float", False))
                   for r in (False, True)]
                + [Instance("moe.cu", _route_gemm_expr(t, v, n)) for t in STORAGE_TYPES
                   for v in (1, 4 if t == "float" else 8) for n in (False, True)])


def expert_rows(T: int, top_k: int, num_experts: int) -> int:
    """How many experts can have routed rows in a step of T tokens (the experts list's static length)."""
    return min(num_experts, T * top_k)


# ---- moe_route: logits [T, E] -> ids [T, k] int32, weights [T, k] float32 -----------------------------------
def _route_twin(logits: np.ndarray, ids: np.ndarray, weights: np.ndarray, norm_topk_prob: bool) -> None:
    k = ids.shape[1]
    m = np.nanmax(logits, axis=-1, keepdims=True)
    s = np.exp(logits - m).sum(axis=-1, keepdims=True)
    ranked = np.where(np.isnan(logits), -np.inf, logits)
    chosen = np.argsort(-ranked, axis=-1, kind="stable")[:, :k]  # descending, a tie to the lower expert
    p = np.exp(np.take_along_axis(logits, chosen, axis=-1) - m) / s
    if norm_topk_prob:
        p = p / p.sum(axis=-1, keepdims=True)
    ids[...] = chosen
    weights[...] = p


def _check_route(what: str, E: int, k: int) -> None:
    if E > MAX_EXPERTS or not 0 < k <= min(E, MAX_TOP_K):
        raise ValueError(f"{what}: {E} experts (at most {MAX_EXPERTS}), top-k {k} (1..{MAX_TOP_K})")


def _route_cuda(cp: Any, logits: Any, ids: Any, weights: Any, norm_topk_prob: bool) -> None:
    T, E = logits.shape
    k = ids.shape[1]
    _check_route("moe_route", E, k)
    warps = 4
    if T:
        function(cp, Instance("moe.cu", "vt::moe_route"))(
            (-(-T // warps),), (32 * warps,), (logits, ids, weights, np.int32(T), np.int32(E), np.int32(k),
                                               np.int32(bool(norm_topk_prob))))


moe_route = FusedKernel("moe_route", _route_twin, _route_cuda, writes=(1, 2))


# ---- moe_group: ids [T, k] -> offsets [E + 1], experts [n_list], slots [T k] -------------------------------
def _group_twin(ids: np.ndarray, offsets: np.ndarray, experts: np.ndarray, slots: np.ndarray) -> None:
    E = offsets.shape[0] - 1
    flat = ids.reshape(-1)
    counts = np.bincount(flat, minlength=E)
    offsets[0] = 0
    np.cumsum(counts, out=offsets[1:])
    slots[...] = np.argsort(flat, kind="stable")
    used = np.flatnonzero(counts)[: experts.shape[0]]
    experts[...] = -1
    experts[: used.shape[0]] = used


def _group_cuda(cp: Any, ids: Any, offsets: Any, experts: Any, slots: Any) -> None:
    E = offsets.shape[0] - 1
    function(cp, Instance("moe.cu", "vt::moe_group"))(
        (1,), (1024,), (ids, offsets, experts, slots, np.int32(ids.size), np.int32(E), np.int32(experts.shape[0])),
        shared_mem=8 * E)


moe_group = FusedKernel("moe_group", _group_twin, _group_cuda, writes=(1, 2, 3))


# ---- moe_gemm: out[slot] = x[slot // row_div] @ w[e]^T for every routed row of every expert ----------------
def _gemm_twin(x: np.ndarray, w: np.ndarray, offsets: np.ndarray, experts: np.ndarray, slots: np.ndarray,
               out: np.ndarray, row_div: int, swiglu: bool) -> None:
    N = out.shape[1]
    for e in experts[experts >= 0]:
        rows = slots[offsets[e]: offsets[e + 1]]
        y = widen_host(x[rows // row_div]) @ widen_host(w[e]).T  # float32 accumulation, as the kernel's
        if swiglu:
            g = y[:, :N]
            y = g / (np.float32(1.0) + np.exp(-g)) * y[:, N:]
        out[rows] = narrow_host(y, out.dtype)


def _gemm_cuda(cp: Any, x: Any, w: Any, offsets: Any, experts: Any, slots: Any, out: Any, row_div: int,
               swiglu: bool) -> None:
    _launch_gemm(cp, x, w, offsets, experts, slots, out, row_div, swiglu, by_row=False)


def _check_gemm(x: Any, w: Any, out: Any, swiglu: bool) -> None:
    N, K = out.shape[1], x.shape[1]
    if w.shape[1:] != ((2 * N if swiglu else N), K) or x.dtype != w.dtype:
        raise ValueError(f"moe_gemm: weights {w.shape} {w.dtype} for x {x.shape} {x.dtype} -> out {out.shape}")


def _staged(cp: Any, instance: Instance, x: Any, rows: int) -> tuple[Any, int]:
    """The kernel, and the dynamic shared memory its rows of x take (opted into above the default 48 KiB)."""
    fn = function(cp, instance)
    smem = rows * x.shape[1] * x.dtype.itemsize
    if smem > 48 << 10:
        fn.max_dynamic_shared_size_bytes = smem
    return fn, smem


def _launch_gemm(cp: Any, x: Any, w: Any, offsets: Any, experts: Any, slots: Any, out: Any, row_div: int,
                 swiglu: bool, by_row: bool) -> None:
    """Grouped (blocks over the experts list) or by row (blocks over the routed rows, `experts` being ids)."""
    _check_gemm(x, w, out, swiglu)
    if not experts.size:
        return
    N, K = out.shape[1], x.shape[1]
    vec = _vec(w.dtype, K)
    fn, smem = _staged(cp, Instance("moe.cu", _gemm_expr(ctype(w.dtype), ctype(out.dtype) if swiglu else "float",
                                                         vec, swiglu, by_row)), x,
                       1 if by_row else GEMM_ROWS)
    cols = _cols(swiglu)[0]
    tail = (np.int32(N), np.int32(K), np.int32(row_div), np.int32(cols))
    fn((experts.size, -(-N // cols)), (32 * GEMM_WARPS,),
       (x, w, experts, out, *tail) if by_row else (x, w, offsets, experts, slots, out, *tail), shared_mem=smem)


moe_gemm = FusedKernel("moe_gemm", _gemm_twin, _gemm_cuda, writes=(5,))


# ---- moe_gemm_rows: out[r] = x[r // row_div] @ w[ids.flat[r]]^T for every routed row r ----------------------
def _gemm_rows_twin(x: np.ndarray, w: np.ndarray, ids: np.ndarray, out: np.ndarray, row_div: int,
                    swiglu: bool) -> None:
    E = w.shape[0]
    offsets, experts = np.empty(E + 1, np.int32), np.empty(expert_rows(1, ids.size, E), np.int32)
    slots = np.empty(ids.size, np.int32)
    _group_twin(ids, offsets, experts, slots)  # the twin's own bookkeeping: the kernel reads ids alone
    _gemm_twin(x, w, offsets, experts, slots, out, row_div, swiglu)


def _gemm_rows_cuda(cp: Any, x: Any, w: Any, ids: Any, out: Any, row_div: int, swiglu: bool) -> None:
    _launch_gemm(cp, x, w, None, ids, None, out, row_div, swiglu, by_row=True)


moe_gemm_rows = FusedKernel("moe_gemm_rows", _gemm_rows_twin, _gemm_rows_cuda, writes=(3,))


# ---- moe_route_gemm_rows: moe_route, then the gate/up moe_gemm_rows -----------------------------------------
def _route_gemm_rows_twin(logits: np.ndarray, x: np.ndarray, w: np.ndarray, ids: np.ndarray, weights: np.ndarray,
                          out: np.ndarray, norm_topk_prob: bool) -> None:
    _route_twin(logits, ids, weights, norm_topk_prob)
    _gemm_rows_twin(x, w, ids, out, ids.shape[1], True)


def _route_gemm_rows_cuda(cp: Any, logits: Any, x: Any, w: Any, ids: Any, weights: Any, out: Any,
                          norm_topk_prob: bool, norm_in: tuple[Any, Any, float] | None = None) -> None:
    """norm_in: (xf [T, K] float32, ln [K] float32, eps): the kernel stages RMSNorm(xf) * ln, x (h) unread."""
    (T, E), k = logits.shape, ids.shape[1]
    _check_route("moe_route_gemm_rows", E, k)
    _check_gemm(x, w, out, True)
    if x.shape[0] != T or out.shape[0] != T * k or out.dtype != x.dtype:
        raise ValueError(f"moe_route_gemm_rows: x {x.shape} {x.dtype} and out {out.shape} {out.dtype} for {T} "
                         f"tokens' top-{k}")
    if not T:
        return
    N, K = out.shape[1], x.shape[1]
    vec = _vec(w.dtype, K)
    fn, smem = _staged(cp, Instance("moe.cu", _route_gemm_expr(ctype(w.dtype), vec, norm_in is not None)), x, 1)
    cols = _cols(True)[0]
    xf, ln, eps = norm_in if norm_in is not None else (NULL, NULL, 0.0)
    fn((T * k, -(-N // cols)), (32 * GEMM_WARPS,),
       (logits, x, w, ids, weights, out, np.int32(N), np.int32(K), np.int32(E), np.int32(k),
        np.int32(bool(norm_topk_prob)), np.int32(cols), xf, ln, np.float32(eps)), shared_mem=smem)


moe_route_gemm_rows = FusedKernel("moe_route_gemm_rows", _route_gemm_rows_twin, _route_gemm_rows_cuda,
                                  writes=(3, 4, 5))


# ---- moe_norm_route_gemm_rows: h = RMSNorm(x) * ln, then moe_route_gemm_rows of h ----------------------------
def _norm_route_gemm_rows_twin(logits: np.ndarray, x: np.ndarray, ln: np.ndarray, h: np.ndarray, w: np.ndarray,
                               ids: np.ndarray, weights: np.ndarray, out: np.ndarray, norm_topk_prob: bool,
                               eps: float) -> None:
    add_rms_norm.twin(x, None, None, ln, h, eps)
    _route_gemm_rows_twin(logits, h, w, ids, weights, out, norm_topk_prob)


def _norm_route_gemm_rows_cuda(cp: Any, logits: Any, x: Any, ln: Any, h: Any, w: Any, ids: Any, weights: Any,
                               out: Any, norm_topk_prob: bool, eps: float) -> None:
    """Every block norms the token's row itself (h is left unwritten): the o projection before it only adds into x,
    with no grid-wide norm tail (the dense layers' consumer norm, VT_CONSUMER_NORM)."""
    K = x.shape[1]
    # the kernel reads x's row t and ln as float4s at row stride K
    if (x.dtype != np.float32 or ln.dtype != np.float32 or ln.shape != (K,) or h.shape != x.shape or K % 4
            or not (x.flags.c_contiguous and ln.flags.c_contiguous)):
        raise ValueError(f"moe_norm_route_gemm_rows: x {x.shape} {x.dtype} (float32, K % 4 == 0), norm weight "
                         f"{ln.shape} {ln.dtype}, h {h.shape}, each contiguous")
    _route_gemm_rows_cuda(cp, logits, h, w, ids, weights, out, norm_topk_prob, norm_in=(x, ln, eps))


moe_norm_route_gemm_rows = FusedKernel("moe_norm_route_gemm_rows", _norm_route_gemm_rows_twin,
                                       _norm_route_gemm_rows_cuda, writes=(3, 5, 6, 7))


# ---- moe_combine: out [T, H] = sum over each token's choices (ascending expert) of weight * y ---------------
def _combine_twin(y: np.ndarray, ids: np.ndarray, weights: np.ndarray, out: np.ndarray) -> None:
    T, k = ids.shape
    ys = y.reshape(T, k, -1)
    order = np.argsort(ids, axis=-1, kind="stable")
    at = np.arange(T)
    acc = np.zeros(out.shape, np.float32)
    for r in range(k):
        j = order[:, r]
        acc += weights[at, j][:, None] * ys[at, j]
    out[...] = acc


def _combine_cuda(cp: Any, y: Any, ids: Any, weights: Any, out: Any) -> None:
    T, H = out.shape
    if T:
        threads = min(256, -(-H // 32) * 32)
        function(cp, Instance("moe.cu", "vt::moe_combine"))(
            (T, -(-H // threads)), (threads,), (y, ids, weights, out, np.int32(H), np.int32(ids.shape[1])))


moe_combine = FusedKernel("moe_combine", _combine_twin, _combine_cuda, writes=(3,))


# ---- moe_combine_add_rms_norm: x += moe_combine(y); h = narrow(rmsnorm(x) * w) -------------------------------
def _combine_norm_twin(y: np.ndarray, ids: np.ndarray, weights: np.ndarray, x: np.ndarray, w: np.ndarray,
                       h: np.ndarray, eps: float) -> None:
    combined = np.empty(x.shape, np.float32)  # a host temporary: the kernel keeps it in registers
    _combine_twin(y, ids, weights, combined)
    add_rms_norm.twin(x, combined, None, w, h, eps)


def _combine_norm_cuda(cp: Any, y: Any, ids: Any, weights: Any, x: Any, w: Any, h: Any, eps: float) -> None:
    T, H = x.shape
    if H % 4 or H > 4 * NORM_VECS * 1024:
        raise ValueError(f"moe_combine_add_rms_norm: hidden size {H} must be a multiple of 4 and at most "
                         f"{4 * NORM_VECS * 1024}")
    if T:
        function(cp, Instance("moe.cu", f"vt::moe_combine_add_rms_norm<{ctype(h.dtype)}>"))(
            (T,), (norm_threads(H),), (y, ids, weights, x, w, h, np.int32(H), np.int32(ids.shape[1]),
                                       np.float32(eps)))


moe_combine_add_rms_norm = FusedKernel("moe_combine_add_rms_norm", _combine_norm_twin, _combine_norm_cuda,
                                       writes=(3, 5))
