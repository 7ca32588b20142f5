"""The skinny GEMM's rope epilogue (backends/kernels/skinny_gemm.py): the fused q/k/v projection whose column tiles
are heads runs rotary.cu's q/k norm + rotary + KV write on them, so the rotary kernel is no launch of a decode step.
On the CPU: which head dims and configurations serve it, and its twin against a float64 reference. On the GPU: the
kernel equal bit for bit to the two launches it replaces (the same configuration's GEMM, then the rotary kernel),
and within the bound of its twin; a plan timing it; and a decode step one node a layer shorter with the same
logits."""

from __future__ import annotations

import numpy as np
import pytest

from backends.kernels import skinny_gemm as sg
from backends.kernels.fused import HEAD_DIMS
from tests.backends.test_kernels import assert_within_bound, rotary_inputs, rotary_reference
from tests.backends.test_skinny_gemm import operands
from vt.dtypes import widen_host

# (tokens, q heads, kv heads, hidden): GQA 2 and 4, one token and a full graph of eight, a K split deep and not
ROPE_CASES = [(1, 8, 2, 1024), (8, 4, 2, 512), (3, 16, 4, 96)]


@pytest.mark.parametrize("hd", sorted(set(HEAD_DIMS) | {96}))
def test_the_rope_epilogue_is_served_by_configurations_whose_tile_is_one_head(hd: int) -> None:
    epilogue = sg.rope_epilogue(hd)
    heads = 2 * hd * 7  # a whole number of heads of every head dim
    served = sg.fits(1, heads, np.uint16, epilogue)
    assert served is (hd in sg.ROPE_HEAD_DIMS)
    assert not sg.fits(1, heads + 8, np.uint16, epilogue), "a part of a head is no shape it serves"
    assert all(c.cols == hd for c in sg.configs(epilogue))
    if served:  # non-vacuity: every configuration of the head's width is a candidate
        assert [c for c in sg.configs(epilogue)] == [c for c in sg.configs() if c.cols == hd] != []


def rope_case(m: int, nh: int, nkv: int, k: int, hd: int, seed: int = 0) -> tuple:
    """a [m, k] and b [k, (nh + 2 nkv) hd] in bf16, and rotary's other operands for m tokens: the last a padding row
    (slot -1) where there are several."""
    a, b = operands(m, (nh + 2 * nkv) * hd, k, "bfloat16", seed=seed)
    r = rotary_inputs(m, nh, nkv, hd, "bfloat16", seed=seed + 1)
    if m == 1:
        r["slots"][0] = 5
    return a, b, r


ROPE_NAMES = ("bias", "w", "rope", "positions", "slots", "k_cache", "v_cache", "q_out")


@pytest.mark.parametrize("has_norm", [True, False], ids=["norm", "scale"])
@pytest.mark.parametrize("m,nh,nkv,k", ROPE_CASES)
def test_the_rope_twin_is_the_product_then_the_rotary_reference(m: int, nh: int, nkv: int, k: int,
                                                                has_norm: bool) -> None:
    hd = 128
    a, b, r = rope_case(m, nh, nkv, k, hd, seed=m)
    qkv = np.zeros((m, (nh + 2 * nkv) * hd), np.float32)
    sg.skinny_gemm_rope(np, a, b, qkv, *(r[n] for n in ROPE_NAMES), None, None, has_norm=has_norm, eps=1e-6,
                        config=sg.Config(16, 8, 2))
    ref = dict(r, qkv=widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64))
    q, k_rot, v = rotary_reference(ref, nh, nkv, hd, has_norm)
    live = r["slots"] >= 0
    slots = r["slots"][live]
    assert np.abs(r["q_out"] - q).max() <= 1e-3 * (1 + np.abs(q).max())
    for cache, want in ((r["k_cache"], k_rot), (r["v_cache"], v)):
        got = widen_host(cache.reshape(-1, nkv, hd)[slots]).astype(np.float64)
        assert np.all(np.abs(got - want[live]) <= 2 ** -7 * np.abs(want[live]) + 1e-3), "a bf16 ulp of the reference"
    untouched = np.setdiff1d(np.arange(r["k_cache"].shape[0] * r["k_cache"].shape[1]), slots)
    assert (widen_host(r["k_cache"].reshape(-1, nkv, hd)[untouched]) == 7.0).all(), "a padding row writes nothing"
    assert np.abs(q).max() > 0.1 and live.sum() == m - (m > 1), "non-vacuity: rotated values, live rows"


