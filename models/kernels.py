"""Model kernels, written once against the array namespace `xp` (NumPy or CuPy).

Every kernel writes into caller-provided outputs and takes Tensors (as arrays) and scalars, so a
launch can be recorded into a graph. Kernels that run inside a decode graph use static shapes only
(masks, never data-dependent slicing); `attention_prefill` is eager-only and may loop over host
metadata. GEMMs go through `xp.matmul`, the one entry point a backend can make capture-safe.
"""

from __future__ import annotations

from typing import Any

PREFILL_CHUNK = 512


def embed(xp: Any, table: Any, ids: Any, out: Any) -> None:
    xp.take(table, ids, axis=0, out=out)


def rmsnorm(xp: Any, x: Any, w: Any, out: Any, eps: float) -> None:
    """HF Qwen3RMSNorm: x * rsqrt(mean(x^2) + eps), then * weight (float32 throughout)."""
    var = xp.mean(x * x, axis=-1, keepdims=True)
    xp.multiply(x, 1.0 / xp.sqrt(var + eps), out=out)
    xp.multiply(out, w, out=out)


def matmul(xp: Any, a: Any, b: Any, out: Any) -> None:
    xp.matmul(a, b, out=out)


def add(xp: Any, a: Any, b: Any, out: Any) -> None:
    xp.add(a, b, out=out)


def silu_mul(xp: Any, gate_up: Any, out: Any) -> None:
    """SwiGLU: silu(gate) * up, with gate and up fused as [..., 2I]."""
    n = out.shape[-1]
    g = gate_up[..., :n]
    xp.multiply(g / (1.0 + xp.exp(-g)), gate_up[..., n:], out=out)


def rope(xp: Any, x: Any, cos: Any, sin: Any, positions: Any, out: Any) -> None:
    """Rotary embedding (rotate_half form) on x [T, heads, hd] at the given positions."""
    c = xp.take(cos, positions, axis=0)[:, None, :]
    s = xp.take(sin, positions, axis=0)[:, None, :]
    half = x.shape[-1] // 2
    rot = xp.concatenate([-x[..., half:], x[..., :half]], axis=-1)
    xp.add(x * c, rot * s, out=out)


def head_norm_rope(xp: Any, x: Any, w: Any, cos: Any, sin: Any, positions: Any, out: Any, eps: float) -> None:
    """Qwen3's per-head q/k RMSNorm (over head_dim), then RoPE."""
    rmsnorm(xp, x, w, out, eps)
    rope(xp, out, cos, sin, positions, out)


def store_kv(xp: Any, k: Any, v: Any, k_cache: Any, v_cache: Any, slots: Any, trash_slot: int) -> None:
    """Write new keys/values at their slots. Slot -1 (a padding row) goes to the trash block, which
    no block table names: padding rows are inert without a data-dependent branch."""
    idx = xp.where(slots >= 0, slots, trash_slot)
    kf = k_cache.reshape(-1, *k_cache.shape[2:])
    vf = v_cache.reshape(-1, *v_cache.shape[2:])
    kf[idx] = k
    vf[idx] = v


