"""Tensor-core attention for a step whose rows share sequences (rows_attention.cu), beside its NumPy twin.

A prefix-cache hit's tail runs whole as a decode step, a row a token: the decode kernel would read the sequence's
keys once a row on CUDA cores (H200, 0.6B, 16 rows over 1,024 keys: attention 0.78 of a 2.03 ms step). Here a
block serves one KV head for 64 query rows (its G query heads times 64 / G tokens) on tensor cores, split along the
context into partitions of its own rule (`partition_size`: fewer blocks work than in the decode kernel's grid) that
the decode kernel's reduce combines. The grid has a block a token (its slowest dimension, so a run's blocks are
dispatched ahead of those that leave at once); only a segment's lead works (a run of one
token_row, at most 64 / G tokens of it), so the runs of a step (a tail, the decode rows beside it, the padding) run
side by side. The twin follows the kernel's numerics: q and the softmax numerators P rounded
to the cache dtype before their products, the online softmax over KEY_TILE-key tiles from each partition's start,
the partitions combined at their common max. A 16-bit cache only (no float32 mma): the decoder takes the plain
kernel for a float32 one.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.decode_attention import MAX_GRID_Y, MAX_PARTITIONS, _partitions, _reduce, attend_in_partitions
from backends.kernels.fused import HEAD_DIMS, NULL, FusedKernel, ctype
from vt.dtypes import narrow_host, widen_host
from vt.errors import EngineInvariantError

ROWS = 64  # rows_attention.cu ROWS_MMA_ROWS: query rows a block serves
KEY_TILE = 64  # ROWS_MMA_BN
THREADS = 128  # ROWS_MMA_THREADS
MIN_PARTITION = 128  # keys by default: two tiles, so a block's next tile is in flight while one is computed
CI_INSTANCES = [Instance("rows_attention.cu", f"vt::paged_rows_attention<{kv}, {kv}, {hd}>")
                for kv in ("vt::bf16", "vt::f16") for hd in HEAD_DIMS]


def tokens_a_block(group: int) -> int:
    """Consecutive tokens a block serves at `group` query heads a KV head: its 64 rows, a row a (token, head)."""
    return max(1, ROWS // group)


def partition_size(num_tokens: int, num_kv_heads: int, group: int, max_context: int) -> int:
    """Keys per partition, from static shapes only (a graph's launch is fixed): as many splits of the longest context
    as keep about VT_ROWS_TARGET_BLOCKS blocks busy (256 by default: 132 SMs on the H200, two blocks each), in
    multiples of KEY_TILE keys, never under VT_ROWS_MIN_PARTITION (MIN_PARTITION by default, or one tile)."""
    from vt.env import flags

    blocks = -(-num_tokens // tokens_a_block(group)) * num_kv_heads
    keys = -(-max_context // max(1, flags().rows_target_blocks // blocks))
    return max(flags().rows_min_partition, -(-keys // KEY_TILE) * KEY_TILE)


def num_partitions(num_tokens: int, num_kv_heads: int, group: int, table_width: int, block_size: int) -> int:
    """The launch's static third dimension: partitions of the longest context a table of this width holds."""
    ctx = table_width * block_size
    return -(-ctx // partition_size(num_tokens, num_kv_heads, group, ctx))


def _check(q: Any, k_cache: Any, part_o: Any, part_ml: Any, block_tables: Any) -> tuple[int, int]:
    """(P, keys a partition), or EngineInvariantError for what the kernel cannot serve."""
    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    group = nh // nkv
    if k_cache.dtype == np.float32 or group > ROWS or T > MAX_GRID_Y:
        raise EngineInvariantError(f"paged_rows_attention: a 16-bit cache (not {k_cache.dtype}), at most {ROWS} query "
                                   f"heads a KV head (not {group}), at most {MAX_GRID_Y} tokens (not {T})")
    if bs & (bs - 1) or k_cache.shape[0] >= 2**31:  # a key's block by shifts, its id in 32 bits
        raise EngineInvariantError(f"paged_rows_attention: block size {bs} (a power of two) and {k_cache.shape[0]} "
                                   "cache blocks (fewer than 2**31)")
    keys = block_tables.shape[1] * bs
    P = _partitions(part_o, part_ml)
    if P > MAX_PARTITIONS:
        raise EngineInvariantError(f"{P} partitions: the reduce kernel holds at most {MAX_PARTITIONS}")
    part = keys if P == 1 else partition_size(T, nkv, group, keys)
    if P * part < keys:  # the keys past P partitions would be dropped, silently, by the kernel and the twin alike
        raise EngineInvariantError(f"paged_rows_attention: partials for {P} partitions of {part} keys, short of the "
                                   f"table's {keys} (rows_attention.num_partitions sizes them)")
    return P, part


def _twin(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray, token_row: np.ndarray,
          positions: np.ndarray, out: np.ndarray, part_o: np.ndarray | None, part_ml: np.ndarray | None) -> None:
    _, part = _check(q, k_cache, part_o, part_ml, block_tables)
    rounded = widen_host(narrow_host(q, k_cache.dtype))  # the mma's A operand
    attend_in_partitions(rounded, k_cache, v_cache, block_tables, token_row, positions, out, part_o, part_ml, part,
                         KEY_TILE, k_cache.dtype)


def _cuda(cp: Any, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, token_row: Any, positions: Any, out: Any,
          part_o: Any, part_ml: Any) -> None:
    P, part = _check(q, k_cache, part_o, part_ml, block_tables)
    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    W = block_tables.shape[1]
    fn = function(cp, Instance("rows_attention.cu",
                               f"vt::paged_rows_attention<{ctype(k_cache.dtype)}, {ctype(out.dtype)}, {hd}>"))
    smem = 2 * 2 * KEY_TILE * (hd + 8) * 2  # two stages of K and V tiles
    if smem > 48 << 10:
        fn.max_dynamic_shared_size_bytes = smem
    fn((nkv, P, T), (THREADS,), (q, k_cache, v_cache, block_tables, token_row, positions, out,
                                 NULL if part_o is None else part_o, NULL if part_ml is None else part_ml, np.int32(nh),
                                 np.int32(bs), np.int32(W), np.int32(part)),
       shared_mem=smem)
    _reduce(cp, part_o, part_ml, positions, out, P, part, W * bs)


# As paged_decode_attention (the same arguments and output, within the twin's bound: q and P are rounded to the
# cache dtype): q, k_cache, v_cache, block_tables, token_row, positions, out, part_o, part_ml
paged_rows_attention = FusedKernel("paged_rows_attention", _twin, _cuda, writes=(6, 7, 8))
