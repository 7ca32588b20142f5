"""The decode attention's rope variant (VT_ROPE_IN_ATTENTION): paged_decode_attention_rope runs rotary.cu's q/k norm,
rotary and KV write in the attention's prologue, one launch a layer fewer for a decode step of one token a sequence.
On the CPU its twin composes the two twins; on CUDA the kernel must give what the two kernels give, bit for bit (the
same float32 operations: q never leaves the block, the new key is read back from the cache as the attention would
read it). Each case's new-token slots hold NaN before the launch, so a key attended before it was written shows."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from backends.kernels import decode_attention, rotary
from backends.kernels.fused import HEAD_DIMS
from tests.backends.launches import launched_names
from tests.backends.test_kernels import (
    BS,
    DECODE_CASES,
    SHORT_TABLE,
    assert_within_bound,
    decode_case,
    rotary_reference,
)
from tests.helpers import flag_set
from vt.dtypes import narrow_host, widen_host
from vt.errors import EngineInvariantError

ONE_TOKEN_CASES = [name for name, case in DECODE_CASES.items() if case[4] == 1]


def rope_case(name: str, hd: int, dtype: str, seed: int = 0,
              spec: tuple[list[int], int, int, int, int] | None = None) -> dict[str, Any]:
    """DECODE_CASES' rows (one token each; or spec's, in their layout) and a qkv projection for their new tokens.
    Each token's own slot (its position in its table) holds NaN, as a stale block would; one more row is padding
    (slot -1, position 0) whose table row is poisoned: what it reads and writes is nobody's."""
    contexts, nh, nkv, width, _ = spec or DECODE_CASES[name]
    c = decode_case(contexts + [1], nh, nkv, hd, dtype, width, seed=seed)
    rng = np.random.default_rng(seed + 1)
    T = len(contexts) + 1
    slots = np.array([c.tables[t, (p // BS)] * BS + p % BS for t, p in enumerate(c.positions)], np.int64)
    slots[-1] = -1
    kf, vf = c.k_cache.reshape(-1, nkv, hd), c.v_cache.reshape(-1, nkv, hd)
    nan = narrow_host(np.full((nkv, hd), np.nan, np.float32), c.k_cache.dtype)
    for s in slots[:-1]:
        kf[s], vf[s] = nan, nan
    top = int(c.positions.max()) + 1
    ang = np.outer(np.arange(top), 1.0 / 10000 ** (np.arange(0, hd, 2) / hd))
    rope = np.concatenate([np.cos(ang), np.cos(ang), -np.sin(ang), np.sin(ang)], axis=-1).astype(np.float32)
    w = (1 + 0.1 * rng.standard_normal((nh + nkv, hd))).astype(np.float32)
    w[:nh] *= hd**-0.5  # q's rows carry the attention scale
    P = c.num_partitions
    return {"qkv": rng.standard_normal((T, (nh + 2 * nkv) * hd)).astype(np.float32),
            "bias": (0.1 * rng.standard_normal((nh + 2 * nkv) * hd)).astype(np.float32), "w": w, "rope": rope,
            "slots": slots, "k_cache": c.k_cache, "v_cache": c.v_cache, "block_tables": c.tables,
            "token_row": c.token_row, "positions": c.positions, "out": np.zeros((T, nh, hd), c.out_dtype),
            "part_o": None if P == 1 else np.zeros((T, nh, P, hd), np.float32),
            "part_ml": None if P == 1 else np.zeros((T, nh, P, 2), np.float32)}


NAMES = ("qkv", "bias", "w", "rope", "slots", "k_cache", "v_cache", "block_tables", "token_row", "positions", "out",
         "part_o", "part_ml")


def fused(xp: Any, a: dict[str, Any], has_norm: bool, bias: bool = True, merge_counters: Any = None) -> dict[str, Any]:
    """The rope variant on copies of a's arrays (CuPy's or NumPy's): what it wrote, on the host. On CUDA each cache
    is a view one block into a buffer whose first block is zeros (a guard: a write at slot -1, a padding row's,
    lands in it); "guards" is whether both guards are still zeros. merge_counters (CUDA): zeroed counters, so the
    kernel's last blocks merge a split context's partitions."""
    d = {k: None if v is None else (xp.asarray(v) if xp is not np else v.copy()) for k, v in a.items()}
    if not bias:
        d["bias"] = None
    whole = {}
    if xp is not np:
        for k in ("k_cache", "v_cache"):
            whole[k] = xp.concatenate([xp.zeros_like(d[k][:1]), d[k]])
            d[k] = whole[k][1:]
    merge = {} if merge_counters is None else {"merge_counters": merge_counters.data.ptr}
    decode_attention.paged_decode_attention_rope(xp, *(d[k] for k in NAMES), has_norm=has_norm, eps=1e-6, **merge)
    out = {k: d[k] if xp is np else d[k].get() for k in ("out", "k_cache", "v_cache")}
    out["guards"] = all(not bool(w[0].any()) for w in whole.values())
    return out


def unfused(xp: Any, a: dict[str, Any], has_norm: bool, bias: bool = True) -> dict[str, Any]:
    """The two launches it replaces, qk_norm_rope_store then paged_decode_attention, on copies."""
    d = {k: None if v is None else (xp.asarray(v) if xp is not np else v.copy()) for k, v in a.items()}
    T, nh, hd = a["out"].shape
    q = xp.zeros((T, nh, hd), np.float32)
    rotary.qk_norm_rope_store(xp, d["qkv"], d["bias"] if bias else None, d["w"], d["rope"], d["positions"],
                              d["slots"], d["k_cache"], d["v_cache"], q, has_norm=has_norm, eps=1e-6)
    decode_attention.paged_decode_attention(xp, q, d["k_cache"], d["v_cache"], d["block_tables"], d["token_row"],
                                            d["positions"], d["out"], d["part_o"], d["part_ml"])
    return {k: d[k] if xp is np else d[k].get() for k in ("out", "k_cache", "v_cache")}


def attention_reference(a: dict[str, Any], has_norm: bool) -> np.ndarray:
    """float64: q, k from rotary's reference, v as projected; each live token attends its older keys (from the
    cache) and its own new key and value."""
    T, nh, hd = a["out"].shape
    nkv = a["k_cache"].shape[2]
    q, k_new, v_new = rotary_reference(a, nh, nkv, hd, has_norm)
    out = np.zeros((T, nh, hd))
    for t in range(T - 1):  # the last row is padding
        pos = np.arange(int(a["positions"][t]))
        blocks = a["block_tables"][a["token_row"][t], pos // BS]
        k = np.concatenate([widen_host(a["k_cache"][blocks, pos % BS]), k_new[t][None]]).astype(np.float64)
        v = np.concatenate([widen_host(a["v_cache"][blocks, pos % BS]), v_new[t][None]]).astype(np.float64)
        for h in range(nh):
            s = k[:, h // (nh // nkv)] @ q[t, h]
            p = np.exp(s - s.max())
            out[t, h] = (p / p.sum()) @ v[:, h // (nh // nkv)]
    return out


@pytest.mark.parametrize("has_norm", [True, False], ids=["qk-norm", "no-norm"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", ONE_TOKEN_CASES)
def test_the_rope_variants_twin_attends_the_key_it_writes(case: str, dtype: str, has_norm: bool) -> None:
    """The twin against float64: q and the new k normed and rotated, the new k and v written at each live token's
    slot (the padding row's slot -1 writes nothing) and attended with the older keys."""
    a = rope_case(case, 16, dtype)
    got = fused(np, a, has_norm)
    live = a["slots"] >= 0
    T, nh, hd = a["out"].shape
    nkv = a["k_cache"].shape[2]
    _, k_new, v_new = rotary_reference(a, nh, nkv, hd, has_norm)
    kf, vf = widen_host(got["k_cache"]).reshape(-1, nkv, hd), widen_host(got["v_cache"]).reshape(-1, nkv, hd)
    tol = 1e-5 if dtype == "float32" else 2**-7
    assert np.abs(kf[a["slots"][live]] - k_new[live]).max() <= tol * (1 + np.abs(k_new).max())
    assert np.abs(vf[a["slots"][live]] - v_new[live]).max() <= tol * (1 + np.abs(v_new).max())
    want = attention_reference(a, has_norm)
    out = widen_host(got["out"]).astype(np.float64)[live]
    assert np.isfinite(out).all(), "a NaN slot was attended before its key was written, or a key past a context"
    err = np.abs(out - want[live]) / (1 + np.abs(want[live]))
    assert err.max() <= tol, f"max error {err.max():.2e} over {tol:.1e}"
    untouched = np.ones(len(kf), bool)
    untouched[a["slots"][live]] = False
    before = widen_host(a["k_cache"]).reshape(-1, nkv, hd)[untouched]
    assert np.array_equal(kf[untouched], before, equal_nan=True), "only the live tokens' slots were written"
    assert live.sum() == T - 1 and np.abs(want).max() > 0.1, "non-vacuity: a padding row; outputs far from zero"


def test_the_rope_variant_refuses_two_tokens_of_one_sequence() -> None:
    """Speculative verification's tokens share a sequence, and a short prefill run whole gives each of a chunk's tokens
    a copy of its table: either way one token's block would attend a key another block of the launch writes (a race
    on CUDA), so the twin refuses it; the padding rows (slot -1) write nothing and may share a row."""
    a = rope_case("block-edges-gqa2", 16, "float32")
    shared = dict(a, token_row=np.array([0, 0, 2, 3, 4], np.int64))
    with pytest.raises(EngineInvariantError, match="two tokens of one sequence"):
        fused(np, shared, True)
    tables = a["block_tables"].copy()
    tables[1] = tables[0]  # a short prefill run whole: each token its own row, a copy of its sequence's table
    copied = dict(a, block_tables=tables, positions=np.array([13, 14, 16, 31, 0], np.int64),
                  slots=np.array([tables[0, 0] * BS + 13, tables[0, 0] * BS + 14, *a["slots"][2:]], np.int64))
    with pytest.raises(EngineInvariantError, match="two tokens of one sequence"):
        fused(np, copied, True)
    padding = dict(a, token_row=np.array([0, 1, 2, 3, 3], np.int64))
    assert np.isfinite(widen_host(fused(np, padding, True)["out"][:-1])).all(), "non-vacuity: a padding row may share"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", ONE_TOKEN_CASES)
def test_cuda_rope_variant_equals_the_two_launches_it_replaces_bit_for_bit(case: str, dtype: str) -> None:
    """The kernel against qk_norm_rope_store + paged_decode_attention on the GPU, at every head dim, with and without
    the q/k norm and the bias: the output and both caches equal bit for bit (a block split across partitions, a head
    split, GQA 1/2/4/8 and a padding row among the cases); and both within the twin's bound."""
    import cupy

    runs = 0
    for hd in HEAD_DIMS:
        a = rope_case(case, hd, dtype, seed=hd)
        for has_norm, bias in ((True, True), (False, False)):
            got, want = fused(cupy, a, has_norm, bias), unfused(cupy, a, has_norm, bias)
            for k in ("out", "k_cache", "v_cache"):
                assert np.array_equal(got[k], want[k], equal_nan=True), f"{k} hd={hd} norm={has_norm}"
            assert got["guards"], f"hd={hd}: a padding row (slot -1) wrote before the caches"
            live = a["slots"] >= 0
            assert np.isfinite(widen_host(got["out"])[live]).all(), f"hd={hd}: a NaN slot was attended"
            twin = fused(np, a, has_norm, bias)
            assert_within_bound(got["out"][live], twin["out"][live], f"rope attention {case} hd={hd} {dtype}")
            runs += 1
    assert runs == 2 * len(HEAD_DIMS), "non-vacuity: every head dim, both configurations"


def assert_variant_equals_the_two_launches(case: str, dtype: str, early_keys: str, early_tiles: str = "1") -> None:
    """The rope variant under VT_DECODE_EARLY_KEYS / VT_DECODE_EARLY_TILES, at every head dim, against the two launches
    it replaces: output and caches bit for bit (the own slot holds NaN before its write), and no NaN attended."""
    import cupy

    with flag_set("VT_DECODE_EARLY_KEYS", early_keys), flag_set("VT_DECODE_EARLY_TILES", early_tiles):
        for hd in HEAD_DIMS:
            a = rope_case(case, hd, dtype, seed=hd)
            got, want = fused(cupy, a, True, True), unfused(cupy, a, True, True)
            for k in ("out", "k_cache", "v_cache"):
                assert np.array_equal(got[k], want[k], equal_nan=True), f"{k} hd={hd}"
            live = a["slots"] >= 0
            assert live.any() and np.isfinite(widen_host(got["out"])[live]).all(), f"hd={hd}: a NaN slot attended"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", ONE_TOKEN_CASES)
def test_cuda_rope_variant_reading_keys_before_its_wait_equals_the_two_launches(case: str, dtype: str) -> None:
    """VT_DECODE_EARLY_KEYS=1: the first tile read before the wait, the token's own key (its slot holds NaN before
    the write) read after it. Output and caches equal the two launches' bit for bit at every head dim: the own key in a
    warp's first tile (one-token, block edges; partitions' last partition; full width at head dim 16, whose tile is
    128 keys) and in a later tile (tiles; full width at the other head dims). Eager launches: the read before the
    wait overlaps nothing here (test_launch's captured step does that)."""
    assert_variant_equals_the_two_launches(case, dtype, early_keys="1")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", ONE_TOKEN_CASES)
def test_cuda_rope_variant_reading_two_tiles_before_its_wait_equals_the_two_launches(case: str, dtype: str) -> None:
    """VT_DECODE_EARLY_TILES=2: the first two tiles requested before the wait, the token's own key (NaN in its slot
    before the write) in either of them read after it. Output and caches equal the two launches' bit for bit."""
    assert_variant_equals_the_two_launches(case, dtype, early_keys="1", early_tiles="2")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", ONE_TOKEN_CASES)
def test_cuda_rope_variant_reading_keys_after_its_wait_equals_the_two_launches(case: str, dtype: str) -> None:
    """VT_DECODE_EARLY_KEYS=0 (on by default since session 37, so the tests above run the early form): the first
    tile requested after the wait, as before session 36; output and caches equal the two launches' bit for bit."""
    assert_variant_equals_the_two_launches(case, dtype, early_keys="0")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_cuda_rope_variant_at_the_lowest_partition_floor_equals_the_two_launches(dtype: str) -> None:
    """VT_DECODE_MIN_PARTITION=64 (the c=1 A/B's other side): a 256-key table in four partitions, new keys in the
    first, on its edge, just past it and in the last; the variant equals the two launches bit for bit."""
    import cupy

    with flag_set("VT_DECODE_MIN_PARTITION", "64"):
        for hd in HEAD_DIMS:
            a = rope_case("", hd, dtype, seed=hd, spec=([1, 64, 65, 255], 4, 2, SHORT_TABLE, 1))
            assert a["part_ml"] is not None and a["part_ml"].shape[2] == 4, "non-vacuity: four partitions"
            got, want = fused(cupy, a, True), unfused(cupy, a, True)
            for k in ("out", "k_cache", "v_cache"):
                assert np.array_equal(got[k], want[k], equal_nan=True), f"{k} hd={hd}"
            assert got["guards"], f"hd={hd}: a padding row (slot -1) wrote before the caches"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cuda_rope_variant_merging_its_partitions_in_its_last_block_equals_the_two_launches(dtype: str) -> None:
    """VT_DECODE_MERGE_IN_ATTENTION=1: given the counters, the last block of each token's partitions merges them
    and no reduce kernel runs. Output and caches equal the two launches' (attention + reduce) bit for bit at every
    head dim: GQA 8 over three partitions, the 64-key floor's four (a context of one partition among them: its block
    merges alone), and an MQA head's 8 query heads dealt to 4 blocks over two partitions (the counters a token's
    block columns); every counter is back at zero after each launch (the next layer and the graph's next replay take
    them)."""
    import cupy

    floor = str(decode_attention.MIN_PARTITION)
    cases = [("partitions-gqa8", None, floor), ("floor-64", ([1, 64, 65, 255], 4, 2, SHORT_TABLE, 1), "64"),
             ("head-split", ([300, 511], 8, 1, 2 * SHORT_TABLE, 1), floor)]
    counters = cupy.zeros(decode_attention.MERGE_COUNTERS, cupy.uint32)
    merged, splits = 0, set()
    for name, spec, floor in cases:
        with flag_set("VT_DECODE_MIN_PARTITION", floor), flag_set("VT_DECODE_MERGE_IN_ATTENTION", "1"):
            for hd in HEAD_DIMS:
                a = rope_case(name if spec is None else "", hd, dtype, seed=hd, spec=spec)
                T, nh, _ = a["out"].shape
                nkv, P = a["k_cache"].shape[2], 1 if a["part_ml"] is None else a["part_ml"].shape[2]
                split = decode_attention.head_split(T, nkv, nh // nkv, P)
                splits.add(split)
                assert decode_attention.merges_in_attention(T, nkv * split, P), f"non-vacuity: {name} merges in it"
                got, want = fused(cupy, a, True, merge_counters=counters), unfused(cupy, a, True)
                for k in ("out", "k_cache", "v_cache"):
                    assert np.array_equal(got[k], want[k], equal_nan=True), f"{name} {k} hd={hd}"
                assert got["guards"], f"{name} hd={hd}: a padding row (slot -1) wrote before the caches"
                assert not counters.any().item(), f"{name} hd={hd}: a counter left above zero"
                merged += 1
    assert merged == len(cases) * len(HEAD_DIMS) and max(splits) > 1, (merged, splits)


# (contexts, query heads, KV heads, table blocks, tokens a sequence): two partitions at the 128-key floor
CLUSTER_CASES = [("gqa2", ([1, 100, 128, 129, 200, 256], 8, 4, SHORT_TABLE, 1)),
                 ("mqa-split", ([129, 255], 8, 1, SHORT_TABLE, 1))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_cuda_rope_variant_merging_its_partitions_in_a_cluster_equals_the_two_launches(dtype: str) -> None:
    """VT_DECODE_MERGE_IN_ATTENTION=cluster: a launch of two partitions (a 256-key table at the 128-key floor) runs as
    clusters of a token's two blocks of one block column, rank 0 merging through distributed shared memory, and no
    reduce kernel runs. Output and caches equal the two launches' (attention + reduce) bit for bit at every head dim:
    GQA 2 with contexts on both sides of the partition boundary (at most 128 keys: the second block idle, passing
    the cluster's barriers alone), and an MQA head's 8 query heads dealt to several blocks."""
    import cupy

    if not decode_attention._has_clusters():
        pytest.skip("thread-block clusters need compute capability 9.0")
    merged, splits, reduces = 0, set(), []
    reduce = decode_attention._reduce
    with flag_set("VT_DECODE_MIN_PARTITION", "128"), flag_set("VT_DECODE_MERGE_IN_ATTENTION", "cluster"), \
            pytest.MonkeyPatch.context() as mp:
        for name, spec in CLUSTER_CASES:
            for hd in HEAD_DIMS:
                a = rope_case("", hd, dtype, seed=hd, spec=spec)
                T, nh, _ = a["out"].shape
                nkv, P = a["k_cache"].shape[2], 1 if a["part_ml"] is None else a["part_ml"].shape[2]
                splits.add(decode_attention.head_split(T, nkv, nh // nkv, P))
                assert decode_attention.merges_in_cluster(P), f"non-vacuity: {name} merges in a cluster ({P})"
                mp.setattr(decode_attention, "_reduce", lambda *args: reduces.append(args) or reduce(*args))
                got = fused(cupy, a, True)
                mp.undo()
                assert reduces == [], f"{name} hd={hd}: the cluster launch left its merge to the reduce kernel"
                want = unfused(cupy, a, True)
                for k in ("out", "k_cache", "v_cache"):
                    assert np.array_equal(got[k], want[k], equal_nan=True), f"{name} {k} hd={hd}"
                assert got["guards"], f"{name} hd={hd}: a padding row (slot -1) wrote before the caches"
                merged += 1
    assert merged == len(CLUSTER_CASES) * len(HEAD_DIMS) and max(splits) > 1, (merged, splits)


def test_the_cluster_cases_split_in_two_with_an_idle_partition_and_a_head_split() -> None:
    """Non-vacuity of the cluster merge's GPU cases, on the CPU: each launch has the cluster's two partitions, some
    token's context ends in the first (its second block idle), and one launch deals a KV head's query heads out."""
    idle, splits = False, set()
    with flag_set("VT_DECODE_MIN_PARTITION", "128"):
        for _, spec in CLUSTER_CASES:
            a = rope_case("", 64, "bfloat16", spec=spec)
            T, nh, _ = a["out"].shape
            nkv, P = a["k_cache"].shape[2], 1 if a["part_ml"] is None else a["part_ml"].shape[2]
            assert P == decode_attention.DECODE_CLUSTER, spec
            idle |= bool((a["positions"][:-1] < 128).any())
            splits.add(decode_attention.head_split(T, nkv, nh // nkv, P))
    assert idle and max(splits) > 1, (idle, splits)


def test_rope_cases_reach_a_head_split_and_a_partitioned_context() -> None:
    """Non-vacuity of the GPU cases: one launch deals a KV head's query heads to two blocks, one splits contexts
    across partitions (with a new key on each side of a partition boundary)."""
    splits, parts = set(), set()
    for name in ONE_TOKEN_CASES:
        a = rope_case(name, 16, "float32")
        T, nh, _ = a["out"].shape
        nkv = a["k_cache"].shape[2]
        P = 1 if a["part_ml"] is None else a["part_ml"].shape[2]
        splits.add(decode_attention.head_split(T, nkv, nh // nkv, P))
        parts.add(P)
    assert max(splits) > 1 and max(parts) > 1, (splits, parts)


def decode_launches(backend: Any, rope_in_attention: bool, q: int = 1, width: int = 4, rows: int = 2,
                    max_rows: int | None = None, max_keys: int | None = None) -> tuple[np.ndarray, list[str], Any]:
    """tiny-qwen3's decode step through the graph driver three times (cold, captured, replayed): `rows` rows of q
    tokens each (q > 1: speculative verification's shape) with tables `width` blocks wide, its logits and the names
    of the kernels launched. max_rows, max_keys: the model's VT_ROPE_MAX_ROWS and VT_ROPE_MAX_KEYS, where given. Row
    r sits at position 20 (r + 1), so rows * 20 + q must stay within width * 16 keys."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, "bfloat16")
    model.rope_in_attention = rope_in_attention
    if max_rows is not None:
        model.rope_max_rows = max_rows
    if max_keys is not None:
        model.rope_max_keys = max_keys
    kv = model.make_kv_cache(num_blocks=rows * width, block_size=16)
    positions = np.concatenate([np.arange(20 + 20 * r, 20 + 20 * r + q) for r in range(rows)])
    tables = np.arange(rows * width).reshape(rows, width)[:, ::-1].copy()
    slots = np.array([tables[r, p // 16] * 16 + p % 16 for r in range(rows) for p in positions[r * q:(r + 1) * q]])
    inp = DecodeInputs(np.arange(11, 11 + rows * q), positions, slots, tables, q=q)
    driver = GraphDriver(model, kv, max_num_seqs=max(4, rows), max_q=q)
    with launched_names(backend) as names:
        for _ in range(3):
            driver.step(inp, spec=q > 1)
    return driver.last_logits(), names, model.cfg


def test_a_decode_step_of_one_token_a_sequence_attends_with_the_rope_variant_with_the_same_logits() -> None:
    """CPU: each layer's qk_norm_rope_store + paged_decode_attention become one paged_decode_attention_rope; the
    logits are the two launches', bit for bit (the twin composes the same float32 operations)."""
    from vt.registry import make_backend

    plain, plain_names, cfg = decode_launches(make_backend("cpu"), False)
    moved, names, _ = decode_launches(make_backend("cpu"), True)
    F = names.count("embed")
    L = cfg.num_hidden_layers
    assert F >= 1 and names.count("paged_decode_attention_rope") == L * F, names
    assert names.count("qk_norm_rope_store") == names.count("paged_decode_attention") == 0
    assert plain_names.count("qk_norm_rope_store") == L * F and "paged_decode_attention_rope" not in plain_names
    assert len(plain_names) - len(names) == L * F, "one launch a layer fewer"
    assert np.array_equal(moved, plain) and np.abs(plain).max() > 0.1, "the same logits, bit for bit"


def test_a_table_wider_than_the_rope_key_limit_keeps_the_two_launches() -> None:
    """VT_ROPE_MAX_KEYS bounds the table a decode graph may have to take the rope variant: past it the step runs
    rotary's launch and then the attention, with the same logits; a narrower table, the variant."""
    from vt.registry import make_backend

    logits, names, cfg = decode_launches(make_backend("cpu"), True, width=32, max_keys=256)
    assert "paged_decode_attention_rope" not in names and names.count("qk_norm_rope_store") > 0, names
    plain, _, _ = decode_launches(make_backend("cpu"), False, width=32)
    assert np.array_equal(logits, plain), "the same logits"
    _, narrow, _ = decode_launches(make_backend("cpu"), True, max_keys=256)
    assert "paged_decode_attention_rope" in narrow, "non-vacuity: the narrow table takes the rope variant"


def test_the_rope_variant_over_a_partitioned_table_gives_the_two_launches_logits() -> None:
    """Within VT_ROPE_MAX_KEYS a table split into partitions takes the rope variant: every partition's block ropes
    its query heads, the own key's partition writes the KV, and the reduce merges them. The logits are the two
    launches', bit for bit (a 512-key table: 4 partitions at the 128-key floor, the rows' keys in the first two)."""
    from backends.kernels.decode_attention import num_partitions
    from vt.registry import make_backend

    with flag_set("VT_DECODE_MIN_PARTITION", "128"):
        logits, names, cfg = decode_launches(make_backend("cpu"), True, width=32, max_keys=512)
        assert num_partitions(2, cfg.num_key_value_heads, 32, 16) > 1, "non-vacuity: the table is partitioned"
        plain, plain_names, _ = decode_launches(make_backend("cpu"), False, width=32)
    L, F = cfg.num_hidden_layers, names.count("embed")
    assert names.count("paged_decode_attention_rope") == L * F and "qk_norm_rope_store" not in names, names
    assert np.array_equal(logits, plain) and np.abs(plain).max() > 0.1, "the same logits, bit for bit"


def test_a_step_of_more_rows_than_measured_keeps_the_two_launches() -> None:
    """VT_ROPE_MAX_ROWS bounds the rows a step may have (padding included) to take the rope variant: a step past it
    runs rotary's launch and then the attention, with the same logits; at the bound, the variant."""
    from vt.registry import make_backend

    logits, names, _ = decode_launches(make_backend("cpu"), True, rows=3, max_rows=2)
    assert "paged_decode_attention_rope" not in names and names.count("qk_norm_rope_store") > 0, names
    variant, within, _ = decode_launches(make_backend("cpu"), True, rows=3, max_rows=4)
    assert "paged_decode_attention_rope" in within, "non-vacuity: the same step takes the variant at a bound of 4"
    assert np.array_equal(logits, variant) and logits.shape[0] == 3, "the bound changes the launches, not the logits"


def test_speculative_verification_keeps_the_two_launches() -> None:
    """Two tokens a sequence (q = 2): the rope variant's precondition fails (its twin refuses it), so the step runs
    rotary's launch and then the attention, whatever the flag says."""
    from vt.registry import make_backend

    try:
        logits, names, cfg = decode_launches(make_backend("cpu"), True, q=2)
    except EngineInvariantError as e:
        pytest.fail(f"the step gave the rope variant two tokens of a sequence: {e}")
    assert "paged_decode_attention_rope" not in names
    assert names.count("qk_norm_rope_store") == names.count("paged_decode_attention") > 0
    plain, _, _ = decode_launches(make_backend("cpu"), False, q=2)
    assert np.array_equal(logits, plain) and logits.shape[0] == 4, "non-vacuity: four rows of logits"


def test_the_rope_variant_is_on_by_default() -> None:
    """VT_ROPE_IN_ATTENTION unset: a model takes the rope variant up to 8 rows (VT_ROPE_MAX_ROWS); =0 turns it off
    (vt/env.py reads both once)."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.registry import make_backend

    def model_with(in_attention: str | None, max_rows: str | None = None, max_keys: str | None = None) -> Any:
        with flag_set("VT_ROPE_IN_ATTENTION", in_attention), flag_set("VT_ROPE_MAX_ROWS", max_rows), \
                flag_set("VT_ROPE_MAX_KEYS", max_keys):
            return load_model(load_checkpoint(resolve_model("tiny-qwen3")), make_backend("cpu"), "float32")

    assert model_with(None).rope_in_attention is True
    assert model_with("0").rope_in_attention is False, "non-vacuity: the flag turns it off"
    # rows: the H200 measured the variant at 1 and 8 rows only; VT_ROPE_MAX_ROWS widens that for the lane's A/B
    default = model_with(None)
    assert default.attends_with_rope(8, 4, 16) and not default.attends_with_rope(16, 4, 16)
    assert model_with(None, "128").attends_with_rope(128, 4, 16), "the flag reaches the model"
    # tables: VT_ROPE_MAX_KEYS bounds the keys a table holds (width x block size)
    wide = model_with(None, None, "4096")
    assert wide.attends_with_rope(1, 256, 16) and not wide.attends_with_rope(1, 512, 16), "the key limit reaches it"


def test_rows_sharing_a_sequence_take_a_graph_without_the_rope_variant() -> None:
    """A short prefill run whole (runner._prefill_whole) is a step of a row a token: a chunk's rows share its
    sequence. The driver gives such a step a graph of its own where the decode attention would take the rope
    variant (one partition), whose forward runs rotary's launch first; told nothing, the step would hand the variant
    two tokens of one sequence (the twin refuses it)."""
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver
    from vt.registry import make_backend

    backend = make_backend("cpu")
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, "float32")
    driver = GraphDriver(model, model.make_kv_cache(num_blocks=16, block_size=16), max_num_seqs=4)
    table = np.array([3, 5, 6, 0])
    positions = np.array([20, 21, 22])  # three tokens of one chunk, each its own row with a copy of the table
    slots = np.array([table[p // 16] * 16 + p % 16 for p in positions])
    shared = DecodeInputs(np.array([11, 12, 13]), positions, slots, np.tile(table, (3, 1)), rows_share_sequences=True)
    assert model.attends_with_rope(4, 4, 16), "non-vacuity: a decode step of this shape takes the variant"
    try:
        with launched_names(backend) as names:
            for _ in range(3):  # cold, captured, replayed
                driver.step(shared)
    except EngineInvariantError as e:
        pytest.fail(f"the step gave the rope variant rows that share a sequence: {e}")
    assert driver.last_slot is not None and driver.last_slot.key[4], "the step's graph is apart"
    assert "paged_decode_attention_rope" not in names and names.count("qk_norm_rope_store") > 0
    told_nothing = DecodeInputs(shared.tokens, positions, slots, shared.block_tables)
    with pytest.raises(EngineInvariantError, match="two tokens of one sequence"):
        driver.step(told_nothing)  # non-vacuity: a decode step's graph would break the precondition


def test_a_short_prefill_run_whole_tells_the_driver_its_rows_share_sequences(monkeypatch: pytest.MonkeyPatch) -> None:
    """The runner's whole short steps (a prefix-cache hit's 16-token tail) mark their inputs: any step whose live rows
    repeat a block table (a chunk's tokens) says its rows share sequences."""
    from vt import LLM, SamplingParams
    from vt.engine.worker.graph_driver import GraphDriver

    seen: list[tuple[bool, bool]] = []
    step_async = GraphDriver.step_async

    def spy(self: GraphDriver, inp: Any, spec: bool = False) -> Any:
        tables = inp.block_tables[: len(inp.slots)][inp.slots >= 0] if inp.q == 1 else inp.block_tables
        seen.append((len({t.tobytes() for t in tables}) < len(tables), inp.rows_share_sequences))
        return step_async(self, inp, spec)

    monkeypatch.setattr(GraphDriver, "step_async", spy)
    llm = LLM("tiny-qwen3", backend="cpu", max_model_len=1024, num_blocks=256, max_num_seqs=4)
    rng = np.random.default_rng(0)
    prefix = [int(t) for t in rng.integers(3, llm.engine.vocab_size, 624)]
    greedy = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True)
    llm.generate([prefix], greedy)
    llm.generate([prefix + [int(t) for t in rng.integers(3, llm.engine.vocab_size, 16)]], greedy)
    assert llm.engine.runner.num_whole_prefills >= 1 and any(s for s, _ in seen), "non-vacuity: a tail ran whole"
    assert all(told for shares, told in seen if shares), seen


@pytest.mark.gpu
@pytest.mark.parametrize("merge", ["1", "cluster"])
def test_cuda_a_replayed_decode_step_merging_in_the_attention_computes_the_reduce_kernels_logits(merge: str) -> None:
    """VT_DECODE_MERGE_IN_ATTENTION=1 or cluster through the graph driver: tiny-qwen3's captured one-token step over
    200 and 150 keys (a 256-key graph, two partitions at the 128-key floor), replayed twice, gives the logits of the
    same step with the reduce launch, bit for bit, with one kernel node fewer a layer (a captured cluster launch keeps
    its cluster). With 1, the second replay finds every counter back at zero (a counter left counted would let no
    block merge, and the logits would differ)."""
    from backends import cugraph
    from backends.cuda import CudaBackend
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    if merge == "cluster" and not decode_attention._has_clusters():
        pytest.skip("thread-block clusters need compute capability 9.0")
    backend = CudaBackend()
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, "bfloat16")
    tables = np.array([list(range(1, 14)), list(range(14, 27))])
    inp = DecodeInputs(np.array([11, 400]), np.array([200, 150]), np.array([13 * 16 + 8, 23 * 16 + 6]), tables)
    kv = model.make_kv_cache(num_blocks=32, block_size=16)
    rng = np.random.default_rng(0)
    for cache in (*kv.k, *kv.v):  # older keys of every layer its own: each partition's partials differ by layer
        backend.copy_h2d(cache, narrow_host(rng.standard_normal(cache.shape).astype(np.float32), cache.dtype))
    got = {}
    for setting in (merge, "0"):
        with flag_set("VT_DECODE_MIN_PARTITION", "128"), flag_set("VT_DECODE_MERGE_IN_ATTENTION", setting):
            driver = GraphDriver(model, kv, max_num_seqs=4)
            logits = []
            for _ in range(4):  # cold, capture, replay, replay
                driver.step(inp)
                logits.append(driver.last_logits())
            kernels = driver.last_slot.graph.node_kinds.get(cugraph.KERNEL, 0)
            assert decode_attention.num_partitions(2, kv.k[0].shape[2], 16, 16) == 2, "non-vacuity: two partitions"
        assert driver.num_replays >= 2, "non-vacuity: the step replayed its graph twice"
        got[setting] = logits, kernels
    for i, (a, b) in enumerate(zip(got[merge][0], got["0"][0])):
        assert np.array_equal(a, b), f"step {i}: merging in the attention changed the logits"
    layers = model.cfg.num_hidden_layers
    assert got[merge][1] == got["0"][1] - layers, f"a reduce launch fewer a layer: {got[merge][1]}, {got['0'][1]}"
    if merge != "1":
        return
    rt = backend.cp.cuda.runtime
    counters = np.ones(decode_attention.MERGE_COUNTERS, np.uint32)
    rt.deviceSynchronize()
    rt.memcpy(counters.ctypes.data, backend.decode_merge_counters, counters.nbytes, rt.memcpyDeviceToHost)
    assert not counters.any(), "every counter back at zero after the replays"


@pytest.mark.gpu
def test_cuda_a_replayed_step_over_a_partitioned_table_with_the_rope_variant_computes_the_two_launches_logits() -> None:
    """Within VT_ROPE_MAX_KEYS, tiny-qwen3's captured one-token step over 300 and 150 keys of a 512-key table (four
    partitions at the 128-key floor; each row's own key in a later partition than its first), replayed twice, gives
    the logits of the same step with rotary's launch and then the attention, bit for bit, one kernel node a layer
    fewer."""
    from backends import cugraph
    from backends.cuda import CudaBackend
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    backend = CudaBackend()
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, "bfloat16")
    tables = np.array([list(range(1, 33)), list(range(33, 65))])
    inp = DecodeInputs(np.array([11, 400]), np.array([300, 150]), np.array([(1 + 18) * 16 + 12, (33 + 9) * 16 + 6]),
                       tables)
    kv = model.make_kv_cache(num_blocks=72, block_size=16)
    rng = np.random.default_rng(0)
    for cache in (*kv.k, *kv.v):  # older keys of every layer its own
        backend.copy_h2d(cache, narrow_host(rng.standard_normal(cache.shape).astype(np.float32), cache.dtype))
    got = {}
    for variant in (True, False):
        model.rope_in_attention, model.rope_max_keys = variant, 512
        with flag_set("VT_DECODE_MIN_PARTITION", "128"):
            driver = GraphDriver(model, kv, max_num_seqs=4)
            logits = []
            for _ in range(4):  # cold, capture, replay, replay
                driver.step(inp)
                logits.append(driver.last_logits())
            assert decode_attention.num_partitions(2, kv.k[0].shape[2], 32, 16) == 4, "non-vacuity: four partitions"
        assert driver.num_replays >= 2, "non-vacuity: the step replayed its graph twice"
        got[variant] = logits, driver.last_slot.graph.node_kinds.get(cugraph.KERNEL, 0)
    for i, (a, b) in enumerate(zip(got[True][0], got[False][0])):
        assert np.array_equal(a, b), f"step {i}: the rope variant over partitions changed the logits"
    layers = model.cfg.num_hidden_layers
    assert got[True][1] == got[False][1] - layers, f"a rotary launch fewer a layer: {got[True][1]}, {got[False][1]}"