def _softmax_rows(xp: Any, s: Any) -> Any:
    s = s - s.max(axis=-1, keepdims=True)
    e = xp.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def attention_decode(xp: Any, q: Any, k_cache: Any, v_cache: Any, token_row: Any, block_tables: Any,
                     positions: Any, out: Any, scale: float) -> None:
    """Static-shape paged attention: token t attends keys 0..positions[t] of block-table row token_row[t].
    q [T, nh, hd]; caches [blocks, bs, nkv, hd]; block_tables [R, W]; out [T, nh, hd]."""
    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    W = block_tables.shape[1]
    blocks = xp.take(block_tables, token_row, axis=0)  # [T, W]
    slots = (blocks[:, :, None] * bs + xp.arange(bs)[None, None, :]).reshape(T, W * bs)
    k = xp.take(k_cache.reshape(-1, nkv, hd), slots, axis=0)  # [T, L, nkv, hd]
    v = xp.take(v_cache.reshape(-1, nkv, hd), slots, axis=0)
    qg = q.reshape(T, nkv, nh // nkv, hd)
    scores = xp.matmul(qg, k.transpose(0, 2, 3, 1)) * scale  # [T, nkv, g, L]
    visible = xp.arange(W * bs)[None, :] <= positions[:, None]  # [T, L]
    scores = xp.where(visible[:, None, None, :], scores, -xp.inf)
    p = _softmax_rows(xp, scores)
    # Hidden slots (recycled blocks, the trash block) may hold anything, NaN included, and 0 * NaN is
    # NaN: zero their values so one request's garbage never reaches another's output.
    v = xp.where(visible[:, :, None, None], v, 0.0)
    out[...] = xp.matmul(p, v.transpose(0, 2, 1, 3)).reshape(T, nh, hd)


def attention_prefill(xp: Any, q: Any, k_cache: Any, v_cache: Any, out: Any, scale: float,
                      seqs: list[tuple[int, int, int, list[int]]]) -> None:
    """Eager-only causal attention for prefill. seqs: (first row in q, num new tokens, position of the
    first new token, block-table row) per sequence; keys come from the cache (already written)."""
    bs, nkv, hd = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    nh = q.shape[1]
    for row0, n, pos0, table in seqs:
        L = pos0 + n
        blocks = xp.asarray(table[: (L + bs - 1) // bs])
        k = k_cache[blocks].reshape(-1, nkv, hd)[:L]  # [L, nkv, hd]
        v = v_cache[blocks].reshape(-1, nkv, hd)[:L]
        kt, vt = k.transpose(1, 2, 0)[:, None], v.transpose(1, 0, 2)[:, None]
        for c0 in range(0, n, PREFILL_CHUNK):  # query chunks bound the [.., chunk, L] score tensor
            m = min(PREFILL_CHUNK, n - c0)
            qg = q[row0 + c0 : row0 + c0 + m].reshape(m, nkv, nh // nkv, hd).transpose(1, 2, 0, 3)
            scores = xp.matmul(qg, kt) * scale  # [nkv, g, m, L]
            causal = xp.arange(L)[None, :] <= (pos0 + c0 + xp.arange(m))[:, None]
            p = _softmax_rows(xp, xp.where(causal, scores, -xp.inf))
            o = xp.matmul(p, vt)  # [nkv, g, m, hd]
            out[row0 + c0 : row0 + c0 + m] = o.transpose(2, 0, 1, 3).reshape(m, nh, hd)


def moe_route(xp: Any, logits: Any, out: Any, top_k: int, norm_topk_prob: bool) -> None:
    """Dense routing weights [T, E]: softmax probs at each token's top-k experts, zero elsewhere."""
    probs = _softmax_rows(xp, logits)
    experts = xp.arange(probs.shape[-1])[None, :]
    work, picked = probs.copy(), xp.zeros_like(probs)
    for _ in range(top_k):  # top-k by repeated argmax: static shapes, no sort, capture-safe
        hit = experts == xp.argmax(work, axis=-1)[:, None]
        picked = xp.where(hit, probs, picked)
        work = xp.where(hit, -1.0, work)
    if norm_topk_prob:
        picked = picked / picked.sum(axis=-1, keepdims=True)
    out[...] = picked


def moe_experts(xp: Any, x: Any, w_gate_up: Any, w_down: Any, route: Any, out: Any) -> None:
    """Every expert on every token, combined by the dense routing weights (zero for unrouted experts):
    static shapes, so the step can be captured. w_gate_up [E, H, 2I]; w_down [E, I, H]."""
    gu = xp.matmul(x[None], w_gate_up)  # [E, T, 2I]
    n = w_down.shape[1]
    g = gu[..., :n]
    h = g / (1.0 + xp.exp(-g)) * gu[..., n:]
    y = xp.matmul(h, w_down)  # [E, T, H]
    out[...] = 0
    for e in range(y.shape[0]):  # expert order, as HF accumulates
        out += route[:, e : e + 1] * y[e]


def split_qkv(xp: Any, qkv: Any, q: Any, k: Any, v: Any) -> None:
    T, nh, hd = q.shape
    nkv = k.shape[1]
    q[...] = qkv[:, : nh * hd].reshape(T, nh, hd)
    k[...] = qkv[:, nh * hd : (nh + nkv) * hd].reshape(T, nkv, hd)
    v[...] = qkv[:, (nh + nkv) * hd :].reshape(T, nkv, hd)


def gather_rows(xp: Any, x: Any, rows: Any, out: Any) -> None:
    xp.take(x, rows, axis=0, out=out)
