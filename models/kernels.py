"""The model's remaining xp kernels, written once against the array namespace `xp` (NumPy or CuPy): the
parts with no fused kernel (tensor parallelism's vocabulary shards, row gathers, a block copy). The fused
operations (norms, rotary and the KV write, SiLU, paged decode and prefill attention, GEMMs) are the Backend's
named ops (vt/ops.py) from the kernel library (backends/kernels/).

Every kernel writes into caller-provided outputs and takes Tensors (as arrays) and scalars, so a launch
can be recorded into a graph; those that run inside a decode graph use static shapes only (masks, never
data-dependent slicing).
"""

from __future__ import annotations

from typing import Any

from backends.kernels.convert import widen


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


def gather_rows(xp: Any, x: Any, rows: Any, out: Any) -> None:
    xp.take(x, rows, axis=0, out=out)


def copy_block(xp: Any, cache: Any, src: int, dst: int) -> None:
    """One KV block's contents into another (a forked sample's own copy of its prompt's partial block)."""
    cache[dst] = cache[src]
