"""Model kernels, written once against the array namespace `xp` (NumPy or CuPy).

Every kernel writes into caller-provided outputs and takes Tensors (as arrays) and scalars, so a
launch can be recorded into a graph. Kernels that run inside a decode graph use static shapes only
(masks, never data-dependent slicing); `attention_prefill` is eager-only and may loop over host
metadata. GEMMs go through `xp.matmul`, the one entry point a backend can make capture-safe.
Activations are float32; weights and the KV cache may be held in bf16 or fp16 (`widen` / `narrow`).
"""

from __future__ import annotations

from typing import Any

from backends.kernels.convert import narrow, widen

PREFILL_CHUNK = 512


def embed(xp: Any, table: Any, ids: Any, out: Any) -> None:
    if table.dtype == out.dtype:
        xp.take(table, ids, axis=0, out=out)
    else:
        out[...] = widen(xp, xp.take(table, ids, axis=0))


def embed_shard(xp: Any, table: Any, ids: Any, out: Any, start: int) -> None:
    """Vocabulary-parallel embedding: the rows of ids in [start, start + len(table)) from this rank's slice,
    zeros for the rest (the ranks' all-reduce then holds every row exactly once)."""
    local = ids - start
    hit = (local >= 0) & (local < table.shape[0])
    rows = widen(xp, xp.take(table, xp.where(hit, local, 0), axis=0))
    out[...] = xp.where(hit[:, None], rows, 0)


def copy_columns(xp: Any, src: Any, out: Any) -> None:
    """out = src's first out.shape[1] columns (the gathered logits without the vocabulary's padding)."""
    out[...] = src[:, : out.shape[1]]


def rmsnorm(xp: Any, x: Any, w: Any, out: Any, eps: float) -> None:
    """HF Qwen3RMSNorm: x / sqrt(mean(x^2) + eps), then * weight (float32 throughout)."""
    var = xp.mean(x * x, axis=-1, keepdims=True)
    xp.divide(x, xp.sqrt(var + eps), out=out)
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


def step_meta(xp: Any, rope_table: Any, positions: Any, slot_mapping: Any, rope: Any, write_slots: Any,
              trash_slot: int) -> None:
    """Once per step, for every layer: each token's rope row (cos | signed sin) and its KV write slot.
    Slot -1 (a padding row) writes to the trash block, which no block table names: padding rows are
    inert without a data-dependent branch."""
    xp.take(rope_table, positions, axis=0, out=rope)
    xp.copyto(write_slots, xp.where(slot_mapping >= 0, slot_mapping, trash_slot))


def decode_meta(xp: Any, block_tables: Any, token_row: Any, positions: Any, kv_index: Any, visible: Any,
                block_size: int) -> None:
    """Once per decode step: for each token, every key position of its block-table row as a row of the
    cache seen as [slots * nkv, hd], head-major (kv_index [T, nkv, L]), and which key positions the
    token sees (visible [T, L]: position <= its own)."""
    T, nkv, L = kv_index.shape
    blocks = xp.take(block_tables, token_row, axis=0)  # [T, W]
    slots = ((blocks * block_size)[:, :, None] + xp.arange(block_size)).reshape(T, 1, L)
    xp.add(slots * nkv, xp.arange(nkv)[None, :, None], out=kv_index)
    xp.less_equal(xp.arange(L)[None, :], positions[:, None], out=visible)


def qk_norm_rope(xp: Any, qkv: Any, w: Any, rope: Any, out: Any, eps: float, norm: bool = True) -> None:
    """Qwen3's per-head RMSNorm of q and k (over head_dim; w [nh + nkv, hd] holds q_norm per q head,
    pre-multiplied by the attention scale, and k_norm per k head), then RoPE, straight from the fused
    qkv projection into out [T, nh + nkv, hd]. Without norm (Qwen2, Llama) w only scales q."""
    T, heads, hd = out.shape
    if norm:
        rmsnorm(xp, qkv[:, : heads * hd].reshape(T, heads, hd), w, out, eps)
    else:
        xp.multiply(qkv[:, : heads * hd].reshape(T, heads, hd), w, out=out)
    half = hd // 2
    rot = xp.concatenate([out[..., half:], out[..., :half]], axis=-1)  # rotate_half, its sign in the sin
    xp.add(out * rope[:, None, :hd], rot * rope[:, None, hd:], out=out)


