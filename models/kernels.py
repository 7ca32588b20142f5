"""The model's remaining xp kernels, written once against the array namespace `xp` (NumPy or CuPy): the
parts with no fused kernel yet (MoE routing and experts, the eager prefill attention, tensor parallelism's
vocabulary shards, row gathers). The fused operations (norms, rotary and the KV write, SiLU, paged decode
attention, GEMMs) are the Backend's named ops (vt/ops.py) from the kernel library (backends/kernels/).

Every kernel writes into caller-provided outputs and takes Tensors (as arrays) and scalars, so a launch
can be recorded into a graph. Kernels that run inside a decode graph use static shapes only (masks,
never data-dependent slicing); `attention_prefill` is eager-only and may loop over host metadata. GEMMs
go through `xp.matmul`, the one entry point a backend can make capture-safe.
"""

from __future__ import annotations

from typing import Any

from backends.kernels.convert import narrow, widen

PREFILL_CHUNK = 512



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










def _softmax_rows(xp: Any, s: Any) -> Any:
    s = s - s.max(axis=-1, keepdims=True)
    e = xp.exp(s)
    return e / e.sum(axis=-1, keepdims=True)



def attention_prefill(xp: Any, q: Any, k_cache: Any, v_cache: Any, out: Any,
                      seqs: list[tuple[int, int, int, list[int]]]) -> None:
    """Eager-only causal attention for prefill. seqs: (first row in q, num new tokens, position of the
    first new token, block-table row) per sequence; keys come from the cache (already written).
    q [T, nh, hd] float32, pre-scaled; out [T, nh, hd] in its dtype (the o projection's operand)."""
    bs, nkv, hd = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    nh = out.shape[1]
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
            out[row0 + c0 : row0 + c0 + m] = narrow(xp, o.transpose(2, 0, 1, 3).reshape(m, nh, hd), out.dtype)


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