def cuda_configs(hd: int) -> list[sg.Config]:
    return [c for c in sg.CONFIGS + sg.CLUSTER_CONFIGS if c.cols == hd]


@pytest.mark.gpu
@pytest.mark.parametrize("hd", sg.ROPE_HEAD_DIMS)
@pytest.mark.parametrize("m,nh,nkv,k", ROPE_CASES)
def test_cuda_rope_epilogue_equals_the_gemm_then_the_rotary_kernel_bit_for_bit(m: int, nh: int, nkv: int, k: int,
                                                                             hd: int) -> None:
    """Each configuration whose tile is one head, with and without the q/k norm and a bias, twice on one scratch:
    q and both caches bit-equal to the same configuration's GEMM followed by the rotary kernel, within the bound of
    the twin, C never written, the tile counters back at zero."""
    import cupy

    from backends.kernels import rotary

    partials = cupy.zeros(sg.SCRATCH_FLOATS, np.float32)
    counters = cupy.zeros(sg.MAX_TILES, np.uint32)
    for config in cuda_configs(hd):
        for has_norm, with_bias in ((True, False), (False, True)):
            a, b, r = rope_case(m, nh, nkv, k, hd, seed=hd + m)
            if not with_bias:
                r["bias"] = None
            n = (nh + 2 * nkv) * hd
            want = {key: v.copy() if isinstance(v, np.ndarray) else v for key, v in r.items()}
            sg.skinny_gemm_rope(np, a, b, np.zeros((m, n), np.float32), *(want[x] for x in ROPE_NAMES), None, None,
                                has_norm=has_norm, eps=1e-6, config=config)
            da, db = cupy.asarray(a), cupy.asarray(b)
            plain = {key: cupy.asarray(v) if isinstance(v, np.ndarray) else v for key, v in r.items()}
            qkv = cupy.zeros((m, n), np.float32)
            sg.skinny_gemm(cupy, da, db, qkv, partials, counters, config=config)
            rotary.qk_norm_rope_store(cupy, qkv, *(plain[x] for x in ROPE_NAMES), has_norm=has_norm, eps=1e-6)
            what = f"{config} hd={hd} m={m} norm={has_norm} bias={with_bias}"
            for run in range(2):
                fused = {key: cupy.asarray(v) if isinstance(v, np.ndarray) else v for key, v in r.items()}
                c = cupy.full((m, n), np.nan, np.float32)
                sg.skinny_gemm_rope(cupy, da, db, c, *(fused[x] for x in ROPE_NAMES), partials, counters,
                                    has_norm=has_norm, eps=1e-6, config=config)
                for x in ("q_out", "k_cache", "v_cache"):
                    got = fused[x].get()
                    assert np.array_equal(got.view(np.uint8), plain[x].get().view(np.uint8)), f"{what} run {run}: {x}"
                    assert_within_bound(got, want[x], f"{what}: {x} against the twin")
                assert bool(cupy.isnan(c).all()), f"{what} run {run}: C left unwritten"
                assert int(counters.sum()) == 0, f"{what} run {run}: the tile counters are back at zero"
            assert np.abs(want["q_out"]).max() > 0.1, "non-vacuity: q rotated away from zero"


