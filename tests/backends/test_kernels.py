"""The kernel library (backends/kernels/): each NumPy twin against a plain float64 reference on the CPU, and
(GPU lane) each CUDA kernel against its twin on the same random inputs, at the edges: block boundaries,
a one-token context, GQA ratios 1/2/4/8, partition boundaries and the longest context a table holds, several
tokens of one sequence (speculative verification), padding rows. Error bounds, stated once:
- float32 outputs: |kernel - twin| <= 1e-5 * (1 + |twin|) (sums in another order);
- bf16 / fp16 outputs: within 1 unit in the last place of the storage dtype, plus the float32 bound above (a
  float32 sum in another order may land on the other side of a rounding boundary, never further);
- prefill with a bf16 / fp16 cache rounds each softmax numerator P to the cache dtype before P.V, as the tensor
  cores take it: where CUDA's expf and NumPy's exp differ by an ulp, a P may round the other way and move its
  output by up to one P ulp of a value, so that bound adds the dtype's epsilon (2^-8 bf16, 2^-11 fp16) times the
  largest |output| of the row (seen on the H200: at most 5 of 18,944 values needed it).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from backends.kernels import activation, decode_attention, norm, rotary
from backends.kernels.decode_attention import MIN_PARTITION, TWIN_TILE, partition_size
from backends.kernels.fused import HEAD_DIMS
from tests.helpers import flag_set, guarding
from vt.dtypes import narrow_host, widen_host

STORAGE = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16)}
BS = 16


# ---- paged decode attention -------------------------------------------------------------------------------------
@dataclass
class DecodeCase:
    q: np.ndarray
    k_cache: np.ndarray
    v_cache: np.ndarray
    tables: np.ndarray
    token_row: np.ndarray
    positions: np.ndarray
    out_dtype: np.dtype
    num_partitions: int


def decode_case(contexts: list[int], nh: int, nkv: int, hd: int, dtype: str, width: int, q_per_row: int = 1,
                seed: int = 0) -> DecodeCase:
    """Rows with the given contexts (q_per_row tokens each, ending at the context), tables of `width` blocks
    drawn from a shuffled pool. Every block no visible key lives in holds NaN, and every table entry past a
    row's last block names such a block: a read past a context shows as NaN. The table array has one more
    row, of such blocks, that no token uses: a read one entry past the last row's width reads a poisoned
    block, not memory outside the array (a failed assertion, never a crashed GPU context)."""
    rng = np.random.default_rng(seed)
    R = len(contexts)
    num_blocks = R * width + 8  # the last 8 (and the trash block) never visible
    kv = STORAGE[dtype]
    k = narrow_host(rng.standard_normal((num_blocks + 1, BS, nkv, hd)).astype(np.float32), kv)
    v = narrow_host(rng.standard_normal((num_blocks + 1, BS, nkv, hd)).astype(np.float32), kv)
    ids = rng.permutation(num_blocks)
    spare = np.resize(ids[R * width :], width)  # blocks no table row uses
    tables = np.concatenate([ids[: R * width], spare]).reshape(R + 1, width).astype(np.int64)
    poison = narrow_host(np.full((BS, nkv, hd), np.nan, np.float32), kv)
    k[spare], v[spare] = poison, poison
    for r, ctx in enumerate(contexts):
        used = -(-ctx // BS)
        for b in tables[r, used:]:
            k[b], v[b] = poison, poison
        last = tables[r, used - 1]  # the partial last block: its keys past the context are garbage too
        k[last, ctx - (used - 1) * BS :] = poison[: BS - (ctx - (used - 1) * BS)]
        v[last, ctx - (used - 1) * BS :] = poison[: BS - (ctx - (used - 1) * BS)]
    token_row = np.repeat(np.arange(R), q_per_row).astype(np.int64)
    positions = np.concatenate([np.arange(c - q_per_row, c) for c in contexts]).astype(np.int64)
    q = (rng.standard_normal((R * q_per_row, nh, hd)) * hd**-0.5).astype(np.float32)
    return DecodeCase(q, k, v, tables, token_row, positions, kv,
                      decode_attention.num_partitions(R * q_per_row, nkv, width, BS))


def decode_reference(c: DecodeCase) -> np.ndarray:
    """float64 softmax attention, token by token, over the keys its table names up to its position."""
    T, nh, hd = c.q.shape
    nkv = c.k_cache.shape[2]
    out = np.zeros((T, nh, hd))
    for t in range(T):
        ctx = int(c.positions[t]) + 1
        pos = np.arange(ctx)
        blocks = c.tables[c.token_row[t], pos // BS]
        k = widen_host(c.k_cache[blocks, pos % BS]).astype(np.float64)  # [ctx, nkv, hd]
        v = widen_host(c.v_cache[blocks, pos % BS]).astype(np.float64)
        for h in range(nh):
            kvh = h // (nh // nkv)
            s = k[:, kvh] @ c.q[t, h]
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ v[:, kvh]
    return out


def run_decode(xp, c: DecodeCase, op: Any = None) -> np.ndarray:
    """The case through a decode-shaped attention op (paged_decode_attention unless given: the rows kernels take the
    same arguments), on the host (xp = np) or the device; its output on the host."""
    op = op or decode_attention.paged_decode_attention
    T, nh, hd = c.q.shape
    put = (lambda a: xp.asarray(a)) if xp is not np else (lambda a: a.copy())
    out = xp.zeros((T, nh, hd), c.out_dtype)
    P = c.num_partitions
    parts = (None, None) if P == 1 else (xp.zeros((T, nh, P, hd), np.float32), xp.zeros((T, nh, P, 2), np.float32))
    op(xp, put(c.q), put(c.k_cache), put(c.v_cache), put(c.tables), put(c.token_row), put(c.positions), out, *parts)
    return out if xp is np else out.get()


PARTITION = MIN_PARTITION  # what every case below is split by (test_decode_cases_reach_every_path checks it)
LONG = 2 * PARTITION + 3 * BS + 5  # three partitions, the last partial
DECODE_CASES = {  # name: (contexts, nh, nkv, table width in blocks, tokens per row)
    "one-token-gqa1": ([1], 4, 4, 4, 1),
    "block-edges-gqa2": ([BS - 1, BS, BS + 1, 2 * BS], 4, 2, 4, 1),
    "tiles-gqa4": ([TWIN_TILE + 1, 3 * TWIN_TILE - 7], 8, 2, 24, 1),
    "partitions-gqa8": ([PARTITION - 1, PARTITION, PARTITION + 1, LONG], 16, 2, -(-LONG // BS), 1),
    "full-width-mqa": ([8 * BS, 8 * BS - 3], 4, 1, 8, 1),
    "verify-q4-gqa2": ([37, 2 * PARTITION + 1], 4, 2, -(-(2 * PARTITION + 1) // BS), 4),
}


@pytest.fixture(autouse=True)
def default_partition_floor() -> Any:
    """The cases above are laid out around the default floor's partitions: a run with VT_DECODE_MIN_PARTITION set
    (a lane trying another floor) keeps them; a test that lowers the floor sets it inside this."""
    with flag_set("VT_DECODE_MIN_PARTITION", str(MIN_PARTITION)):
        yield


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", DECODE_CASES)
def test_paged_decode_twin_equals_dense_attention(case: str, dtype: str) -> None:
    """The twin reads each token's keys through its table, all query heads of a KV head at once, online
    softmax over tiles, partitions combined: the same numbers as dense float64 attention over those keys.
    Poisoned (NaN) blocks past every context prove nothing past it is read."""
    contexts, nh, nkv, width, qpr = DECODE_CASES[case]
    c = decode_case(contexts, nh, nkv, 16, dtype, width, qpr)
    got = widen_host(run_decode(np, c)).astype(np.float64)
    want = decode_reference(c)
    assert np.isfinite(got).all(), "a poisoned key or value past a context reached the output"
    tol = 1e-5 if dtype == "float32" else 2 ** -7
    err = np.abs(got - want) / (1 + np.abs(want))
    assert err.max() <= tol, f"max error {err.max():.2e} over {tol:.1e} ({case}, {dtype})"
    assert np.abs(want).max() > 0.1, "non-vacuity: the outputs are not all near zero"


def test_decode_cases_reach_every_path() -> None:
    """The cases above span what the gates need: several twin tiles in one partition, several partitions, a
    context ending exactly on a partition boundary, and a grouped query head."""
    ctxs = [x for c in DECODE_CASES.values() for x in c[0]]
    for contexts, _, nkv, width, qpr in DECODE_CASES.values():
        assert partition_size(len(contexts) * qpr, nkv, width * BS) == PARTITION
    assert max(ctxs) > 2 * PARTITION and any(TWIN_TILE < x < PARTITION for x in ctxs) and PARTITION in ctxs
    assert {c[1] // c[2] for c in DECODE_CASES.values()} >= {1, 2, 4, 8}
    splits = {name: decode_attention.head_split(len(c[0]) * c[4], c[2], c[1] // c[2],
                                                decode_attention.num_partitions(len(c[0]) * c[4], c[2], c[3], BS))
              for name, c in DECODE_CASES.items()}
    assert splits["block-edges-gqa2"] == 2 and splits["tiles-gqa4"] == 4, "KV heads' query heads dealt to blocks"
    assert splits["partitions-gqa8"] == 1, "and a case whose launch keeps a KV head's heads in one block"


SHORT_TABLE = 256 // BS  # blocks: a 256-key table, one partition at the default floor


@pytest.mark.parametrize("floor", [64, 128])
def test_a_lowered_partition_floor_splits_a_short_context_and_keeps_its_numbers(floor: int) -> None:
    """VT_DECODE_MIN_PARTITION (the H200 lane's A/B knob for one-row steps over short contexts): a one-token launch
    over a 256-key table splits into 256 / floor partitions, the twin equal to dense attention across them; the
    default floor keeps the same table whole."""
    with flag_set("VT_DECODE_MIN_PARTITION", str(floor)):
        c = decode_case([255], 4, 2, 16, "float32", SHORT_TABLE)
        got = run_decode(np, c).astype(np.float64)
    assert c.num_partitions == 256 // floor, f"a {floor}-key floor: {c.num_partitions} partitions"
    want = decode_reference(c)
    assert np.abs(got - want).max() <= 1e-5 * (1 + np.abs(want).max()), "the partitions combine to dense attention"
    assert decode_attention.num_partitions(1, 2, SHORT_TABLE, BS) == 1, "non-vacuity: the default keeps it whole"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_paged_decode_at_the_lowest_partition_floor_equals_its_twin(dtype: str) -> None:
    """The kernel and its reduce at 64-key partitions (a tile of keys each, or less), contexts ending in the first
    partition, on its edge, just past it and in the last."""
    import cupy

    with flag_set("VT_DECODE_MIN_PARTITION", "64"):
        for hd in HEAD_DIMS:
            c = decode_case([1, 64, 65, 255], 4, 2, hd, dtype, SHORT_TABLE, seed=hd)
            got, want = run_decode(cupy, c), run_decode(np, c)
            assert c.num_partitions == 4, "non-vacuity: the table is split in four"
            assert np.isfinite(widen_host(got)).all(), f"hd={hd}: the kernel read a poisoned key or value"
            assert_within_bound(got, want, f"paged decode attention, 64-key partitions, hd={hd} {dtype}")


def test_a_small_decode_launch_deals_a_kv_heads_query_heads_to_more_blocks() -> None:
    """head_split: a launch of few blocks gives each block fewer of its KV head's query heads, doubling while the
    launch stays within SPLIT_HEADS_UNTIL blocks; the split always divides the group, and is the largest such."""
    until = decode_attention.SPLIT_HEADS_UNTIL
    seen = set()
    for T in (1, 2, 3, 8, 64):
        for nkv, group in ((1, 1), (4, 8), (8, 2), (2, 4), (1, 6), (8, 1)):
            for P in (1, 2, 5):
                split = decode_attention.head_split(T, nkv, group, P)
                blocks = T * nkv * P
                assert group % split == 0 and split * blocks <= max(blocks, until), (T, nkv, group, P, split)
                bigger = 2 * split
                assert group % bigger or bigger * blocks > until, f"{(T, nkv, group, P)}: {split} is not the largest"
                seen.add(split)
    assert decode_attention.head_split(1, 4, 8, 1) == 8, "Qwen3-30B-A3B at one token: a block a query head"
    assert decode_attention.head_split(64, 8, 2, 1) == 1 and seen >= {1, 2, 4, 8}, "non-vacuity: every outcome"


def test_a_launch_never_splits_a_context_more_often_than_the_reduce_kernel_holds() -> None:
    """The reduce kernel keeps one weight a partition in shared memory (MAX_PARTITIONS of them): every launch
    shape, up to a million keys, splits at most that often. Guard: the sweep reaches the bound."""
    counts = [decode_attention.num_partitions(T, nkv, width, BS) for T in (1, 2, 3, 8, 64, 512) for nkv in (1, 4, 8)
              for width in (1, 17, 512, 8192, 65536)]
    assert max(counts) <= decode_attention.MAX_PARTITIONS
    cu = (Path(decode_attention.__file__).parent / "decode_attention.cu").read_text()
    assert f"DECODE_MAX_PARTITIONS = {decode_attention.MAX_PARTITIONS};" in cu, "the kernel's bound is the host's"
    assert max(counts) == decode_attention.MAX_PARTITIONS, "non-vacuity: some shape splits as often as it may"


def test_the_rope_kernel_merges_only_partitions_its_shared_weights_and_the_counters_hold() -> None:
    """merge_in_last_block keeps one weight a partition (MERGE_MAX_PARTITIONS, the kernel's own constant) and one
    counter a token's block column (MERGE_COUNTERS): a launch past either, one partition (nothing to merge), or
    VT_DECODE_MERGE_IN_ATTENTION=0 leaves the merge to the reduce kernel. Guard: one-token steps up to 8k keys merge
    in the kernel, at every floor."""
    with flag_set("VT_DECODE_MERGE_IN_ATTENTION", "1"):
        _merges_within_bounds()
    with flag_set("VT_DECODE_MERGE_IN_ATTENTION", "0"):
        assert not decode_attention.merges_in_attention(1, 8, 2)


def test_only_a_launch_of_exactly_a_clusters_partitions_merges_in_a_cluster() -> None:
    """merge_in_cluster's cluster is DECODE_CLUSTER blocks (the kernel's own constant), a token's partitions of one
    block column, and its rank 0 merges them all: a launch of more partitions would merge each cluster's own alone,
    one partition has nothing to merge. VT_DECODE_MERGE_IN_ATTENTION other than cluster never clusters. Guard: a
    one-row step over the rope variant's widest table (256 keys) at the 128-key floor is such a launch."""
    da = decode_attention
    cu = (Path(da.__file__).parent / "decode_attention.cu").read_text()
    assert f"constexpr int DECODE_CLUSTER = {da.DECODE_CLUSTER};" in cu, "the kernel's cluster is the host's"
    with flag_set("VT_DECODE_MERGE_IN_ATTENTION", "cluster"):
        assert [P for P in range(1, 4 * da.DECODE_CLUSTER + 1) if da.merges_in_cluster(P)] == [da.DECODE_CLUSTER]
        with flag_set("VT_DECODE_MIN_PARTITION", "128"):
            P = da.num_partitions(1, 8, SHORT_TABLE, BS)
            assert da.merges_in_cluster(P), f"non-vacuity: one row over a 256-key table splits in {P}"
    for other in ("0", "1"):
        with flag_set("VT_DECODE_MERGE_IN_ATTENTION", other):
            assert not da.merges_in_cluster(da.DECODE_CLUSTER), other


def _merges_within_bounds() -> None:
    da = decode_attention
    cu = (Path(da.__file__).parent / "decode_attention.cu").read_text()
    assert f"constexpr int MERGE_MAX_PARTITIONS = {da.MERGE_MAX_PARTITIONS};" in cu, "the kernel's bound is the host's"
    assert not da.merges_in_attention(1, 8, 1), "one partition: nothing to merge"
    assert not da.merges_in_attention(1, 8, da.MERGE_MAX_PARTITIONS + 1)
    assert not da.merges_in_attention(da.MERGE_COUNTERS // 8 + 1, 8, 2), "a counter a token's block column"
    assert da.merges_in_attention(da.MERGE_COUNTERS // 8, 8, da.MERGE_MAX_PARTITIONS), "non-vacuity: at both bounds"
    for floor in ("256", "128", "64"):
        with flag_set("VT_DECODE_MIN_PARTITION", floor):
            for keys in (512, 2048, 8192):
                P = da.num_partitions(1, 8, keys // BS, BS)
                assert da.merges_in_attention(1, 8 * da.head_split(1, 8, 2, P), P), (floor, keys, P)


@pytest.mark.parametrize("floor", ["256", "128", "64"])
def test_no_decode_or_rows_launch_splits_past_the_reduce_kernels_partitions(floor: str) -> None:
    """The rows kernel's partials go through the same reduce: at every VT_ROWS_TARGET_BLOCKS choice (and the decode
    kernel at every VT_DECODE_MIN_PARTITION floor), up to 2,097,152 keys at block sizes 16 and 1, no launch splits a
    context more often than MAX_PARTITIONS (a new choice over it would fail here, not raise in a step). Guard: each
    rule reaches its target somewhere."""
    from backends.kernels import rows_attention
    from vt.env import ROWS_TARGET_BLOCKS

    shapes = [(T, nkv, keys, bs) for T in (1, 2, 17, 64, 512, 65535) for nkv in (1, 2, 8, 64)
              for keys in (16, 4096, 131072, 2097152) for bs in (16, 1) if keys // bs <= 2**22]
    with flag_set("VT_DECODE_MIN_PARTITION", floor):
        plain = max(decode_attention.num_partitions(T, nkv, keys // bs, bs) for T, nkv, keys, bs in shapes)
    assert plain <= decode_attention.MAX_PARTITIONS and plain == decode_attention.TARGET_BLOCKS, plain
    for target in ROWS_TARGET_BLOCKS:
        for least in ("128", "64"):  # VT_ROWS_MIN_PARTITION
            with flag_set("VT_ROWS_TARGET_BLOCKS", target), flag_set("VT_ROWS_MIN_PARTITION", least):
                rows = max(rows_attention.num_partitions(T, nkv, g, keys // bs, bs) for T, nkv, keys, bs in shapes
                           for g in (1, 2, 8))
            assert rows <= decode_attention.MAX_PARTITIONS, f"VT_ROWS_TARGET_BLOCKS={target}: {rows} partitions"
            assert rows == int(target), f"non-vacuity: VT_ROWS_TARGET_BLOCKS={target} reaches {rows}"


# ---- q/k norm + rotary + KV write --------------------------------------------------------------------------------
def rotary_inputs(T: int, nh: int, nkv: int, hd: int, dtype: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    positions = rng.integers(0, 64, T).astype(np.int64)
    slots = rng.permutation(4 * BS)[:T].astype(np.int64)
    slots[-1] = -1  # a padding row
    ang = np.outer(np.arange(64), 1.0 / 10000 ** (np.arange(0, hd, 2) / hd))
    rope = np.concatenate([np.cos(ang), np.cos(ang), -np.sin(ang), np.sin(ang)], axis=-1).astype(np.float32)
    kv = STORAGE[dtype]
    return {"qkv": rng.standard_normal((T, (nh + 2 * nkv) * hd)).astype(np.float32),
            "bias": rng.standard_normal((nh + 2 * nkv) * hd).astype(np.float32),
            "w": (1 + 0.1 * rng.standard_normal((nh + nkv, hd))).astype(np.float32), "rope": rope,
            "positions": positions, "slots": slots,
            "k_cache": narrow_host(np.full((5, BS, nkv, hd), 7.0, np.float32), kv),
            "v_cache": narrow_host(np.full((5, BS, nkv, hd), 7.0, np.float32), kv),
            "q_out": np.zeros((T, nh, hd), np.float32)}


def rotary_reference(a: dict, nh: int, nkv: int, hd: int, has_norm: bool, eps: float = 1e-6) -> tuple:
    x = a["qkv"].astype(np.float64) + a["bias"]
    T = x.shape[0]
    heads = x[:, : (nh + nkv) * hd].reshape(T, nh + nkv, hd)
    if has_norm:
        heads = heads / np.sqrt((heads**2).mean(-1, keepdims=True) + eps)
    heads = heads * a["w"]
    half = hd // 2
    ang = a["positions"][:, None] / 10000 ** (np.arange(0, hd, 2) / hd)
    cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
    x1, x2 = heads[..., :half], heads[..., half:]
    rotated = np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
    return rotated[:, :nh], rotated[:, nh:], x[:, (nh + nkv) * hd :].reshape(T, nkv, hd)


@pytest.mark.parametrize("has_norm", [True, False], ids=["qk-norm", "no-norm"])
@pytest.mark.parametrize("hd", [16, 128])
def test_rotary_twin_norms_rotates_and_writes_the_cache(hd: int, has_norm: bool) -> None:
    nh, nkv = 4, 2
    a = rotary_inputs(6, nh, nkv, hd, "float32")
    rotary.qk_norm_rope_store(np, *(a[k] for k in ("qkv", "bias", "w", "rope", "positions", "slots", "k_cache",
                                                 "v_cache", "q_out")), has_norm=has_norm, eps=1e-6)
    q, k, v = rotary_reference(a, nh, nkv, hd, has_norm)
    assert np.abs(a["q_out"] - q).max() < 1e-4
    live = a["slots"] >= 0
    kc, vc = a["k_cache"].reshape(-1, nkv, hd), a["v_cache"].reshape(-1, nkv, hd)
    assert np.abs(kc[a["slots"][live]] - k[live]).max() < 1e-4
    assert np.abs(vc[a["slots"][live]] - v[live]).max() < 1e-5
    written = np.zeros(len(kc), bool)
    written[a["slots"][live]] = True
    assert (kc[~written] == 7.0).all() and (vc[~written] == 7.0).all(), "a padding row (slot -1) wrote nothing"
    assert live.sum() == 5 and not live[-1], "non-vacuity: one padding row, five written"


# ---- add + RMSNorm, SiLU x up, embedding ------------------------------------------------------------------------
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("mode", ["norm", "add", "add-bias"])
def test_add_rms_norm_twin(mode: str, out_dtype: str) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    delta = rng.standard_normal((3, 96)).astype(np.float32) if mode != "norm" else None
    bias = rng.standard_normal(96).astype(np.float32) if mode == "add-bias" else None
    w = rng.standard_normal(96).astype(np.float32)
    out = np.zeros((3, 96), STORAGE[out_dtype])
    x0 = x.astype(np.float64)
    norm.add_rms_norm(np, x, delta, bias, w, out, eps=1e-6)
    want_x = x0 + (0 if delta is None else delta) + (0 if bias is None else bias)
    want = want_x / np.sqrt((want_x**2).mean(-1, keepdims=True) + 1e-6) * w
    assert np.abs(x - want_x).max() < 1e-5, "the residual stream holds x + delta (+ bias)"
    tol = 1e-5 if out_dtype == "float32" else 2**-7
    assert (np.abs(widen_host(out) - want) / (1 + np.abs(want))).max() <= tol


@pytest.mark.parametrize("group", [20, 4])
def test_silu_mul_and_embed_twins(group: int) -> None:
    """SiLU(gate) x up over gate/up columns alternating `group` at a time (group = I: gate's, then up's)."""
    rng = np.random.default_rng(0)
    g = rng.standard_normal((3, 20)).astype(np.float32)
    u = rng.standard_normal((3, 20)).astype(np.float32)
    gu = np.stack([g.reshape(3, 20 // group, group), u.reshape(3, 20 // group, group)], axis=2).reshape(3, 40)
    out = np.zeros((3, 20), np.float32)
    activation.silu_mul(np, gu, out, group=group)
    g64 = g.astype(np.float64)
    assert np.abs(out - g64 / (1 + np.exp(-g64)) * u).max() < 1e-6
    table = narrow_host(rng.standard_normal((10, 8)).astype(np.float32), np.dtype(np.uint16))
    ids = np.array([3, 0, 9], np.int64)
    emb = np.zeros((3, 8), np.float32)
    norm.embed(np, table, ids, emb)
    assert np.array_equal(emb, widen_host(table[ids]))


# ---- the CUDA kernels against their twins (GPU lane) -------------------------------------------------------------
def assert_within_bound(got: np.ndarray, want: np.ndarray, what: str, rounded_p: bool = False) -> None:
    if got.dtype in (np.uint16, np.float16):
        g, w = widen_host(got).astype(np.float64), widen_host(want).astype(np.float64)
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(w), 1e-30))) - (7 if got.dtype == np.uint16 else 10))
        eps = 2.0 ** (-8 if got.dtype == np.uint16 else -11)
        flips = eps * np.abs(w).max(axis=-1, keepdims=True) if rounded_p else 0
        bad = np.abs(g - w) > ulp * 1.0001 + 1e-5 * (1 + np.abs(w)) + flips
    else:
        bad = np.abs(got.astype(np.float64) - want) > 1e-5 * (1 + np.abs(want))
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} values past the bound"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", DECODE_CASES)
def test_cuda_paged_decode_equals_its_twin(case: str, dtype: str) -> None:
    import cupy

    contexts, nh, nkv, width, qpr = DECODE_CASES[case]
    for hd in HEAD_DIMS:  # every head dim the CUDA backend accepts
        c = decode_case(contexts, nh, nkv, hd, dtype, width, qpr, seed=hd)
        got, want = run_decode(cupy, c), run_decode(np, c)
        assert np.isfinite(widen_host(got)).all(), f"hd={hd}: the kernel read a poisoned key or value"
        assert_within_bound(got, want, f"paged decode attention {case} hd={hd} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("hd", HEAD_DIMS)
def test_cuda_rotary_equals_its_twin(hd: int, dtype: str) -> None:
    import cupy

    for has_norm in (True, False):
        a = rotary_inputs(9, 8, 2, hd, dtype, seed=hd)
        d = {k: cupy.asarray(v) for k, v in a.items()}
        names = ("qkv", "bias", "w", "rope", "positions", "slots", "k_cache", "v_cache", "q_out")
        rotary.qk_norm_rope_store(cupy, *(d[k] for k in names), has_norm=has_norm, eps=1e-6)
        rotary.qk_norm_rope_store(np, *(a[k] for k in names), has_norm=has_norm, eps=1e-6)
        for k in ("q_out", "k_cache", "v_cache"):
            assert_within_bound(d[k].get(), a[k], f"rotary {k} hd={hd} {dtype} norm={has_norm}")


@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16", "float16"])
def test_cuda_norm_activation_and_embed_equal_their_twins(out_dtype: str) -> None:
    import cupy

    rng = np.random.default_rng(1)
    for H in (64, 1024, 4096):
        x = rng.standard_normal((5, H)).astype(np.float32)
        delta, bias, w = (rng.standard_normal(s).astype(np.float32) for s in ((5, H), H, H))
        for d, b in ((None, None), (delta, None), (delta, bias)):
            outs = [np.zeros((5, H), STORAGE[out_dtype]), cupy.zeros((5, H), STORAGE[out_dtype])]
            xs = [x.copy(), cupy.asarray(x)]
            norm.add_rms_norm(np, xs[0], d, b, w, outs[0], eps=1e-6)
            norm.add_rms_norm(cupy, xs[1], *(None if a is None else cupy.asarray(a) for a in (d, b)),
                              cupy.asarray(w), outs[1], eps=1e-6)
            assert_within_bound(xs[1].get(), xs[0], f"add_rms_norm residual H={H}")
            assert_within_bound(outs[1].get(), outs[0], f"add_rms_norm H={H} {out_dtype}")
        gu = rng.standard_normal((5, 2 * H)).astype(np.float32)
        for group in (H, activation.PAIR_COLS):
            acts = [np.zeros((5, H), STORAGE[out_dtype]), cupy.zeros((5, H), STORAGE[out_dtype])]
            activation.silu_mul(np, gu, acts[0], group=group)
            activation.silu_mul(cupy, cupy.asarray(gu), acts[1], group=group)
            assert_within_bound(acts[1].get(), acts[0], f"silu_mul H={H} group={group} {out_dtype}")
    table = narrow_host(rng.standard_normal((50, 96)).astype(np.float32), STORAGE[out_dtype])
    ids = rng.integers(0, 50, 7).astype(np.int64)
    embs = [np.zeros((7, 96), np.float32), cupy.zeros((7, 96), np.float32)]
    norm.embed(np, table, ids, embs[0])
    norm.embed(cupy, cupy.asarray(table), cupy.asarray(ids), embs[1])
    assert np.array_equal(embs[1].get(), embs[0]), "the embedding gather widens exactly"


# ---- varlen causal prefill attention -------------------------------------------------------------------------
PREFILL_CASES = {  # name: chunks as (queries, first position) per sequence (a first position > 0 sees earlier KV)
    "one-prompt": [(37, 0)],
    "chunks-over-earlier-kv": [(70, 64), (5, 130), (64, 0)],
    "tile-edges": [(64, 0), (65, 63), (1, 200)],
    "long-over-earlier-kv": [(200, 700)],  # 900 keys: fifteen key tiles through both stages of the kernel's buffer
}


def prefill_case(chunks: list[tuple[int, int]], nh: int, nkv: int, hd: int, dtype: str, seed: int = 0) -> tuple:
    """Chunks of distinct sequences back to back in one batch, each sequence's blocks shuffled; keys past every
    chunk's last position poisoned (NaN)."""
    from backends.kernels.prefill_attention import prefill_tiles

    rng = np.random.default_rng(seed)
    kv = STORAGE[dtype]
    width = max(-(-(n + p0) // BS) for n, p0 in chunks) + 1
    num_blocks = len(chunks) * width + 4
    k = narrow_host(rng.standard_normal((num_blocks, BS, nkv, hd)).astype(np.float32), kv)
    v = narrow_host(rng.standard_normal((num_blocks, BS, nkv, hd)).astype(np.float32), kv)
    tables = rng.permutation(num_blocks)[: len(chunks) * width].reshape(len(chunks), width).astype(np.int64)
    poison = narrow_host(np.full((nkv, hd), np.nan, np.float32), kv)
    meta, token_row, positions, q0 = [], [], [], 0
    for r, (n, p0) in enumerate(chunks):
        end = n + p0
        for pos in range(end, width * BS):
            k[tables[r, pos // BS], pos % BS] = poison
            v[tables[r, pos // BS], pos % BS] = poison
        meta.append((q0, n, p0, r))
        token_row += [r] * n
        positions += range(p0, end)
        q0 += n
    q = (rng.standard_normal((q0, nh, hd)) * hd**-0.5).astype(np.float32)
    return (q, k, v, tables, prefill_tiles(meta, capacity=len(meta) + 3), np.array(token_row, np.int64),
            np.array(positions, np.int64))


def prefill_reference(q, k, v, tables, token_row, positions) -> np.ndarray:
    """Every token its own float64 softmax over keys 0..its position (decode_reference's loop, one token a row)."""
    T = len(positions)
    c = DecodeCase(q, k, v, tables, token_row, positions, np.dtype(np.float32), 1)
    return decode_reference(c) if T else np.zeros_like(q)


def run_prefill(xp, args: tuple, out_dtype: np.dtype) -> np.ndarray:
    from backends.kernels.prefill_attention import paged_prefill_attention

    put = (lambda a: xp.asarray(a)) if xp is not np else (lambda a: a.copy())
    q = args[0]
    out = xp.zeros(q.shape, out_dtype)
    paged_prefill_attention(xp, *(put(a) for a in args), out)
    return out if xp is np else out.get()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", PREFILL_CASES)
def test_paged_prefill_twin_equals_causal_attention(case: str, dtype: str) -> None:
    """Each chunk's queries attend their sequence's keys up to their own position, earlier chunks' included,
    through the block table; with a bf16 cache q and P are rounded as the tensor cores take them."""
    args = prefill_case(PREFILL_CASES[case], 8, 2, 16, dtype)
    got = widen_host(run_prefill(np, args, STORAGE[dtype])).astype(np.float64)
    want = prefill_reference(*args[:4], *args[5:])
    assert np.isfinite(got).all(), "a poisoned key past a query's position reached its output"
    tol = 1e-5 if dtype == "float32" else 2**-6  # q and P rounded to bf16: a few bf16 ulps
    err = np.abs(got - want) / (1 + np.abs(want))
    assert err.max() <= tol, f"max error {err.max():.2e} over {tol:.1e} ({case}, {dtype})"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", PREFILL_CASES)
def test_cuda_paged_prefill_equals_its_twin(case: str, dtype: str) -> None:
    """The mma.sync kernel (VT_PREFILL_WGMMA=0; the warpgroup kernel has its own test) at every head dim."""
    import cupy

    with flag_set("VT_PREFILL_WGMMA", "0"):
        for hd in HEAD_DIMS:
            args = prefill_case(PREFILL_CASES[case], 8, 2, hd, dtype, seed=hd)
            got, want = run_prefill(cupy, args, STORAGE[dtype]), run_prefill(np, args, STORAGE[dtype])
            assert np.isfinite(widen_host(got)).all(), f"hd={hd}: the kernel read a poisoned key or value"
            assert_within_bound(got, want, f"paged prefill attention {case} hd={hd} {dtype}", rounded_p=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", PREFILL_CASES)
def test_cuda_paged_prefill_two_heads_a_block_equals_its_twin(case: str, dtype: str) -> None:
    """VT_PREFILL_HEADS_A_BLOCK=2 (the cases have 4 query heads a KV head): each block's two heads, from K and V tiles
    copied once for both, within the twin's bound at every head dim the variant serves, the others on one a block."""
    import cupy

    from backends.kernels.prefill_attention import heads_a_block

    with flag_set("VT_PREFILL_HEADS_A_BLOCK", "2"), flag_set("VT_PREFILL_WGMMA", "0"):
        assert heads_a_block(8, 2, 128) == 2, "non-vacuity: the variant runs"
        for hd in HEAD_DIMS:
            args = prefill_case(PREFILL_CASES[case], 8, 2, hd, dtype, seed=hd)
            got, want = run_prefill(cupy, args, STORAGE[dtype]), run_prefill(np, args, STORAGE[dtype])
            assert np.isfinite(widen_host(got)).all(), f"hd={hd}: the kernel read a poisoned key or value"
            assert_within_bound(got, want, f"two heads a block {case} hd={hd} {dtype}", rounded_p=True)


def test_two_heads_a_block_only_where_they_share_a_kv_head_and_fill_a_tiles_copies(
        caplog: pytest.LogCaptureFixture) -> None:
    """VT_PREFILL_HEADS_A_BLOCK=2 takes two heads a block where the query heads a KV head are even and the head dim is
    32 or more (256 threads each a whole 16-byte copy of a 64-key tile); one otherwise (said in a line), and one
    unless asked."""
    from backends.kernels.prefill_attention import _say_heads_a_block_declined, heads_a_block

    _say_heads_a_block_declined.cache_clear()  # said once a shape a process: this test sees its own line
    caplog.set_level(logging.WARNING, logger="vt")
    assert heads_a_block(16, 8, 16) == 1, "one unless asked"
    with flag_set("VT_PREFILL_HEADS_A_BLOCK", "2"):
        assert heads_a_block(16, 8, 128) == 2 and heads_a_block(32, 8, 64) == 2
        assert "does not apply" not in caplog.text, "non-vacuity: no line unless declined"
        assert heads_a_block(8, 8, 128) == 1, "one query head a KV head: nothing to share"
        assert heads_a_block(24, 8, 128) == 1, "three a KV head: a pair would straddle two KV heads"
        assert heads_a_block(16, 8, 16) == 1, "head dim 16: a tile is fewer copies than 256 threads"
    assert "VT_PREFILL_HEADS_A_BLOCK=2 does not apply (3 query heads a KV head" in caplog.text, "declined, said"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("case", PREFILL_CASES)
def test_cuda_paged_prefill_wgmma_equals_its_twin(case: str, dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """VT_PREFILL_WGMMA=1 on an sm_90 device: the warpgroup kernel (prefill_wgmma.cu: swizzled K and V tiles read by
    wgmma through descriptors) within the twin's bound at both head dims it serves and both register budgets (2 and 3
    blocks a multiprocessor; these grids are small, so the binding's pick is forced), for every case (a chunk over
    earlier chunks' keys, tile edges, a long one); the wgmma instance is what each launch asked for."""
    import cupy

    from backends.kernels import prefill_attention
    from backends.kernels.prefill_attention import WGMMA_BLOCKS, WGMMA_HEAD_DIMS, takes_wgmma

    cc = int(cupy.cuda.Device().compute_capability)
    if cc != 90:
        pytest.skip(f"wgmma (sm_90a) runs on compute capability 9.0, not {cc}")
    storage = STORAGE[dtype]
    ctype = "vt::bf16" if dtype == "bfloat16" else "vt::f16"
    asked: list[str] = []
    real_function = prefill_attention.function

    def spy(cp: Any, inst: Any) -> Any:  # the instance each launch asks for (a loaded one stays loaded: no proof)
        asked.append(inst.expr)
        return real_function(cp, inst)

    monkeypatch.setattr(prefill_attention, "function", spy)
    with flag_set("VT_PREFILL_WGMMA", "1"):
        for blocks in WGMMA_BLOCKS:
            monkeypatch.setattr(prefill_attention, "wgmma_blocks_an_sm", lambda grid, sms, b=blocks: b)
            for hd in WGMMA_HEAD_DIMS:
                assert takes_wgmma(hd, storage, lambda: cc), "non-vacuity: the variant runs"
                args = prefill_case(PREFILL_CASES[case], 8, 2, hd, dtype, seed=hd)
                asked.clear()
                got = run_prefill(cupy, args, storage)
                assert asked == [f"vt::paged_prefill_wgmma<{ctype}, {ctype}, {hd}, {blocks}>"], asked
                want = run_prefill(np, args, storage)
                assert np.isfinite(widen_host(got)).all(), f"hd={hd}: the kernel read a poisoned key or value"
                assert_within_bound(got, want, f"wgmma prefill {case} hd={hd} {dtype} {blocks} an SM", rounded_p=True)


def test_wgmma_prefill_takes_fewer_registers_where_its_grid_is_several_waves() -> None:
    """Three blocks a multiprocessor (167-168 registers) where the step's token tiles are more than one wave of two, as
    4,096 and 7,936 tokens of the 0.6B shape are on a 132-multiprocessor H100; two where they are one wave, as 1,024
    tokens are (16 tiles of 64 queries x 16 heads)."""
    from backends.kernels.prefill_attention import TILE_QUERIES, wgmma_blocks_an_sm

    def blocks(tokens: int, sms: int = 132) -> int:
        return wgmma_blocks_an_sm(-(-tokens // TILE_QUERIES) * 16, sms)

    assert blocks(1024) == 2
    assert blocks(4096) == 3 and blocks(7936) == 3
    assert blocks(4096, sms=1024) == 2, "one wave on a device of more multiprocessors"


def _wgmma_launch(monkeypatch: pytest.MonkeyPatch, n: int, capacity: int = 0) -> Any:
    """The prefill binding called as the CUDA backend calls it, with its own namespace (unhashable, as a SimpleNamespace
    is) and stand-ins: an sm_90 device of 132 multiprocessors, the launch stopped before it compiles. n tokens of one
    prompt, 16 heads at head dim 128, the tiles padded to `capacity` as a graph bucket's are. The Instance it asked
    for, or a TypeError's text."""
    from types import SimpleNamespace

    from backends.kernels import prefill_attention
    from backends.kernels.prefill_attention import paged_prefill_attention, prefill_tiles

    device = SimpleNamespace(id=0, compute_capability="90", attributes={"MultiProcessorCount": 132})
    cp = SimpleNamespace(cuda=SimpleNamespace(Device=lambda: device))
    monkeypatch.setattr(prefill_attention, "function", _reached_the_launch)
    monkeypatch.setattr(prefill_attention, "_SM_COUNTS", {})
    q = np.zeros((n, 16, 128), np.float32)
    cache = np.zeros((4, 16, 8, 128), np.uint16)
    table, tiles = np.zeros((1, -(-n // 16)), np.int64), prefill_tiles([(0, n, 0, 0)], capacity)
    try:
        paged_prefill_attention.cuda(cp, q, cache, cache, table, tiles, np.zeros(n, np.int64),
                                     np.arange(n, dtype=np.int64), np.zeros(q.shape, np.uint16))
    except _LaunchReached as reached:
        return reached.args[0]
    except TypeError as e:
        pytest.fail(f"the wgmma binding cannot take the backend's namespace: {e}")
    pytest.fail("the binding launched nothing")


def test_the_wgmma_binding_takes_the_backends_namespace(monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA backend hands a kernel its own namespace, not the cupy module: the warpgroup binding reads the device
    through it (session 32's first engine run on an H100 failed on a cache keyed by it: TypeError: unhashable type). A
    7,936-token prefill of 16 heads is several waves of 2 blocks an SM: the instance of 3."""
    from backends.kernels.prefill_attention import WGMMA_ARCH

    inst = _wgmma_launch(monkeypatch, 7936)
    assert (inst.file, inst.arch) == ("prefill_wgmma.cu", WGMMA_ARCH), inst
    assert inst.expr == "vt::paged_prefill_wgmma<vt::bf16, vt::bf16, 128, 3>", inst


def test_the_wgmma_binding_counts_a_graph_buckets_tiles_by_its_tokens(monkeypatch: pytest.MonkeyPatch) -> None:
    """A graph bucket's tile buffer is padded far past its tokens' tiles (max_tiles: 1,040 rows for 1,024 tokens, so
    16,640 blocks of which 256 work): the blocks-an-SM pick counts the tokens' tiles, one wave here, so 2 (the review
    of session 32 found the padded grid picked 3 for every bucket)."""
    from backends.kernels.prefill_attention import max_tiles

    assert _wgmma_launch(monkeypatch, 1024).expr.endswith(", 128, 2>"), "non-vacuity: unpadded, one wave"
    padded = _wgmma_launch(monkeypatch, 1024, capacity=max_tiles(1024, 1024))
    assert padded.expr.endswith(", 128, 2>"), f"a padded bucket of one wave's work took {padded.expr}"


def test_heads_a_block_is_said_not_to_apply_where_the_wgmma_kernel_serves(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """VT_PREFILL_HEADS_A_BLOCK=2 belongs to the mma.sync kernel: where the warpgroup kernel serves the shape, the flag
    is said (once a head dim) not to apply, not silently dropped."""
    from backends.kernels.prefill_attention import _say_heads_a_block_not_wgmmas

    _say_heads_a_block_not_wgmmas.cache_clear()
    caplog.set_level(logging.WARNING, logger="vt")
    _wgmma_launch(monkeypatch, 256)
    assert "VT_PREFILL_HEADS_A_BLOCK" not in caplog.text, "non-vacuity: unasked, nothing said"
    with flag_set("VT_PREFILL_HEADS_A_BLOCK", "2"):
        assert "paged_prefill_wgmma" in _wgmma_launch(monkeypatch, 256).expr
    assert "VT_PREFILL_HEADS_A_BLOCK applies to the mma.sync prefill kernel" in caplog.text, "asked, said"


def test_wgmma_prefill_only_where_the_shape_and_device_serve_it(caplog: pytest.LogCaptureFixture) -> None:
    """VT_PREFILL_WGMMA (auto by default, or 1) takes the warpgroup kernel for a 16-bit cache at head dims 64 and 128
    on compute capability 9.0; any other shape or device keeps the mma.sync kernel, said in a line where 1 asked for
    it (auto says nothing); 0 never takes it."""
    from backends.kernels.prefill_attention import _say_wgmma_declined, takes_wgmma

    _say_wgmma_declined.cache_clear()
    caplog.set_level(logging.WARNING, logger="vt")
    bf16, sm90 = STORAGE["bfloat16"], lambda: 90
    assert takes_wgmma(128, bf16, sm90) and takes_wgmma(64, np.float16, sm90), "auto (the default) takes it"
    assert not takes_wgmma(256, bf16, sm90), "auto: head dim 256 keeps the mma.sync kernel"
    assert not takes_wgmma(128, bf16, lambda: 80), "an sm_90a cubin runs on 9.0 alone (auto)"
    assert "does not apply" not in caplog.text, "auto declines without a word"
    with flag_set("VT_PREFILL_WGMMA", "0"):
        assert not takes_wgmma(128, bf16, sm90), "0: never"
    with flag_set("VT_PREFILL_WGMMA", "1"):
        assert takes_wgmma(128, bf16, sm90) and takes_wgmma(64, np.float16, sm90)
        assert "does not apply" not in caplog.text, "non-vacuity: no line unless declined"
        assert not takes_wgmma(128, np.float32, sm90), "a float32 cache: no tensor-core operands"
        assert not takes_wgmma(256, bf16, sm90) and not takes_wgmma(32, bf16, sm90), "head dims 64 and 128 only"
        assert not takes_wgmma(128, bf16, lambda: 80) and not takes_wgmma(128, bf16, lambda: 100), \
            "an sm_90a cubin runs on 9.0 alone"
    assert "VT_PREFILL_WGMMA=1 does not apply (head dim 256" in caplog.text, "declined, said"
    assert "compute capability 100" in caplog.text, "the device's refusal names its capability"


# ---- tokens between steps (async scheduling) ------------------------------------------------------------------
def _token_case(n: int = 300, slots: int = 256) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(4)
    tokens = rng.integers(0, 1000, n).astype(np.int64)
    src = np.where(rng.random(n) < 0.7, rng.integers(0, slots, n), -1).astype(np.int64)
    dst = np.where(rng.random(n) < 0.8, rng.permutation(slots)[np.arange(n) % slots], -1).astype(np.int64)
    dst[slots:][np.isin(dst[slots:], dst[:slots])] = -1  # a slot is kept by one row at most
    last = rng.integers(0, 1000, slots).astype(np.int64)
    return tokens, src, dst, last


def test_feed_and_keep_twins_move_tokens_by_request_slot() -> None:
    from backends.kernels import tokens as tk

    tokens, src, dst, last = _token_case()
    last[src[src >= 0][0]] = -1  # a failed row's sampled id: read as token 0, never as an index before the table
    fed, kept = tokens.copy(), last.copy()
    tk.feed_tokens(np, fed, src, last)
    want = [max(0, int(last[s])) if s >= 0 else int(t) for t, s in zip(tokens, src)]
    assert fed.tolist() == want and (src >= 0).any() and (src < 0).any(), "fed where asked, kept elsewhere"
    assert 0 in fed[src == src[src >= 0][0]], "non-vacuity: a -1 was fed"
    tk.keep_sampled(np, tokens, dst, kept)
    for i in np.flatnonzero(dst >= 0):
        assert kept[dst[i]] == tokens[i]
    untouched = np.setdiff1d(np.arange(last.size), dst[dst >= 0])
    assert untouched.size and (kept[untouched] == last[untouched]).all(), "slots no row keeps are left alone"


@pytest.mark.gpu
def test_cuda_feed_and_keep_equal_their_twins() -> None:
    import cupy

    from backends.kernels import tokens as tk

    tokens, src, dst, last = _token_case()
    last[src[src >= 0][0]] = -1
    fed, d_fed = tokens.copy(), cupy.asarray(tokens)
    tk.feed_tokens(np, fed, src, last)
    tk.feed_tokens(cupy, d_fed, cupy.asarray(src), cupy.asarray(last))
    kept, d_kept = last.copy(), cupy.asarray(last)
    tk.keep_sampled(np, tokens, dst, kept)
    tk.keep_sampled(cupy, cupy.asarray(tokens), cupy.asarray(dst), d_kept)
    assert np.array_equal(d_fed.get(), fed) and np.array_equal(d_kept.get(), kept)


class _LaunchReached(Exception):
    pass


def _reached_the_launch(cp: object, inst: object) -> None:
    """Stands in for `build.function`: a call a binding's guard lets through stops here, on any machine (a GPU
    machine's kernel cache would otherwise launch it)."""
    raise _LaunchReached(inst)


@pytest.mark.parametrize("block_size", [12, 128])
def test_the_prefill_kernels_binding_refuses_a_block_size_its_shifts_cannot_serve(
        block_size: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA prefill kernel finds a key's cache block by shifts inside a 64-key tile: a block size that is not a
    power of two dividing the tile must be refused before any launch, not read wrong blocks."""
    from backends.kernels import prefill_attention
    from backends.kernels.prefill_attention import paged_prefill_attention
    from vt.errors import EngineInvariantError

    monkeypatch.setattr(prefill_attention, "function", _reached_the_launch)

    def launch(bs: int) -> None:
        q = np.zeros((4, 2, 16), np.float32)
        cache = np.zeros((3, bs, 1, 16), np.uint16)
        paged_prefill_attention.cuda(None, q, cache, cache, np.zeros((1, 3), np.int64), np.zeros((1, 4), np.int32),
                                     np.zeros(4, np.int64), np.arange(4, dtype=np.int64),
                                     np.zeros((4, 2, 16), np.uint16))

    with guarding(f"block size {block_size} is refused before any launch", _LaunchReached):
        with pytest.raises(EngineInvariantError, match=f"block size {block_size}"):
            launch(block_size)
    with pytest.raises(_LaunchReached):  # non-vacuity: the engine's block size 16 passes the guard
        launch(16)


def test_the_decode_kernels_binding_refuses_a_block_size_its_shifts_cannot_serve(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The CUDA decode kernel finds a key's cache block by shifts: a block size that is not a power of two must be
    refused before any launch, not read wrong blocks."""
    from backends.kernels import decode_attention
    from backends.kernels.decode_attention import paged_decode_attention
    from vt.errors import EngineInvariantError

    monkeypatch.setattr(decode_attention, "function", _reached_the_launch)

    def launch(bs: int) -> None:
        cache = np.zeros((3, bs, 1, 16), np.uint16)
        paged_decode_attention.cuda(None, np.zeros((2, 2, 16), np.float32), cache, cache, np.zeros((1, 3), np.int64),
                                    np.zeros(2, np.int64), np.arange(2, dtype=np.int64),
                                    np.zeros((2, 2, 16), np.uint16), None, None)

    with guarding("block size 12 is refused before any launch", _LaunchReached):
        with pytest.raises(EngineInvariantError, match="block size 12"):
            launch(12)
    with pytest.raises(_LaunchReached):  # non-vacuity: the engine's block size 16 passes the guard
        launch(16)


def test_the_decode_binding_refuses_one_partials_array_without_the_other(monkeypatch: pytest.MonkeyPatch) -> None:
    """A table wider than one partition writes each partition's output to part_o and its max and sum to part_ml:
    given one of them alone, the kernel would write through a null pointer, so the binding refuses before any
    launch (the twin too)."""
    from backends.kernels import decode_attention
    from backends.kernels.decode_attention import paged_decode_attention
    from vt.errors import EngineInvariantError

    monkeypatch.setattr(decode_attention, "function", _reached_the_launch)
    T, nh, hd, P = 2, 2, 16, 4
    cache = np.zeros((8, 16, 1, hd), np.uint16)
    args = (np.zeros((T, nh, hd), np.float32), cache, cache, np.zeros((1, 8), np.int64), np.zeros(T, np.int64),
            np.arange(T, dtype=np.int64), np.zeros((T, nh, hd), np.uint16))
    part_o, part_ml = np.zeros((T, nh, P, hd), np.float32), np.zeros((T, nh, P, 2), np.float32)
    for body in (paged_decode_attention.cuda, lambda *a: paged_decode_attention.twin(*a[1:])):
        for one in ((None, part_ml), (part_o, None)):
            with guarding("one partials array alone is refused before any launch", _LaunchReached):
                with pytest.raises(EngineInvariantError, match="part_o and part_ml come together"):
                    body(None, *args, *one)
    with pytest.raises(_LaunchReached):  # non-vacuity: both arrays pass the guard
        paged_decode_attention.cuda(None, *args, part_o, part_ml)
