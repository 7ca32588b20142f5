"""The skinny GEMM (backends/kernels/skinny_gemm.py) in each configuration: its K split covers K exactly, within
the scratch; its twin against a float64 product; (GPU lane) the kernel against its twin, twice in a row on the same
scratch (the tile counters must be back at zero), and as the algorithms a decode-sized cuBLASLt plan may pick."""

from __future__ import annotations

import numpy as np
import pytest

from backends.kernels import skinny_gemm as sg
from vt.dtypes import narrow_host, widen_host

SHAPES = [(1, 1024, 1024), (3, 4096, 1024), (8, 5120, 2048), (2, 1000, 96), (1, 128, 2048), (5, 8, 4096)]
CONFIG_IDS = [f"tc{c.tc}u{c.unroll}x{c.per_sm}" for c in sg.CONFIGS]
STORAGE = {"bfloat16": np.dtype(np.uint16), "float16": np.dtype(np.float16)}


def operands(m: int, n: int, k: int, dtype: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = narrow_host(rng.standard_normal((m, k), dtype=np.float32), STORAGE[dtype])
    b = narrow_host(rng.standard_normal((k, n), dtype=np.float32) * 0.05, STORAGE[dtype])
    return a, b


def magnitude(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.abs(widen_host(a)).astype(np.float64) @ np.abs(widen_host(b)).astype(np.float64)


@pytest.mark.parametrize("config", sg.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_the_split_covers_k_exactly_within_the_scratch(m: int, n: int, k: int, config: sg.Config) -> None:
    step, s = sg.split(m, n, k, config)
    covered = [r for i in range(s) for r in range(i * step, min(k, (i + 1) * step))]
    assert covered == list(range(k)), "every row of K in exactly one slice"
    assert s == 1 or (s * m * n <= sg.SCRATCH_FLOATS and -(-n // config.cols) <= sg.MAX_TILES)


@pytest.mark.parametrize("config", sg.CONFIGS, ids=CONFIG_IDS)
def test_small_n_splits_k(config: sg.Config) -> None:
    step, s = sg.split(1, 1024, 1024, config)
    assert s > 1, "non-vacuous: 4-16 column tiles alone would leave most SMs idle"
    assert step >= 2 * config.thread_rows, "each row of threads takes at least two rows of K"
    assert sg.split(1, 151936, 2048, config)[1] == 1, "a wide N has blocks enough unsplit"


@pytest.mark.parametrize("config", sg.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_twin_equals_the_product(m: int, n: int, k: int, dtype: str, config: sg.Config) -> None:
    a, b = operands(m, n, k, dtype)
    out = np.zeros((m, n), np.float32)
    sg.skinny_gemm(np, a, b, out, None, None, config=config)
    want = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    assert np.all(np.abs(out - want) <= 1e-5 * (1 + magnitude(a, b))), "C = A @ B, float32 accumulation"


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_cuda_skinny_gemm_equals_its_twin_twice_on_one_scratch(m: int, n: int, k: int, dtype: str,
                                                                 config: sg.Config) -> None:
    import cupy

    a, b = operands(m, n, k, dtype, seed=m + n)
    want = np.zeros((m, n), np.float32)
    sg.skinny_gemm(np, a, b, want, None, None, config=config)
    partials = cupy.zeros(sg.SCRATCH_FLOATS, np.float32)
    counters = cupy.zeros(sg.MAX_TILES, np.uint32)
    bound = 1e-5 * (1 + magnitude(a, b))
    for run in range(2):
        out = cupy.full((m, n), np.nan, np.float32)
        sg.skinny_gemm(cupy, cupy.asarray(a), cupy.asarray(b), out, partials, counters, config=config)
        got = out.get()
        assert np.all(np.abs(got - want) <= bound), f"run {run}: {int((np.abs(got - want) > bound).sum())} past"
        assert int(counters.sum()) == 0, f"run {run}: the tile counters are back at zero"


@pytest.mark.gpu
def test_a_decode_shapes_plan_times_the_skinny_gemm_and_every_candidate_is_right() -> None:
    """The plan of a decode-sized shape times the skinny GEMM beside cuBLASLt's algorithms; whichever it picks must
    be right, so each candidate's output is checked, after the tuning ran each of them several times."""
    import cupy

    from backends import cublaslt
    from backends.cuda import CudaBackend

    backend = CudaBackend()
    a, b = operands(1, 4096, 1024, "bfloat16", seed=5)
    da, db = cupy.asarray(a), cupy.asarray(b)
    out = cupy.zeros((1, 4096), np.float32)
    backend.xp.matmul(da, db, out=out)
    plans = [p for p in backend.blas.lt.plans.values() if (p.m, p.n, p.k) == (1, 4096, 1024)]
    assert plans and all(c in plans[0].candidates for c in sg.CONFIGS), "each skinny configuration is a candidate"
    plan = plans[0]
    assert len(plan.times_us) == len(plan.candidates) > 1, "every candidate timed, the skinny GEMM too"
    want = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    bound = 1e-5 * (1 + magnitude(a, b))
    stream = cupy.cuda.get_current_stream()
    for i, cand in enumerate(plan.candidates):
        out.fill(np.nan)
        plan.run(da.data.ptr, db.data.ptr, out.data.ptr, stream.ptr, cand)
        what = cublaslt.name(cand)
        assert np.all(np.abs(out.get() - want) <= bound), f"candidate {i} ({what}) after the tuning"
    print(f"\n1x4096x1024 bf16: {plan.picked} picked; times {plan.times_us} us (skinny configurations last)")
