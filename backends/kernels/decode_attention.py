"""Paged decode attention (decode_attention.cu), beside its NumPy twin.

The twin follows the kernel's algorithm, not only its result: the context in partitions (partition_size),
each an online softmax over tiles (a running max, the sum and the output rescaled when the max grows),
then the partitions combined at their common max. So a broken rescale or reduction shows on the CPU too.
Inside a partition the kernel runs one online softmax per warp and merges its warps at the block's max; the
twin's single stream of tiles is that merge's result, up to float32 rounding.
Tokens never read past their context (position + 1 keys, at most the table's width), and a key's value
is never read unless the key is inside it.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import HEAD_DIMS, NULL, FusedKernel, ctype
from backends.kernels.rotary import qk_norm_rope_store
from vt.dtypes import narrow_host, widen_host
from vt.env import flags
from vt.errors import EngineInvariantError

# keys: the rope variant's widest table (models/decoder.py attends_with_rope), and the partition floor the tests'
# cases are laid out by (VT_DECODE_MIN_PARTITION=256; the default floor is 128: vt/env.py)
MIN_PARTITION = 256
# A long context is split until the launch has about this many blocks: one wave at two blocks an SM on the H100's
# and H200's 132 SMs. Session 33 (an H100, attention-bench, min us of decode + reduce): 8 tokens x 8,192 keys 96.6
# at 256 (4 partitions of 2,048) against 103.9 at 1,024 (16 of 512), 98.9 at 512, 106.5 at 2,048; 32 x 2,048 93.5
# (one partition, no reduce) against 104.3. A block's first tile's latency and its merge are paid once a block.
TARGET_BLOCKS = 256
MAX_PARTITIONS = 256  # decode_attention.cu DECODE_MAX_PARTITIONS: the reduce kernel's weights in shared memory
TWIN_TILE = 128  # keys per online-softmax tile in the twin (the kernel's: 8 to 16 keys a warp, 64 or 128 a block)
THREADS = 256  # decode_attention.cu DECODE_THREADS
MERGE_MAX_PARTITIONS = 64  # decode_attention.cu's: the rope kernel merges at most this many partitions itself
MERGE_COUNTERS = 1 << 16  # the CUDA backend's zeroed counters for it: a token's blocks a partition, every token
DECODE_CLUSTER = 2  # decode_attention.cu's: the partitions a cluster merges (VT_DECODE_MERGE_IN_ATTENTION=cluster)
SPLIT_HEADS_UNTIL = 32  # blocks: a launch smaller than this deals a KV head's query heads out to more blocks
STORAGE = ("float", "vt::bf16", "vt::f16")
# Every layout the template takes (each storage type at each head dim), and every GQA ratio at one of them.
CI_INSTANCES = (
    [Instance("decode_attention.cu", f"vt::paged_decode_attention<{kv}, {kv}, {hd}, {g}>")
     for kv in STORAGE for hd in HEAD_DIMS for g in (1, 2)]  # 1: a split launch's block (head_split)
    + [Instance("decode_attention.cu", f"vt::paged_decode_attention<vt::bf16, vt::bf16, 128, {g}>") for g in (4, 8)]
    + [Instance("decode_attention.cu", f"vt::paged_decode_reduce<{o}, {hd}>") for o in STORAGE for hd in HEAD_DIMS])
ROWS_A_BLOCK = 4  # paged_decode_attention_rows: consecutive rows a block serves (its registers: 208 at bf16, 128)
CI_INSTANCES += [Instance("decode_attention.cu", f"vt::paged_decode_attention_rows<{kv}, {kv}, {hd}, {ROWS_A_BLOCK}>")
                 for kv in STORAGE for hd in HEAD_DIMS]
# The rope variant at every layout and GQA ratio the plain kernel has.
CI_INSTANCES += [Instance(i.file, i.expr.replace("paged_decode_attention<", "paged_decode_attention_rope<"))
                 for i in CI_INSTANCES if "paged_decode_attention<" in i.expr]
# and with two early tiles (VT_DECODE_EARLY_TILES=2) where a model's decode runs: 16-bit caches; and with either merge
# in the kernel (VT_DECODE_MERGE_IN_ATTENTION: 1, its last block; 2, its cluster) at one early tile, every layout
ROPE_ONE_TILE = [i for i in CI_INSTANCES if "paged_decode_attention_rope<" in i.expr]
CI_INSTANCES += [Instance(i.file, i.expr.replace(">", ", 2>", 1)) for i in ROPE_ONE_TILE if "float" not in i.expr]
CI_INSTANCES += [Instance(i.file, i.expr.replace(">", f", 1, {mode}>", 1)) for i in ROPE_ONE_TILE for mode in (1, 2)]
CI_INSTANCES += [Instance(i.file, i.expr.replace(">", f", 2, {mode}>", 1)) for i in ROPE_ONE_TILE
                 if "float" not in i.expr for mode in (1, 2)]


def partition_size(num_tokens: int, num_kv_heads: int, max_context: int) -> int:
    """Keys per partition, from static shapes only (so a graph's launch is fixed): as many splits of the
    longest context as keep about TARGET_BLOCKS blocks busy, in multiples of 64 keys, never under the floor
    (VT_DECODE_MIN_PARTITION: 128 keys by default). One token at 8k context: 32 partitions of 256; eight tokens: 4 of
    2,048."""
    splits = max(1, TARGET_BLOCKS // max(1, num_tokens * num_kv_heads))
    keys = -(-max_context // splits)
    return max(flags().decode_min_partition, -(-keys // 64) * 64)


def head_split(num_tokens: int, num_kv_heads: int, group: int, partitions: int) -> int:
    """How many blocks share a KV head's `group` query heads: doubled while the launch stays within
    SPLIT_HEADS_UNTIL blocks, at most one head a block. A decode step of one token over a short context is
    num_kv_heads blocks (4 for Qwen3-30B-A3B, each with 8 query heads), its latency one block's."""
    blocks, split = num_tokens * num_kv_heads * partitions, 1
    while split < group and group % (2 * split) == 0 and 2 * split * blocks <= SPLIT_HEADS_UNTIL:
        split *= 2
    return split


def num_partitions(num_tokens: int, num_kv_heads: int, table_width: int, block_size: int) -> int:
    """The launch's static third dimension: partitions of the longest context a table of this width holds."""
    ctx = table_width * block_size
    return -(-ctx // partition_size(num_tokens, num_kv_heads, ctx))


def _twin(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray, token_row: np.ndarray,
          positions: np.ndarray, out: np.ndarray, part_o: np.ndarray | None, part_ml: np.ndarray | None) -> None:
    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    if bs & (bs - 1) or k_cache.shape[0] >= 2**31:  # the kernel finds a key's block by shifts, its id in 32 bits
        raise EngineInvariantError(f"paged_decode_attention: block size {bs} (a power of two) and "
                                   f"{k_cache.shape[0]} cache blocks (fewer than 2**31)")
    keys = block_tables.shape[1] * bs
    part = keys if _partitions(part_o, part_ml) == 1 else partition_size(T, nkv, keys)  # one partition: the table
    attend_in_partitions(q, k_cache, v_cache, block_tables, token_row, positions, out, part_o, part_ml, part,
                         TWIN_TILE)


def attend_in_partitions(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray,
                         token_row: np.ndarray, positions: np.ndarray, out: np.ndarray, part_o: np.ndarray | None,
                         part_ml: np.ndarray | None, part: int, tile: int, operand: np.dtype | None = None) -> None:
    """Each token's keys 0..its position in partitions of `part` keys, each an online softmax over tiles of `tile`
    keys from its start (the softmax numerators rounded to `operand` before their product with V, where given: a
    tensor-core kernel's P), then the partitions combined at their common max (the reduce kernel), their partials
    written where part_o and part_ml are given."""
    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    W = block_tables.shape[1]
    P = _partitions(part_o, part_ml)
    ctx = np.minimum(positions.astype(np.int64) + 1, W * bs)
    tables = block_tables[token_row]  # [T, W]
    kf, vf = k_cache.reshape(-1, nkv, hd), v_cache.reshape(-1, nkv, hd)
    qg = q.reshape(T, nkv, nh // nkv, hd)  # query head h reads KV head h // (nh // nkv)
    m = np.full((T, nkv, nh // nkv, P), -np.inf, np.float32)
    lsum = np.zeros_like(m)
    o = np.zeros((*m.shape, hd), np.float32)
    for p in range(min(P, -(-int(ctx.max()) // part))):
        end = np.minimum(ctx, (p + 1) * part)
        m[..., p], lsum[..., p], o[..., p, :] = _partition(qg, kf, vf, tables, bs, p * part, end, tile, operand)
    if P == 1:
        res = o[..., 0, :]
    else:
        assert part_o is not None and part_ml is not None  # _partitions: both or neither
        part_o[...] = o.reshape(T, nh, P, hd)
        part_ml[...] = np.stack([m, lsum], axis=-1).reshape(T, nh, P, 2)
        M = np.max(m, axis=-1, keepdims=True)
        share = np.where(lsum > 0, np.exp(m - np.where(np.isinf(M), 0, M)) * lsum, 0)  # at the common max
        res = (share[..., None] * o).sum(axis=-2) / share.sum(axis=-1)[..., None]
    out[...] = narrow_host(res.reshape(T, nh, hd).astype(np.float32), out.dtype)


def _partitions(part_o: Any, part_ml: Any) -> int:
    """P, the partitions the partials' scratch holds (1 without one): a caller gives both arrays or neither (the
    kernel would write a partition's output through a null part_o)."""
    if (part_o is None) != (part_ml is None):
        raise EngineInvariantError("paged_decode_attention: part_o and part_ml come together (a table wider than one "
                                   "partition needs both), or not at all")
    return 1 if part_ml is None else int(part_ml.shape[2])


def _partition(qg: np.ndarray, kf: np.ndarray, vf: np.ndarray, tables: np.ndarray, bs: int, start: int,
               end: np.ndarray, tile: int, operand: np.dtype | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One partition [start, end[t]) of every token: (max, softmax sum, normalized output) per query head."""
    T, nkv, g, hd = qg.shape
    W = tables.shape[1]
    m = np.full((T, nkv, g), -np.inf, np.float32)
    lsum = np.zeros((T, nkv, g), np.float32)
    acc = np.zeros((T, nkv, g, hd), np.float32)
    for t0 in range(start, int(end.max()), tile):
        pos = t0 + np.arange(tile)
        valid = pos[None, :] < end[:, None]  # [T, tile]
        blocks = tables[:, np.minimum(pos // bs, W - 1)]  # the block table, entry by entry
        slots = blocks * bs + pos % bs  # past a context: slots of stale or recycled blocks (any bits, NaN too)
        k = widen_host(kf[slots])  # [T, tile, nkv, hd]
        v = np.where(valid[:, :, None, None], widen_host(vf[slots]), 0)  # 0 * NaN is NaN: never let one in
        s = np.where(valid[:, None, None, :], np.matmul(qg, k.transpose(0, 2, 3, 1)), -np.inf)  # [T, nkv, g, tile]
        m_new = np.maximum(m, s.max(axis=-1))
        base = np.where(np.isinf(m_new), 0, m_new)  # a token with no key in this tile yet keeps its zeros
        alpha = np.exp(m - base)
        e = np.exp(s - base[..., None])
        lsum = lsum * alpha + e.sum(axis=-1)
        if operand is not None:  # P as a tensor core's operand: the sum above is of the unrounded values
            e = widen_host(narrow_host(e, operand))
        acc = acc * alpha[..., None] + np.matmul(e, v.transpose(0, 2, 1, 3))  # the rescale to the new max
        m = m_new
    return m, lsum, acc / np.where(lsum > 0, lsum, 1)[..., None]


MAX_GRID_Y = 65535  # CUDA's limit on a grid's y and z


def _split(T: int, nkv: int, keys: int, part_o: Any, part_ml: Any) -> tuple[int, int]:
    """(P, keys a partition) of a CUDA launch over tables of `keys` keys: P from the partials' scratch (one partition,
    the whole table, without one), checked against what the reduce kernel holds (partition_size never splits more
    than TARGET_BLOCKS ways; a caller's scratch might)."""
    P = _partitions(part_o, part_ml)
    if P > MAX_PARTITIONS:
        raise EngineInvariantError(f"{P} decode partitions: the reduce kernel holds at most {MAX_PARTITIONS}")
    return P, keys if P == 1 else partition_size(T, nkv, keys)


def _reduce(cp: Any, part_o: Any, part_ml: Any, positions: Any, out: Any, P: int, part: int, keys: int) -> None:
    """The partitions' partials into out (nothing to do for one partition): every decode kernel's second launch."""
    if P == 1:
        return
    T, nh, hd = out.shape
    reduce = function(cp, Instance("decode_attention.cu", f"vt::paged_decode_reduce<{ctype(out.dtype)}, {hd}>"))
    reduce((nh, T), (max(32, hd),), (part_o, part_ml, positions, out, np.int32(nh), np.int32(P), np.int32(part),
                                     np.int32(keys)))




def _cuda(cp: Any, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, token_row: Any, positions: Any, out: Any,
          part_o: Any, part_ml: Any) -> None:
    T, nh, hd = q.shape
    if T > MAX_GRID_Y and part_o is None:  # the grid's y is the token: at most 65,535 a launch (an eager prefill's
        for t0 in range(0, T, MAX_GRID_Y):  # float32 fallback can hold more), so slices of that many
            t1 = min(T, t0 + MAX_GRID_Y)
            _cuda(cp, q[t0:t1], k_cache, v_cache, block_tables, token_row[t0:t1], positions[t0:t1], out[t0:t1],
                  None, None)
        return
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    if bs & (bs - 1) or k_cache.shape[0] >= 2**31:  # the kernel finds a key's block by shifts, its id in 32 bits
        raise EngineInvariantError(f"paged_decode_attention: block size {bs} (a power of two) and "
                                   f"{k_cache.shape[0]} cache blocks (fewer than 2**31)")
    W = block_tables.shape[1]
    P, part = _split(T, nkv, W * bs, part_o, part_ml)
    kv, o = ctype(k_cache.dtype), ctype(out.dtype)
    split = head_split(T, nkv, nh // nkv, P)
    g = nh // nkv // split
    attend = function(cp, Instance("decode_attention.cu", f"vt::paged_decode_attention<{kv}, {o}, {hd}, {g}>"))
    null = np.uint64(0)
    attend((nkv * split, T, P), (THREADS,), (q, k_cache, v_cache, block_tables, token_row, positions, out,
                                     null if part_o is None else part_o, null if part_ml is None else part_ml,
                                     np.int32(nkv), np.int32(bs), np.int32(W), np.int32(part)))
    _reduce(cp, part_o, part_ml, positions, out, P, part, W * bs)


# q, k_cache, v_cache, block_tables, token_row, positions, out, part_o, part_ml
paged_decode_attention = FusedKernel("paged_decode_attention", _twin, _cuda, writes=(6, 7, 8))


def _rope_twin(qkv: np.ndarray, bias: np.ndarray | None, w: np.ndarray, rope: np.ndarray, slots: np.ndarray,
               k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray, token_row: np.ndarray,
               positions: np.ndarray, out: np.ndarray, part_o: np.ndarray | None, part_ml: np.ndarray | None,
               has_norm: bool, eps: float, merge_counters: Any = None) -> None:
    """merge_counters: the CUDA kernel's (where its last block merges the partitions); the twin's merge is the
    reduce kernel's arithmetic either way."""
    _one_token_a_sequence(block_tables, token_row, positions, slots, k_cache.shape[1])
    T, nh, hd = out.shape
    q = np.empty((T, nh, hd), np.float32)  # the kernel's shared memory: nothing of the pool's
    qk_norm_rope_store.twin(qkv, bias, w, rope, positions, slots, k_cache, v_cache, q, has_norm, eps)
    _twin(q, k_cache, v_cache, block_tables, token_row, positions, out, part_o, part_ml)


def _one_token_a_sequence(block_tables: np.ndarray, token_row: np.ndarray, positions: np.ndarray, slots: np.ndarray,
                          bs: int) -> None:
    """The rope variant's precondition: no token attends a slot another token of the launch writes (on CUDA, another
    block writes it, unordered with the read). Two tokens of one sequence break it, whether they share a table row
    (speculative verification) or each has a copy (a short prefill run whole, a row a token)."""
    writes = slots[slots >= 0]
    keys = np.arange(block_tables.shape[1] * bs)
    read = block_tables[token_row][:, keys // bs] * bs + keys % bs  # [T, keys]: each token's slots, key by key
    seen = keys[None, :] <= positions[:, None]  # the keys a token attends (its own included)
    uniq, count = np.unique(writes, return_counts=True)
    # a slot another token writes: any written slot but the token's own, and its own where a second token writes it
    theirs = np.isin(read, writes) & seen & ((read != slots[:, None]) | np.isin(read, uniq[count > 1]))
    if theirs.any():
        t = int(np.argmax(theirs.any(axis=1)))
        raise EngineInvariantError(f"paged_decode_attention_rope: token {t} attends a slot another token of the "
                                   "launch writes (two tokens of one sequence); it serves one token a sequence")


def merges_in_attention(num_tokens: int, blocks_a_token: int, partitions: int) -> bool:
    """Whether a rope launch's last block of each token's partitions merges them (decode_attention.cu
    merge_in_last_block), not the reduce kernel: under VT_DECODE_MERGE_IN_ATTENTION, for a split context of at most
    MERGE_MAX_PARTITIONS partitions whose counters (a token's blocks a partition: KV heads x head split) fit
    MERGE_COUNTERS."""
    return (flags().decode_merge_in_attention == "1" and 1 < partitions <= MERGE_MAX_PARTITIONS
            and num_tokens * blocks_a_token <= MERGE_COUNTERS)


def merges_in_cluster(partitions: int) -> bool:
    """Whether a rope launch is a grid of thread-block clusters, each a token's partitions of one block column, whose
    rank 0 merges them through distributed shared memory (decode_attention.cu merge_in_cluster), not the reduce
    kernel: under VT_DECODE_MERGE_IN_ATTENTION=cluster, for exactly DECODE_CLUSTER partitions (a cluster holds them
    all; one partition has nothing to merge). On CUDA also sm_90 or later (clusters)."""
    return flags().decode_merge_in_attention == "cluster" and partitions == DECODE_CLUSTER


@functools.cache
def _has_clusters() -> bool:
    """Whether this process's GPU launches thread-block clusters (compute capability 9.0 on), asked once."""
    import cupy

    return int(cupy.cuda.Device().compute_capability) >= 90


def _rope_cuda(cp: Any, qkv: Any, bias: Any, w: Any, rope: Any, slots: Any, k_cache: Any, v_cache: Any,
               block_tables: Any, token_row: Any, positions: Any, out: Any, part_o: Any, part_ml: Any,
               has_norm: bool, eps: float, merge_counters: Any = None) -> None:
    T, nh, hd = out.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    if T > MAX_GRID_Y or bs & (bs - 1) or k_cache.shape[0] >= 2**31:
        raise EngineInvariantError(f"paged_decode_attention_rope: {T} tokens (at most {MAX_GRID_Y}), block size {bs} "
                                   f"(a power of two), {k_cache.shape[0]} cache blocks (fewer than 2**31)")
    W = block_tables.shape[1]
    P, part = _split(T, nkv, W * bs, part_o, part_ml)
    kv, o = ctype(k_cache.dtype), ctype(out.dtype)
    split = head_split(T, nkv, nh // nkv, P)
    g = nh // nkv // split
    early = flags().decode_early_keys
    cluster = merges_in_cluster(P) and _has_clusters()
    fused_merge = not cluster and merge_counters is not None and merges_in_attention(T, nkv * split, P)
    merge = np.uint64(int(merge_counters)) if fused_merge else np.uint64(0)
    tiles = 2 if early and flags().decode_early_tiles == 2 else 1
    mode = 2 if cluster else 1 if fused_merge else 0  # decode_attention.cu's MERGE_CLUSTER, MERGE_LAST
    extra = f", {tiles}, {mode}" if mode else ", 2" if tiles == 2 else ""
    attend = function(cp, Instance("decode_attention.cu",
                                   f"vt::paged_decode_attention_rope<{kv}, {o}, {hd}, {g}{extra}>"))
    null = np.uint64(0)
    attend((nkv * split, T, P), (THREADS,), (qkv, NULL if bias is None else bias, w, rope, slots, k_cache, v_cache,
                                     block_tables, token_row, positions, out, null if part_o is None else part_o,
                                     null if part_ml is None else part_ml, np.int32(nkv), np.int32(bs), np.int32(W),
                                     np.int32(part), np.int32(bool(has_norm)), np.float32(eps),
                                     np.int32(early), merge), cluster=(1, 1, P) if cluster else None)
    if not mode:
        _reduce(cp, part_o, part_ml, positions, out, P, part, W * bs)


# qkv, bias, w, rope, slots, k_cache, v_cache, block_tables, token_row, positions, out, part_o, part_ml; on CUDA
# merge_counters (a device pointer to MERGE_COUNTERS zeroed uint32, the backend's) lets the kernel merge partitions
paged_decode_attention_rope = FusedKernel("paged_decode_attention_rope", _rope_twin, _rope_cuda,
                                          writes=(5, 6, 10, 11, 12))


def _rows_cuda(cp: Any, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, token_row: Any, positions: Any,
               out: Any, part_o: Any, part_ml: Any) -> None:
    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    groups = -(-T // ROWS_A_BLOCK)
    if groups > MAX_GRID_Y or bs & (bs - 1) or k_cache.shape[0] >= 2**31:
        raise EngineInvariantError(f"paged_decode_attention_rows: {T} tokens (at most {MAX_GRID_Y * ROWS_A_BLOCK}), "
                                   f"block size {bs} (a power of two), {k_cache.shape[0]} cache blocks (< 2**31)")
    W = block_tables.shape[1]
    P, part = _split(T, nkv, W * bs, part_o, part_ml)
    kv, o = ctype(k_cache.dtype), ctype(out.dtype)
    attend = function(cp, Instance("decode_attention.cu",
                                   f"vt::paged_decode_attention_rows<{kv}, {o}, {hd}, {ROWS_A_BLOCK}>"))
    null = np.uint64(0)
    attend((nh, groups, P), (THREADS,), (q, k_cache, v_cache, block_tables, token_row, positions, out,
                                         null if part_o is None else part_o, null if part_ml is None else part_ml,
                                         np.int32(T), np.int32(nkv), np.int32(bs), np.int32(W), np.int32(part)))
    _reduce(cp, part_o, part_ml, positions, out, P, part, W * bs)


# As paged_decode_attention, and the same twin (each row's output is the plain kernel's, bit for bit: the kernel
# only shares the key reads of rows of one sequence): q, k_cache, v_cache, block_tables, token_row, positions, out,
# part_o, part_ml
paged_decode_attention_rows = FusedKernel("paged_decode_attention_rows", _twin, _rows_cuda, writes=(6, 7, 8))
