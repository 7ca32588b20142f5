"""The model's remaining xp kernels, written once against the array namespace `xp` (NumPy or CuPy): the
parts with no fused kernel yet (the eager prefill attention, tensor parallelism's
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


def gather_rows(xp: Any, x: Any, rows: Any, out: Any) -> None:
    xp.take(x, rows, axis=0, out=out)


def copy_block(xp: Any, cache: Any, src: int, dst: int) -> None:
    """One KV block's contents into another (a forked sample's own copy of its prompt's partial block)."""
    cache[dst] = cache[src]