@pytest.mark.gpu
def test_a_rope_plan_times_the_fused_configurations_and_each_is_right() -> None:
    """A decode-sized q/k/v projection's rope plan times cuBLASLt + the rotary kernel beside the fused kernel; every
    candidate, run after the tuning, writes what the twin does."""
    import cupy

    from backends import cublaslt
    from backends.cuda import CudaBackend

    backend = CudaBackend()
    nh, nkv, hd, k = 16, 8, 128, 1024
    a, b, r = rope_case(1, nh, nkv, k, hd, seed=3)
    n = (nh + 2 * nkv) * hd
    want = {key: v.copy() if isinstance(v, np.ndarray) else v for key, v in r.items()}
    sg.skinny_gemm_rope(np, a, b, np.zeros((1, n), np.float32), *(want[x] for x in ROPE_NAMES), None, None,
                        has_norm=True, eps=1e-6)
    d = {key: cupy.asarray(v) for key, v in r.items()}
    da, db, c = cupy.asarray(a), cupy.asarray(b), cupy.zeros((1, n), np.float32)
    assert backend.blas.gemm_qk_norm_rope_store(da, db, c, *(d[x] for x in ROPE_NAMES), True, 1e-6)
    plan = backend.blas.lt.plans[(cublaslt.CUDA_R_16BF, 1, n, k, sg.rope_epilogue(hd))]
    fused = [cand for cand in plan.candidates if isinstance(cand, sg.Config)]
    assert fused == list(sg.configs(sg.rope_epilogue(hd))) != [], "the head-wide configurations are candidates"
    assert len(plan.times_us) == len(plan.candidates) > len(fused), "every candidate timed, cuBLASLt's too"
    stream = cupy.cuda.get_current_stream()
    for cand in plan.candidates:
        out = {key: cupy.asarray(v) for key, v in r.items()}
        epilogue = cublaslt.Rope(*(out[x] for x in ROPE_NAMES), True, 1e-6)
        plan.run(da.data.ptr, db.data.ptr, c.data.ptr, stream.ptr, cand, epilogue)
        for x in ("q_out", "k_cache", "v_cache"):
            assert_within_bound(out[x].get(), want[x], f"{cublaslt.name(cand)}: {x}")
    print(f"\n1x{n}x{k} rope{hd}: {plan.picked} picked; times {plan.times_us} us (fused last)")


@pytest.mark.gpu
def test_on_the_gpu_a_decode_step_runs_its_rotary_inside_the_qkv_gemm_and_computes_the_same(
        monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """A model of head dim 64 with every decode GEMM's plan on the skinny kernel: each layer's q/k/v projection runs
    the rotary kernel's work in its epilogue, one node a layer fewer than with the epilogue refused, and the same
    logits bit for bit (the same GEMM configuration, the same device function after it)."""
    import cupy

    from backends.cuda import CudaBackend
    from models import tiny
    from models.loader import load_checkpoint
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    monkeypatch.setitem(tiny.SPECS, "tiny-qwen3-hd64", (dict(tiny.SPECS["tiny-qwen3"][0], head_dim=64), 1234, None))
    backend = CudaBackend()
    model = load_model(load_checkpoint(tiny.ensure("tiny-qwen3-hd64", str(tmp_path))), backend, "bfloat16")
    kv = model.make_kv_cache(num_blocks=16, block_size=16)
    inp = DecodeInputs(np.array([11]), np.array([20]), np.array([5 * 16 + 4]), np.array([[3, 5]]))
    got = {}
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(backend.xp, "gemm_qk_norm_rope_store", lambda *args: False)
        driver = GraphDriver(model, kv, max_num_seqs=4)
        driver.step(inp)  # cold: every shape planned and tuned
        skinny = [p for p in backend.blas.lt.plans.values()
                  if p.storage is not None and sg.fits(p.m, p.n, p.storage, p.epilogue)]
        for plan in skinny:  # one configuration for each plan's shape, fused or not
            plan.algo = sg.configs(plan.epilogue)[0] if plan.epilogue.startswith("rope") else sg.DEFAULT
            sg.load(cupy, plan.storage, plan.m, plan.algo, plan.epilogue)
        driver.step(inp)  # captured
        driver.step(inp)  # replayed
        assert driver.num_replays > 0, "non-vacuity: a replay"
        got[fused] = driver.last_slot.graph.num_nodes, driver.last_logits(), {p.epilogue for p in skinny}
    assert sg.rope_epilogue(64) in got[True][2], "non-vacuity: the q/k/v projection planned with the epilogue"
    layers = model.cfg.num_hidden_layers
    assert got[True][0] == got[False][0] - layers, f"nodes fused / not: {got[True][0]} / {got[False][0]}"
    assert np.array_equal(got[True][1], got[False][1]), "the same logits bit for bit"