def store_kv(xp: Any, qkv: Any, qk: Any, k_cache: Any, v_cache: Any, write_slots: Any) -> None:
    """Write the new keys (normed and rotated, in qk) and values (raw, in qkv) at their slots."""
    nkv, hd = k_cache.shape[2], k_cache.shape[3]
    T, heads = qk.shape[0], qk.shape[1]
    k_cache.reshape(-1, nkv, hd)[write_slots] = narrow(xp, qk[:, heads - nkv :], k_cache.dtype)
    v_cache.reshape(-1, nkv, hd)[write_slots] = narrow(xp, qkv[:, heads * hd :].reshape(T, nkv, hd), v_cache.dtype)


def _softmax_rows(xp: Any, s: Any) -> Any:
    s = s - s.max(axis=-1, keepdims=True)
    e = xp.exp(s)
    return e / e.sum(axis=-1, keepdims=True)


def attention_decode(xp: Any, qk: Any, k_cache: Any, v_cache: Any, kv_index: Any, visible: Any, out: Any) -> None:
    """Static-shape paged attention: token t attends the keys kv_index[t] names, where visible[t] allows.
    qk [T, nh + nkv, hd] (q pre-scaled, then k); caches [blocks, bs, nkv, hd]; out [T, nh, hd].
    Keys and values are gathered head-major, so both GEMMs take them as they are: only the small
    arrays (q, the scores) are ever transposed."""
    T, nh, hd = out.shape
    nkv = k_cache.shape[2]
    g = nh // nkv
    k = widen(xp, xp.take(k_cache.reshape(-1, hd), kv_index, axis=0))  # [T, nkv, L, hd]
    v = widen(xp, xp.take(v_cache.reshape(-1, hd), kv_index, axis=0))
    q_t = qk[:, :nh].reshape(T, nkv, g, hd).transpose(0, 1, 3, 2)  # [T, nkv, hd, g]
    scores = xp.ascontiguousarray(xp.matmul(k, q_t).transpose(0, 1, 3, 2))  # [T, nkv, g, L]
    p = _softmax_rows(xp, xp.where(visible[:, None, None, :], scores, -xp.inf))
    # Hidden slots (recycled blocks, the trash block) may hold anything, NaN included, and 0 * NaN is
    # NaN: zero their values so one request's garbage never reaches another's output.
    v = xp.where(visible[:, None, :, None], v, 0.0)
    xp.matmul(p, v, out=out.reshape(T, nkv, g, hd))


def attention_prefill(xp: Any, qk: Any, k_cache: Any, v_cache: Any, out: Any,
                      seqs: list[tuple[int, int, int, list[int]]]) -> None:
    """Eager-only causal attention for prefill. seqs: (first row in q, num new tokens, position of the
    first new token, block-table row) per sequence; keys come from the cache (already written).
    qk as in attention_decode (q pre-scaled)."""
    bs, nkv, hd = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    nh = out.shape[1]
    q = qk[:, :nh]
    for row0, n, pos0, table in seqs:
        L = pos0 + n
        blocks = xp.asarray(table[: (L + bs - 1) // bs])
        k = widen(xp, k_cache[blocks].reshape(-1, nkv, hd)[:L])  # [L, nkv, hd]
        v = widen(xp, v_cache[blocks].reshape(-1, nkv, hd)[:L])
        kt, vt = k.transpose(1, 2, 0)[:, None], v.transpose(1, 0, 2)[:, None]
        for c0 in range(0, n, PREFILL_CHUNK):  # query chunks bound the [.., chunk, L] score tensor
            m = min(PREFILL_CHUNK, n - c0)
            qg = q[row0 + c0 : row0 + c0 + m].reshape(m, nkv, nh // nkv, hd).transpose(1, 2, 0, 3)
            scores = xp.matmul(qg, kt)  # [nkv, g, m, L]
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


def gather_rows(xp: Any, x: Any, rows: Any, out: Any) -> None:
    xp.take(x, rows, axis=0, out=out)


def copy_block(xp: Any, cache: Any, src: int, dst: int) -> None:
    """One KV block's contents into another (a forked sample's own copy of its prompt's partial block)."""
    cache[dst] = cache[src]
