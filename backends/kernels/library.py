"""The op table a backend launches models' named operations from (vt/ops.py): one entry per operation."""

from __future__ import annotations

import types
from typing import Any

from backends.kernels.activation import PAIR_COLS, silu_mul
from backends.kernels.decode_attention import (
    paged_decode_attention,
    paged_decode_attention_rope,
    paged_decode_attention_rows,
)
from backends.kernels.moe import (
    moe_combine,
    moe_combine_add_rms_norm,
    moe_gemm,
    moe_gemm_rows,
    moe_group,
    moe_norm_route_gemm_rows,
    moe_route,
    moe_route_gemm_rows,
)
from backends.kernels.norm import add_rms_norm, embed
from backends.kernels.prefill_attention import paged_prefill_attention
from backends.kernels.rotary import qk_norm_rope_store
from backends.kernels.rows_attention import paged_rows_attention
from backends.kernels.tokens import feed_tokens, keep_sampled, mask_tokens


def matmul(xp: Any, a: Any, b: Any, out: Any) -> None:
    """A GEMM through the backend's capture-safe matmul (cuBLAS on CUDA, backends/gemm.py)."""
    xp.matmul(a, b, out=out)


matmul.writes = (2,)  # type: ignore[attr-defined]


def gemm_add_rms_norm(xp: Any, a: Any, b: Any, out: Any, x: Any, w: Any, h: Any, eps: float) -> None:
    """out = a @ b; x += out; h = RMSNorm(x) * w. On CUDA as the shape's norm plan picked (one launch where the
    skinny GEMM's epilogue runs the norm; backends/cublaslt.py); anywhere else the GEMM and then add_rms_norm."""
    fused = getattr(xp, "gemm_add_rms_norm", None)
    if fused is not None and fused(a, b, out, x, w, h, eps):
        return
    xp.matmul(a, b, out=out)
    add_rms_norm(xp, x, out, None, w, h, eps=eps)


gemm_add_rms_norm.writes = (2, 3, 5)  # type: ignore[attr-defined]


def gemm_silu_mul(xp: Any, a: Any, b: Any, gate_up: Any, act: Any, group: int) -> None:
    """gate_up = a @ b over gate/up weights interleaved `group` columns at a time; act = SiLU(gate) x up. On CUDA,
    with pairs of PAIR_COLS, as the shape's SwiGLU plan picked (one launch where the skinny GEMM's epilogue writes
    act, leaving gate_up unwritten); anywhere else the GEMM and then silu_mul."""
    fused = getattr(xp, "gemm_silu_mul", None) if group == PAIR_COLS else None
    if fused is not None and fused(a, b, gate_up, act):
        return
    xp.matmul(a, b, out=gate_up)
    silu_mul(xp, gate_up, act, group=group)


gemm_silu_mul.writes = (2, 3)  # type: ignore[attr-defined]


# ---- the consumer's norm (VT_CONSUMER_NORM): the o/down GEMM adds into x, and the GEMM reading the norm computes it
def gemm_add(xp: Any, a: Any, b: Any, out: Any, x: Any) -> None:
    """out = a @ b; x += out. On CUDA as the shape's resid plan picked (one launch where the skinny GEMM adds a
    column tile's sums into x as they are final, leaving out unwritten); anywhere else the GEMM and then the add."""
    fused = getattr(xp, "gemm_add", None)
    if fused is not None and fused(a, b, out, x):
        return
    xp.matmul(a, b, out=out)
    xp.add(x, out, out=x)


gemm_add.writes = (2, 3)  # type: ignore[attr-defined]


def rms_norm_gemm(xp: Any, x: Any, w: Any, h: Any, b: Any, out: Any, eps: float) -> None:
    """h = RMSNorm(x) * w (narrowed to b's dtype); out = h @ b. On CUDA as the shape's norm_in plan picked (one
    launch where the skinny GEMM computes h itself, leaving h unwritten); anywhere else the norm and then the GEMM."""
    fused = getattr(xp, "rms_norm_gemm", None)
    if fused is not None and fused(x, w, h, b, out, None, eps):
        return
    add_rms_norm(xp, x, None, None, w, h, eps=eps)
    xp.matmul(h, b, out=out)


rms_norm_gemm.writes = (2, 4)  # type: ignore[attr-defined]


def rms_norm_gemm_silu_mul(xp: Any, x: Any, w: Any, h: Any, b: Any, gate_up: Any, act: Any, group: int,
                           eps: float) -> None:
    """h = RMSNorm(x) * w; then gemm_silu_mul(h, b, gate_up, act). On CUDA, with pairs of PAIR_COLS, as the shape's
    norm_in_swiglu plan picked (one launch: the skinny GEMM's prologue computes h and its epilogue writes act,
    leaving h and gate_up unwritten); anywhere else the norm and then gemm_silu_mul."""
    fused = getattr(xp, "rms_norm_gemm", None) if group == PAIR_COLS else None
    if fused is not None and fused(x, w, h, b, gate_up, act, eps):
        return
    add_rms_norm(xp, x, None, None, w, h, eps=eps)
    gemm_silu_mul(xp, h, b, gate_up, act, group)


rms_norm_gemm_silu_mul.writes = (2, 4, 5)  # type: ignore[attr-defined]

LIBRARY = types.SimpleNamespace(embed=embed, add_rms_norm=add_rms_norm, qk_norm_rope_store=qk_norm_rope_store,
                                silu_mul=silu_mul, paged_decode_attention=paged_decode_attention,
                                paged_decode_attention_rope=paged_decode_attention_rope,
                                paged_decode_attention_rows=paged_decode_attention_rows,
                                paged_rows_attention=paged_rows_attention,
                                paged_prefill_attention=paged_prefill_attention, gemm=matmul, moe_route=moe_route,
                                moe_group=moe_group, moe_gemm=moe_gemm, moe_combine=moe_combine,
                                moe_gemm_rows=moe_gemm_rows, moe_route_gemm_rows=moe_route_gemm_rows,
                                moe_norm_route_gemm_rows=moe_norm_route_gemm_rows,
                                moe_combine_add_rms_norm=moe_combine_add_rms_norm,
                                feed_tokens=feed_tokens, keep_sampled=keep_sampled, mask_tokens=mask_tokens,
                                gemm_add_rms_norm=gemm_add_rms_norm, gemm_silu_mul=gemm_silu_mul,
                                gemm_add=gemm_add, rms_norm_gemm=rms_norm_gemm,
                                rms_norm_gemm_silu_mul=rms_norm_gemm_silu_mul)
