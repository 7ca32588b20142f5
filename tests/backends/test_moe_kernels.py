"""Routed MoE's kernels (backends/kernels/moe.py): each NumPy twin against a plain float64 reference written from
Qwen3-MoE's definition (softmax over every expert, the top k, renormalized where the config says so, each
chosen expert's SwiGLU MLP weighted and summed), and (GPU lane) each CUDA kernel against its twin.

Bounds: ids and the grouping exactly; float32 GEMM outputs within 1e-5 of the sum of the terms' magnitudes
(another summation order); bf16 / fp16 outputs within one unit in the last place on top of that.
"""

from __future__ import annotations

import numpy as np
import pytest

from backends.kernels import moe
from vt.dtypes import narrow_host, widen_host

STORAGE = {"float32": np.dtype(np.float32), "bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16)}
CASES = {  # name: (tokens, experts, top-k, hidden, expert width)
    "one-token": (1, 8, 2, 64, 32),
    "decode-batch": (5, 16, 4, 96, 40),
    "prefill-chunk": (37, 8, 2, 64, 24),
    "unaligned-widths": (6, 6, 3, 36, 20),  # K not a multiple of 16 bytes: the scalar path
}
GPU_CASES = {  # Qwen3-30B-A3B's widths (64 of its 128 experts, to keep the NumPy side quick), and its router
    "real-size-decode": (4, 64, 8, 2048, 768),
    "real-size-prefill": (96, 64, 8, 2048, 768),
    "router-of-128": (9, 128, 8, 64, 16),
}


def softmax64(logits: np.ndarray) -> np.ndarray:
    z = np.exp(logits.astype(np.float64) - logits.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def route_reference(logits: np.ndarray, k: int, norm: bool) -> tuple[np.ndarray, np.ndarray]:
    probs = softmax64(logits)
    ids = np.array([sorted(range(len(p)), key=lambda e: (-p[e], e))[:k] for p in probs])
    w = np.take_along_axis(probs, ids, axis=-1)
    return ids, (w / w.sum(axis=-1, keepdims=True) if norm else w)


def layer_inputs(T: int, E: int, k: int, H: int, MI: int, dtype: str, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    low = STORAGE[dtype]
    x = narrow_host(rng.standard_normal((T, H), dtype=np.float32), low)
    w_gu = narrow_host(rng.standard_normal((E, 2 * MI, H), dtype=np.float32) * np.float32(0.2), low)
    w_down = narrow_host(rng.standard_normal((E, H, MI), dtype=np.float32) * np.float32(0.2), low)
    logits = rng.standard_normal((T, E)).astype(np.float32) * 2
    return dict(x=x, w_gu=w_gu, w_down=w_down, logits=logits, k=k)


def run_layer(xp, a: dict, norm: bool = True) -> dict:
    """The five launches of a routed MoE layer, every intermediate kept for the comparison."""
    T, E = a["logits"].shape
    k, H, MI = a["k"], a["x"].shape[1], a["w_down"].shape[2]
    d = {name: xp.asarray(v) for name, v in a.items() if name != "k"}
    r = dict(ids=xp.zeros((T, k), np.int32), weights=xp.zeros((T, k), np.float32),
             offsets=xp.zeros(E + 1, np.int32), experts=xp.zeros(moe.expert_rows(T, k, E), np.int32),
             slots=xp.zeros(T * k, np.int32), act=xp.zeros((T * k, MI), d["x"].dtype),
             y=xp.zeros((T * k, H), np.float32), out=xp.zeros((T, H), np.float32))
    plan = (r["offsets"], r["experts"], r["slots"])
    moe.moe_route(xp, d["logits"], r["ids"], r["weights"], norm_topk_prob=norm)
    moe.moe_group(xp, r["ids"], *plan)
    moe.moe_gemm(xp, d["x"], d["w_gu"], *plan, r["act"], row_div=k, swiglu=True)
    moe.moe_gemm(xp, r["act"], d["w_down"], *plan, r["y"], row_div=1, swiglu=False)
    moe.moe_combine(xp, r["y"], r["ids"], r["weights"], r["out"])
    return {n: (v.get() if hasattr(v, "get") else v) for n, v in r.items()}


def expert_mlp64(x: np.ndarray, w_gu: np.ndarray, w_down: np.ndarray, act_dtype: np.dtype) -> np.ndarray:
    """One expert's SwiGLU MLP in float64 on widened operands, the activation rounded to the GEMM operand dtype."""
    gu = widen_host(x).astype(np.float64) @ widen_host(w_gu).astype(np.float64).T
    n = w_down.shape[1]
    act = gu[:, :n] / (1 + np.exp(-gu[:, :n])) * gu[:, n:]
    act = widen_host(narrow_host(act.astype(np.float32), act_dtype)).astype(np.float64)
    return act @ widen_host(w_down).astype(np.float64).T


def moe_reference(a: dict, norm: bool = True) -> np.ndarray:
    """Qwen3-MoE's block: each token's chosen experts' MLPs, weighted, summed."""
    ids, w = route_reference(a["logits"], a["k"], norm)
    out = np.zeros(a["x"].shape, np.float64)
    for t in range(a["x"].shape[0]):
        for j, e in enumerate(ids[t]):
            out[t] += w[t, j] * expert_mlp64(a["x"][t : t + 1], a["w_gu"][e], a["w_down"][e], a["x"].dtype)[0]
    return out


def combine_reference(y: np.ndarray, ids: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Each token's routed rows y [T k, H], weighted, added in float32 in ascending expert order (transformers'
    index_add_ loop over the experts)."""
    T, k = ids.shape
    out = np.zeros((T, y.shape[1]), np.float32)
    for t in range(T):
        for j in np.argsort(ids[t], kind="stable"):
            out[t] += w[t, j] * y[t * k + j]
    return out


def assert_gemm_close(got: np.ndarray, want: np.ndarray, scale: np.ndarray, what: str) -> None:
    """|got - want| within 1e-5 of the terms' magnitude, plus an ulp of got's storage dtype where it is low."""
    ulp = 0.0
    if got.dtype in (np.uint16, np.float16):
        ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(want), 1e-30))) - (7 if got.dtype == np.uint16 else 10))
    bad = np.abs(widen_host(got).astype(np.float64) - want) > 1e-5 * (1 + scale) + ulp * 1.0001
    assert not bad.any(), f"{what}: {int(bad.sum())} of {bad.size} values past the bound"


def magnitudes(rows: np.ndarray, w: np.ndarray, chosen: np.ndarray) -> np.ndarray:
    """sum_k |row_k| |w[e]_nk| for each routed row and its expert: what a float32 sum's rounding scales with."""
    out = np.zeros((rows.shape[0], w.shape[1]))
    for e in np.unique(chosen):
        at = chosen == e
        out[at] = np.abs(rows[at]).astype(np.float64) @ np.abs(widen_host(w[e])).astype(np.float64).T
    return out


def test_the_bindings_constants_are_the_kernels() -> None:
    """The host launches and bounds by moe.py's constants, the kernels are built on moe.cu's: a block of GEMM_WARPS
    warps must be the MOE_WARPS the kernels stride by (row_denominators sums a row at a stride of the block's
    threads, so another block size would drop or repeat terms with no error), and the bounds the binding checks
    must be those the kernels hold."""
    import re

    from backends.kernels.build import source

    cu = source("moe.cu")
    found = {name: int(v) for name, v in re.findall(r"constexpr int (MOE_\w+) = (\d+);", cu)}
    want = {"MOE_MAX_EXPERTS": moe.MAX_EXPERTS, "MOE_MAX_TOP_K": moe.MAX_TOP_K, "MOE_ROWS": moe.GEMM_ROWS,
            "MOE_WARPS": moe.GEMM_WARPS}
    assert {n: found.get(n) for n in want} == want


# ---- the twins against the reference ----------------------------------------------------------------------
@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_route_twin_takes_the_top_k_at_softmax_weights(case: str, norm: bool) -> None:
    T, E, k, H, MI = CASES[case]
    a = layer_inputs(T, E, k, H, MI, "float32")
    a["logits"][0, :3] = a["logits"][0].max() + 1  # a three-way tie at the top: the lower experts first
    got = run_layer(np, a, norm)
    ids, w = route_reference(a["logits"], k, norm)
    assert np.array_equal(got["ids"], ids), "the chosen experts, best first, a tie to the lower expert"
    assert np.allclose(got["weights"], w, rtol=1e-6, atol=1e-7), "the softmax weights at the chosen experts"
    assert got["ids"][0, :min(k, 3)].tolist() == list(range(min(k, 3))), "non-vacuous: the tie was resolved"
    assert np.allclose(got["weights"].sum(axis=-1), 1.0, atol=1e-6) == norm, "renormalized exactly where asked"


@pytest.mark.parametrize("case", CASES)
def test_group_twin_gives_each_expert_exactly_its_routed_rows(case: str) -> None:
    T, E, k, H, MI = CASES[case]
    got = run_layer(np, layer_inputs(T, E, k, H, MI, "float32"))
    flat = got["ids"].reshape(-1)
    for e in range(E):
        rows = got["slots"][got["offsets"][e]: got["offsets"][e + 1]]
        assert sorted(rows.tolist()) == np.flatnonzero(flat == e).tolist(), f"expert {e}'s routed rows"
    used = sorted(set(flat.tolist()))
    listed = got["experts"][got["experts"] >= 0].tolist()
    assert listed == used[: len(got["experts"])], "the experts with rows, ascending"
    assert got["offsets"][-1] == T * k and len(used) > 1, "non-vacuous: every row grouped, several experts used"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", CASES)
def test_moe_layer_twins_equal_every_chosen_experts_mlp(case: str, dtype: str) -> None:
    T, E, k, H, MI = CASES[case]
    a = layer_inputs(T, E, k, H, MI, dtype)
    got = run_layer(np, a)
    want = moe_reference(a)
    assert np.allclose(got["out"], want, rtol=2e-5, atol=2e-5 * np.abs(want).max()), \
        f"max error {np.abs(got['out'] - want).max():.3g} of {np.abs(want).max():.3g}"
    unrouted = E - len(set(got["ids"].reshape(-1).tolist()))
    assert (unrouted > 0 or T * k >= E) and np.abs(want).max() > 0.1, "non-vacuous: experts sat out, output non-zero"


def test_combine_twin_adds_every_choice_in_expert_order() -> None:
    rng = np.random.default_rng(3)
    T, k, H = 4, 3, 8
    y = rng.standard_normal((T * k, H)).astype(np.float32)
    ids = np.array([[5, 1, 3], [0, 2, 4], [7, 6, 5], [2, 9, 1]], np.int32)
    w = rng.random((T, k)).astype(np.float32)
    out = np.zeros((T, H), np.float32)
    moe.moe_combine(np, y, ids, w, out)
    assert np.array_equal(out, combine_reference(y, ids, w)), "every choice, weighted, added in ascending expert order"


@pytest.mark.parametrize("case", CASES)
def test_by_row_twin_gives_each_routed_row_its_own_experts_mlp(case: str) -> None:
    """moe_gemm_rows (a step of one token's form, correct at any T): routed row t k + j is token t's MLP through
    expert ids[t, j], with no grouping."""
    T, E, k, H, MI = CASES[case]
    a = layer_inputs(T, E, k, H, MI, "bfloat16", seed=7)
    ids, _ = route_reference(a["logits"], k, True)
    ids = ids.astype(np.int32)
    act = np.zeros((T * k, MI), a["x"].dtype)
    y = np.zeros((T * k, H), np.float32)
    moe.moe_gemm_rows(np, a["x"], a["w_gu"], ids, act, row_div=k, swiglu=True)
    moe.moe_gemm_rows(np, act, a["w_down"], ids, y, row_div=1, swiglu=False)
    for r, e in enumerate(ids.reshape(-1)):
        want = expert_mlp64(a["x"][r // k: r // k + 1], a["w_gu"][e], a["w_down"][e], a["x"].dtype)[0]
        assert np.allclose(y[r], want, rtol=2e-5, atol=2e-5 * np.abs(want).max()), f"routed row {r}, expert {e}"
    assert len(set(ids.reshape(-1).tolist())) > 1 and np.abs(y).max() > 0.1, "non-vacuous: several experts, output"


@pytest.mark.parametrize("norm", [True, False])
@pytest.mark.parametrize("case", CASES)
def test_route_gemm_rows_twin_routes_then_runs_each_choices_expert(case: str, norm: bool) -> None:
    """moe_route_gemm_rows (a step of one token's routing and gate/up GEMM in one launch, correct at any T): each
    token's top-k at softmax weights, renormalized where asked, and routed row t k + j's activation through
    expert ids[t, j] (checked through the down GEMM against the expert's whole MLP)."""
    T, E, k, H, MI = CASES[case]
    a = layer_inputs(T, E, k, H, MI, "bfloat16", seed=11)
    ids, weights = np.zeros((T, k), np.int32), np.zeros((T, k), np.float32)
    act = np.zeros((T * k, MI), a["x"].dtype)
    y = np.zeros((T * k, H), np.float32)
    moe.moe_route_gemm_rows(np, a["logits"], a["x"], a["w_gu"], ids, weights, act, norm_topk_prob=norm)
    moe.moe_gemm_rows(np, act, a["w_down"], ids, y, row_div=1, swiglu=False)
    want_ids, want_w = route_reference(a["logits"], k, norm)
    assert np.array_equal(ids, want_ids), "the chosen experts, best first"
    assert np.allclose(weights, want_w, rtol=1e-6, atol=1e-7), "the softmax weights, renormalized where asked"
    for r, e in enumerate(ids.reshape(-1)):
        want = expert_mlp64(a["x"][r // k: r // k + 1], a["w_gu"][e], a["w_down"][e], a["x"].dtype)[0]
        assert np.allclose(y[r], want, rtol=2e-5, atol=2e-5 * np.abs(want).max()), f"routed row {r}, expert {e}"
    assert len(set(ids.reshape(-1).tolist())) > 1 and np.abs(y).max() > 0.1, "non-vacuous: several experts, output"


@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
def test_combine_add_rms_norm_twin_adds_the_block_into_x_and_norms_it(out_dtype: str) -> None:
    """The MoE block's output joins the residual stream: x += every choice, weighted, in ascending expert order;
    h = RMSNorm(x) * w in h's dtype."""
    rng = np.random.default_rng(5)
    T, k, H, eps = 3, 4, 64, 1e-6
    y = rng.standard_normal((T * k, H)).astype(np.float32)
    ids = np.array([[5, 1, 3, 0], [2, 9, 4, 7], [6, 2, 8, 1]], np.int32)
    wts = rng.random((T, k)).astype(np.float32)
    x0 = rng.standard_normal((T, H)).astype(np.float32)
    g = (rng.random(H) + 0.5).astype(np.float32)
    x, h = x0.copy(), np.zeros((T, H), STORAGE[out_dtype])
    moe.moe_combine_add_rms_norm(np, y, ids, wts, x, g, h, eps=eps)
    block = combine_reference(y, ids, wts)
    assert np.array_equal(x, x0 + block), "x += the weighted choices, in ascending expert order"
    x64 = x.astype(np.float64)
    want = x64 / np.sqrt((x64 * x64).mean(axis=-1, keepdims=True) + eps) * g
    ulp = 2.0 ** (np.floor(np.log2(np.abs(want))) - 7) if out_dtype == "bfloat16" else 0.0
    assert (np.abs(widen_host(h) - want) <= 1e-5 * np.abs(want) + ulp + 1e-7).all(), "h = RMSNorm(x) * w"
    assert np.abs(block).min(axis=-1).max() > 0 and np.abs(h).max() > 0, "non-vacuous: a block added, h written"


# ---- the CUDA kernels against their twins (GPU lane) --------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", [*CASES, *GPU_CASES])
def test_cuda_moe_kernels_equal_their_twins(case: str, dtype: str) -> None:
    """Each kernel on its twin's inputs (so a rounding flip upstream is not charged downstream)."""
    import cupy

    T, E, k, H, MI = CASES.get(case) or GPU_CASES[case]
    a = layer_inputs(T, E, k, H, MI, dtype, seed=T)
    want = run_layer(np, a)
    d = {n: cupy.asarray(v) for n, v in {**a, **want}.items() if n != "k"}
    got = {n: cupy.zeros_like(d[n]) for n in want}

    moe.moe_route(cupy, d["logits"], got["ids"], got["weights"], norm_topk_prob=True)
    assert np.array_equal(got["ids"].get(), want["ids"]), "the same experts chosen"
    assert np.allclose(got["weights"].get(), want["weights"], rtol=1e-5, atol=1e-7), "the same routing weights"
    raw_ids, raw_w = np.zeros_like(want["ids"]), np.zeros_like(want["weights"])  # a config's norm_topk_prob false
    moe.moe_route(np, a["logits"], raw_ids, raw_w, norm_topk_prob=False)
    raw = (cupy.zeros_like(got["ids"]), cupy.zeros_like(got["weights"]))
    moe.moe_route(cupy, d["logits"], *raw, norm_topk_prob=False)
    assert np.array_equal(raw[0].get(), raw_ids) and np.allclose(raw[1].get(), raw_w, rtol=1e-5, atol=1e-7)
    assert not np.allclose(raw_w, want["weights"]), "non-vacuity: unrenormalized weights differ"
    moe.moe_group(cupy, d["ids"], got["offsets"], got["experts"], got["slots"])
    for name in ("offsets", "experts"):
        assert np.array_equal(got[name].get(), want[name]), f"moe_group's {name}"
    slots = got["slots"].get()
    for e in range(E):
        seg = slice(want["offsets"][e], want["offsets"][e + 1])
        assert sorted(slots[seg].tolist()) == want["slots"][seg].tolist(), f"expert {e}'s rows"
    plan = (d["offsets"], d["experts"], d["slots"])
    moe.moe_gemm(cupy, d["x"], d["w_gu"], *plan, got["act"], row_div=k, swiglu=True)
    moe.moe_gemm(cupy, d["act"], d["w_down"], *plan, got["y"], row_div=1, swiglu=False)
    moe.moe_combine(cupy, d["y"], d["ids"], d["weights"], got["out"])
    rows_act, rows_y = cupy.zeros_like(d["act"]), cupy.zeros_like(d["y"])  # the one-token form, at any T
    moe.moe_gemm_rows(cupy, d["x"], d["w_gu"], d["ids"], rows_act, row_div=k, swiglu=True)
    moe.moe_gemm_rows(cupy, d["act"], d["w_down"], d["ids"], rows_y, row_div=1, swiglu=False)

    chosen = want["ids"].reshape(-1)
    gu_scale = magnitudes(widen_host(a["x"])[np.arange(T * k) // k], a["w_gu"], chosen)
    assert_gemm_close(got["act"].get(), widen_host(want["act"]).astype(np.float64),
                      gu_scale[:, :MI] * gu_scale[:, MI:], f"gate/up + SwiGLU {case} {dtype}")
    down_scale = magnitudes(widen_host(want["act"]), a["w_down"], chosen)
    assert_gemm_close(got["y"].get(), want["y"], down_scale, f"down {case} {dtype}")
    assert_gemm_close(got["out"].get(), want["out"].astype(np.float64), np.abs(want["y"]).reshape(T, k, H).sum(axis=1),
                      f"combine {case} {dtype}")
    assert_gemm_close(rows_act.get(), widen_host(want["act"]).astype(np.float64),
                      gu_scale[:, :MI] * gu_scale[:, MI:], f"by row: gate/up + SwiGLU {case} {dtype}")
    assert_gemm_close(rows_y.get(), want["y"], down_scale, f"by row: down {case} {dtype}")


@pytest.mark.gpu
@pytest.mark.parametrize("out_dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("case", [*CASES, *GPU_CASES])
def test_cuda_combine_add_rms_norm_equals_its_two_launches_and_twin(case: str, out_dtype: str) -> None:
    """The fused combine + add + RMSNorm against moe_combine then add_rms_norm on the GPU (bit for bit: the same
    sums in the same order) and against its twin."""
    import cupy

    from backends.kernels.norm import add_rms_norm

    T, E, k, H, MI = CASES.get(case) or GPU_CASES[case]
    rng = np.random.default_rng(T)
    y = rng.standard_normal((T * k, H)).astype(np.float32)
    ids = np.stack([rng.permutation(E)[:k] for _ in range(T)]).astype(np.int32)
    wts = rng.random((T, k)).astype(np.float32)
    x0 = rng.standard_normal((T, H)).astype(np.float32)
    g = (rng.random(H) + 0.5).astype(np.float32)
    low = STORAGE[out_dtype]
    x_twin, h_twin = x0.copy(), np.zeros((T, H), low)
    moe.moe_combine_add_rms_norm(np, y, ids, wts, x_twin, g, h_twin, eps=1e-6)
    d = {n: cupy.asarray(v) for n, v in dict(y=y, ids=ids, wts=wts, g=g).items()}
    x, h = cupy.asarray(x0), cupy.zeros((T, H), low)
    moe.moe_combine_add_rms_norm(cupy, d["y"], d["ids"], d["wts"], x, d["g"], h, eps=1e-6)
    x2, h2, out = cupy.asarray(x0), cupy.zeros((T, H), low), cupy.zeros((T, H), np.float32)
    moe.moe_combine(cupy, d["y"], d["ids"], d["wts"], out)
    add_rms_norm(cupy, x2, out, None, d["g"], h2, eps=1e-6)
    assert np.array_equal(x.get(), x2.get()) and np.array_equal(h.get(), h2.get()), "the two launches' x and h"
    scale = np.abs(y).reshape(T, k, H).sum(axis=1) + np.abs(x0)
    assert np.abs(x.get() - x_twin).max() <= 1e-5 * scale.max(), "x as the twin's"
    h_want = widen_host(h_twin).astype(np.float64)
    ulp = 2.0 ** (np.floor(np.log2(np.maximum(np.abs(h_want), 1e-30))) - 7) if out_dtype == "bfloat16" else 0.0
    assert (np.abs(widen_host(h.get()) - h_want) <= 1e-4 * np.abs(h_want) + 2 * ulp + 1e-6).all(), "h as the twin's"
    assert np.abs(x.get() - x0).max() > 0.1, "non-vacuous: the block was added"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("case", [*CASES, *GPU_CASES])
def test_cuda_route_gemm_rows_equals_route_then_rows_and_twin(case: str, dtype: str) -> None:
    """The fused routing + gate/up GEMM against moe_route then moe_gemm_rows on the GPU (bit for bit: the same
    choices and the same sums in the same order) and against its twin."""
    import cupy

    T, E, k, H, MI = CASES.get(case) or GPU_CASES[case]
    a = layer_inputs(T, E, k, H, MI, dtype, seed=T + 1)
    weights_by_norm = {}
    for norm in (True, False):  # Qwen3-MoE renormalizes over the chosen k; a config may say not to
        ids_t, w_t = np.zeros((T, k), np.int32), np.zeros((T, k), np.float32)
        act_t = np.zeros((T * k, MI), a["x"].dtype)
        moe.moe_route_gemm_rows(np, a["logits"], a["x"], a["w_gu"], ids_t, w_t, act_t, norm_topk_prob=norm)
        d = {n: cupy.asarray(a[n]) for n in ("logits", "x", "w_gu")}
        fused = (cupy.zeros((T, k), np.int32), cupy.zeros((T, k), np.float32), cupy.zeros((T * k, MI), a["x"].dtype))
        moe.moe_route_gemm_rows(cupy, d["logits"], d["x"], d["w_gu"], *fused, norm_topk_prob=norm)
        two = (cupy.zeros((T, k), np.int32), cupy.zeros((T, k), np.float32), cupy.zeros((T * k, MI), a["x"].dtype))
        moe.moe_route(cupy, d["logits"], two[0], two[1], norm_topk_prob=norm)
        moe.moe_gemm_rows(cupy, d["x"], d["w_gu"], two[0], two[2], row_div=k, swiglu=True)
        for name, f, t in zip(("ids", "weights", "activations"), fused, two):
            assert np.array_equal(f.get(), t.get()), f"{case} {dtype} norm={norm}: the two launches' {name}"
        assert np.array_equal(fused[0].get(), ids_t), "the twin's experts"
        assert np.allclose(fused[1].get(), w_t, rtol=1e-5, atol=1e-7), "the twin's weights"
        scale = magnitudes(widen_host(a["x"])[np.arange(T * k) // k], a["w_gu"], ids_t.reshape(-1))
        assert_gemm_close(fused[2].get(), widen_host(act_t).astype(np.float64), scale[:, :MI] * scale[:, MI:],
                          f"fused route + gate/up {case} {dtype}")
        weights_by_norm[norm] = w_t
    assert np.abs(widen_host(act_t)).max() > 0, "non-vacuous: an output"
    assert not np.allclose(weights_by_norm[True], weights_by_norm[False]), "non-vacuous: the flag changes the weights"
