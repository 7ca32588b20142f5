"""Varlen causal prefill attention over the paged cache (prefill_attention.cu), beside its NumPy twin.

A step's prefill chunks are described by tiles: (block-table row, first token in the batch, queries, first
position), at most TILE_QUERIES queries each (`prefill_tiles`). The twin follows the kernel's numerics: with a
bf16 or fp16 cache, q and the softmax numerators P are rounded to the cache dtype before their products (the
tensor cores' operands), the softmax is online over tiles of KEY_TILE keys in float32. A float32 cache has no
tensor-core path: the CUDA body then runs the paged decode kernel over every prefill token (each token its own
query over keys 0..its position: the same semantics, exact in float32), and the twin rounds nothing.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from backends.kernels.build import Instance, function
from backends.kernels.fused import HEAD_DIMS, FusedKernel, ctype
from vt.dtypes import narrow_host, widen_host

TILE_QUERIES = 64  # prefill_attention.cu PREFILL_BM
KEY_TILE = 64  # PREFILL_BN
THREADS = 128
CI_INSTANCES = [Instance("prefill_attention.cu", f"vt::paged_prefill_attention<{kv}, {kv}, {hd}>")
                for kv in ("vt::bf16", "vt::f16") for hd in HEAD_DIMS]
CI_INSTANCES += [Instance("prefill_attention.cu", f"vt::paged_prefill_attention<{kv}, {kv}, {hd}, 2>")
                 for kv in ("vt::bf16", "vt::f16") for hd in HEAD_DIMS if hd >= 32]
WGMMA_HEAD_DIMS = (64, 128)  # prefill_wgmma.cu: whole 128-byte rows of the swizzled tiles, one or two slabs
WGMMA_THREADS = 128  # prefill_wgmma.cu WG_THREADS: one warpgroup a block (its WG_BN is the twin's KEY_TILE)
WGMMA_ARCH = "sm_90a"  # wgmma's target: cubins for it load on compute capability 9.0 alone
WGMMA_BLOCKS = (2, 3)  # prefill_wgmma.cu's MIN_BLOCKS instances
CI_INSTANCES += [Instance("prefill_wgmma.cu", f"vt::paged_prefill_wgmma<{kv}, {kv}, {hd}, {b}>",
                          arch=WGMMA_ARCH)
                 for kv in ("vt::bf16", "vt::f16") for hd in WGMMA_HEAD_DIMS for b in WGMMA_BLOCKS]


def heads_a_block(nh: int, nkv: int, hd: int) -> int:
    """Query heads a block of the kernel serves: VT_PREFILL_HEADS_A_BLOCK where they share a KV head (it divides the
    query heads a KV head) and the head dim gives each of the block's 256 threads a whole copy of a tile (32 and up);
    else one."""
    from vt.env import flags

    asked = flags().prefill_heads_a_block
    if asked == 1 or ((nh // nkv) % asked == 0 and hd >= 32):
        return asked
    _say_heads_a_block_declined(asked, nh // nkv, hd)
    return 1


@functools.cache
def _say_heads_a_block_declined(asked: int, group: int, hd: int) -> None:
    """One line (once a shape) where VT_PREFILL_HEADS_A_BLOCK asked for what the shape cannot take."""
    logging.getLogger("vt").warning("VT_PREFILL_HEADS_A_BLOCK=%d does not apply (%d query heads a KV head, head dim "
                                    "%d); the prefill kernel serves one head a block", asked, group, hd)


def takes_wgmma(hd: int, cache_dtype: Any, compute_capability: Callable[[], int]) -> bool:
    """Whether prefill attention runs the warpgroup kernel (VT_PREFILL_WGMMA auto or 1): a 16-bit cache (the tensor
    cores' operands), a head dim of WGMMA_HEAD_DIMS, a device of compute capability 9.0 (an sm_90a cubin runs there
    alone; asked of the device only for a shape that fits). Elsewhere, or at 0, the mma.sync kernel runs; a shape that
    1 asked for and cannot take is said once."""
    from vt.env import flags

    asked = flags().prefill_wgmma
    if asked == "0":
        return False
    shape = np.dtype(cache_dtype).itemsize == 2 and hd in WGMMA_HEAD_DIMS
    cc = compute_capability() if shape else 0
    fits = shape and cc == 90
    if not fits and asked == "1":
        _say_wgmma_declined(hd, np.dtype(cache_dtype).name, cc)
    return fits


@functools.cache
def _say_wgmma_declined(hd: int, dtype: str, compute_capability: int) -> None:
    logging.getLogger("vt").warning("VT_PREFILL_WGMMA=1 does not apply (head dim %d, %s cache, compute capability "
                                    "%d, 0 unasked; it serves head dims %s with a 16-bit cache on 9.0); the mma.sync "
                                    "prefill "
                                    "kernel runs", hd, dtype, compute_capability,
                                    " and ".join(map(str, WGMMA_HEAD_DIMS)))


def prefill_tiles(seqs: Sequence[tuple[int, int, int, int]], capacity: int = 0) -> np.ndarray:
    """[tiles, 4] int32 from (first token in the batch, queries, first position, block-table row) per chunk,
    each cut into tiles of at most TILE_QUERIES queries; padded with empty tiles up to `capacity`."""
    rows = [(row, q0 + i, min(TILE_QUERIES, n - i), p0 + i)
            for q0, n, p0, row in seqs for i in range(0, n, TILE_QUERIES)]
    out = np.zeros((max(capacity, len(rows), 1), 4), np.int32)
    if rows:
        out[: len(rows)] = rows
    return out


def max_tiles(num_tokens: int, max_seqs: int) -> int:
    """The most tiles a step of num_tokens tokens over at most max_seqs chunks can make."""
    return -(-num_tokens // TILE_QUERIES) + min(max_seqs, num_tokens)


def _twin(q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, block_tables: np.ndarray, tiles: np.ndarray,
          token_row: np.ndarray, positions: np.ndarray, out: np.ndarray) -> None:
    low = k_cache.dtype != np.float32
    bs, nkv, hd = k_cache.shape[1], k_cache.shape[2], k_cache.shape[3]
    nh = q.shape[1]
    kf, vf = k_cache.reshape(-1, nkv, hd), v_cache.reshape(-1, nkv, hd)
    heads = np.arange(nh) // (nh // nkv)  # the KV head each query head reads
    for row, q0, n, p0 in tiles.tolist():
        if n <= 0:
            continue
        last = p0 + n - 1
        pos = np.arange(last + 1)
        slots = block_tables[row, pos // bs] * bs + pos % bs
        k, v = widen_host(kf[slots])[:, heads], widen_host(vf[slots])[:, heads]  # [keys, nh, hd]
        qt = q[q0 : q0 + n]
        if low:
            qt = widen_host(narrow_host(qt, k_cache.dtype))
        qpos = p0 + np.arange(n)
        m = np.full((nh, n), -np.inf, np.float32)
        lsum = np.zeros((nh, n), np.float32)
        acc = np.zeros((nh, n, hd), np.float32)
        for k0 in range(0, last + 1, KEY_TILE):
            kt, vt = k[k0 : k0 + KEY_TILE], v[k0 : k0 + KEY_TILE]
            s = np.einsum("qhd,khd->hqk", qt, kt).astype(np.float32)
            keys = k0 + np.arange(kt.shape[0])
            s = np.where(keys[None, None, :] > qpos[None, :, None], -np.inf, s)  # causal: nothing after a query
            m_new = np.maximum(m, s.max(axis=-1))
            alpha = np.exp(m - m_new)
            p = np.exp(s - m_new[..., None])
            lsum = lsum * alpha + p.sum(axis=-1)
            if low:
                p = widen_host(narrow_host(p, k_cache.dtype))
            acc = acc * alpha[..., None] + np.einsum("hqk,khd->hqd", p, vt)  # the rescale to the new max
            m = m_new
        out[q0 : q0 + n] = narrow_host((acc / lsum[..., None]).transpose(1, 0, 2).astype(np.float32), out.dtype)


def _cuda(cp: Any, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, tiles: Any, token_row: Any,
          positions: Any, out: Any) -> None:
    from vt.env import flags

    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    if k_cache.dtype == np.float32:  # no tensor-core path: the decode kernel, one query per token
        from backends.kernels.decode_attention import paged_decode_attention

        paged_decode_attention.cuda(cp, q, k_cache, v_cache, block_tables, token_row, positions, out, None, None)
        return
    if bs & (bs - 1) or KEY_TILE % bs or k_cache.shape[0] >= 2**31:
        from vt.errors import EngineInvariantError

        # the kernel finds a key's block by shifts within a key tile, and a block id in 32 bits
        raise EngineInvariantError(f"paged_prefill_attention: block size {bs} (a power of two dividing {KEY_TILE}) "
                                   f"and {k_cache.shape[0]} cache blocks (fewer than 2**31)")
    if takes_wgmma(hd, k_cache.dtype, lambda: int(cp.cuda.Device().compute_capability)):
        if flags().prefill_heads_a_block != 1:
            _say_heads_a_block_not_wgmmas(hd)
        _cuda_wgmma(cp, q, k_cache, v_cache, block_tables, tiles, out)
        return
    hpb = heads_a_block(nh, nkv, hd)
    fn = function(cp, Instance("prefill_attention.cu", f"vt::paged_prefill_attention<{ctype(k_cache.dtype)}, "
                                                       f"{ctype(out.dtype)}, {hd}{', 2' if hpb == 2 else ''}>"))
    smem = 2 * 2 * KEY_TILE * (hd + 8) * 2  # two stages of K and V tiles
    if smem > 48 << 10:
        fn.max_dynamic_shared_size_bytes = smem
    fn((tiles.shape[0], nh // hpb), (THREADS * hpb,), (q, k_cache, v_cache, block_tables, tiles, out, np.int32(nh),
                                                       np.int32(nkv), np.int32(bs), np.int32(block_tables.shape[1])),
       shared_mem=smem)


@functools.cache
def _say_heads_a_block_not_wgmmas(hd: int) -> None:
    logging.getLogger("vt").warning("VT_PREFILL_HEADS_A_BLOCK applies to the mma.sync prefill kernel; the wgmma kernel "
                                    "serves head dim %d on this device (VT_PREFILL_WGMMA=0 for the mma.sync kernel)",
                                    hd)


def wgmma_blocks_an_sm(working_blocks: int, sm_count: int) -> int:
    """The warpgroup kernel's blocks a multiprocessor (its MIN_BLOCKS) for a launch whose blocks with queries number
    about working_blocks: 3 (fewer registers) where they are more than a wave of 2 a multiprocessor, else 2
    (prefill_wgmma.cu has the H100's figures)."""
    return 3 if working_blocks > 2 * sm_count else 2


_SM_COUNTS: dict[int, int] = {}  # device id: multiprocessors (cp may be the backend's namespace: no cache key)


def _sm_count(cp: Any) -> int:
    device = cp.cuda.Device()
    if device.id not in _SM_COUNTS:
        _SM_COUNTS[device.id] = int(device.attributes["MultiProcessorCount"])
    return _SM_COUNTS[device.id]


def _cuda_wgmma(cp: Any, q: Any, k_cache: Any, v_cache: Any, block_tables: Any, tiles: Any, out: Any) -> None:
    T, nh, hd = q.shape
    bs, nkv = k_cache.shape[1], k_cache.shape[2]
    # The tiles a step's tokens make (a graph bucket's tile buffer is padded far past them: max_tiles), not the grid
    working = -(-T // TILE_QUERIES) * nh
    blocks = wgmma_blocks_an_sm(working, _sm_count(cp))
    fn = function(cp, Instance("prefill_wgmma.cu", f"vt::paged_prefill_wgmma<{ctype(k_cache.dtype)}, "
                                                   f"{ctype(out.dtype)}, {hd}, {blocks}>", arch=WGMMA_ARCH))
    smem = 2 * 2 * KEY_TILE * hd * 2 + 1024  # two stages of K and V tiles, 1,024 bytes to align the swizzle atoms
    if smem > 48 << 10:
        fn.max_dynamic_shared_size_bytes = smem
    args = (q, k_cache, v_cache, block_tables, tiles, out, np.int32(nh), np.int32(nkv), np.int32(bs),
            np.int32(block_tables.shape[1]))
    fn((tiles.shape[0], nh), (WGMMA_THREADS,), args, shared_mem=smem)


# q, k_cache, v_cache, block_tables, tiles, token_row, positions, out
paged_prefill_attention = FusedKernel("paged_prefill_attention", _twin, _cuda, writes=(7,))
