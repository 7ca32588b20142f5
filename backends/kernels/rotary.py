"""q/k RMSNorm + rotary + the KV-cache write (rotary.cu), beside its NumPy twin."""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import HEAD_DIMS, NULL, FusedKernel, ctype
from vt.dtypes import narrow_host

CI_INSTANCES = [Instance("rotary.cu", f"vt::qk_norm_rope_store<{t}, {hd}>")
                for t in ("float", "vt::bf16", "vt::f16") for hd in HEAD_DIMS]


def _twin(qkv: np.ndarray, bias: np.ndarray | None, w: np.ndarray, rope: np.ndarray, positions: np.ndarray,
          slots: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, q_out: np.ndarray, has_norm: bool,
          eps: float) -> None:
    T, nh, hd = q_out.shape
    nkv = k_cache.shape[2]
    x = qkv if bias is None else qkv + bias
    heads = x[:, : (nh + nkv) * hd].reshape(T, nh + nkv, hd)
    if has_norm:
        y = heads / np.sqrt(np.mean(heads * heads, axis=-1, keepdims=True) + np.float32(eps)) * w
    else:
        y = heads * w
    half = hd // 2
    rot = np.concatenate([y[..., half:], y[..., :half]], axis=-1)  # rotate_half; its sign is in the table's sin
    cos_sin = rope[positions]
    y = y * cos_sin[:, None, :hd] + rot * cos_sin[:, None, hd:]
    q_out[...] = y[:, :nh]
    live = slots >= 0  # a padding row (slot -1) writes nothing
    k_cache.reshape(-1, nkv, hd)[slots[live]] = narrow_host(y[live, nh:], k_cache.dtype)
    v_cache.reshape(-1, nkv, hd)[slots[live]] = narrow_host(x[live, (nh + nkv) * hd :].reshape(-1, nkv, hd),
                                                            v_cache.dtype)


def _cuda(cp: Any, qkv: Any, bias: Any, w: Any, rope: Any, positions: Any, slots: Any, k_cache: Any, v_cache: Any,
          q_out: Any, has_norm: bool, eps: float) -> None:
    T, nh, hd = q_out.shape
    nkv = k_cache.shape[2]
    fn = function(cp, Instance("rotary.cu", f"vt::qk_norm_rope_store<{ctype(k_cache.dtype)}, {hd}>"))
    warps = 4
    args = (qkv, NULL if bias is None else bias, w, rope, positions, slots, k_cache, v_cache, q_out, np.int32(nh),
            np.int32(nkv), np.int32(bool(has_norm)), np.float32(eps))
    fn((T, -(-(nh + 2 * nkv) // warps)), (32 * warps,), args)


qk_norm_rope_store = FusedKernel("qk_norm_rope_store", _twin, _cuda, writes=(6, 7, 8))
