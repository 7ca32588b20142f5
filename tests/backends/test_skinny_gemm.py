"""The skinny GEMM (backends/kernels/skinny_gemm.py) in each configuration: its K split covers K exactly, within
the scratch; its twin against a float64 product; (GPU lane) the kernel against its twin, twice in a row on the same
scratch (the tile counters must be back at zero), and as the algorithms a decode-sized cuBLASLt plan may pick."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
    assert_twin_is_the_product(sg.skinny_gemm, m, n, k, dtype, config)


def assert_twin_is_the_product(gemm: Callable[..., None], m: int, n: int, k: int, dtype: str, config: Any) -> None:
    """A skinny GEMM's NumPy twin (skinny_gemm's or skinny_mma's) against the float64 product, within float32
    accumulation's bound."""
    a, b = operands(m, n, k, dtype)
    out = np.zeros((m, n), np.float32)
    gemm(np, a, b, out, None, None, config=config)
    want = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    assert np.all(np.abs(out - want) <= 1e-5 * (1 + magnitude(a, b))), "C = A @ B, float32 accumulation"


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_cuda_skinny_gemm_equals_its_twin_twice_on_one_scratch(m: int, n: int, k: int, dtype: str,
                                                                 config: sg.Config) -> None:
    import cupy

    def counters_back_at_zero(partials: Any, counters: Any, what: str) -> None:
        assert int(counters.sum()) == 0, f"{what}: the tile counters are back at zero"

    partials = cupy.zeros(sg.SCRATCH_FLOATS, np.float32)
    counters = cupy.zeros(sg.MAX_TILES, np.uint32)
    assert_twice_equals_twin(m, n, k, dtype, config, partials, counters, counters_back_at_zero)


def assert_twice_equals_twin(m: int, n: int, k: int, dtype: str, config: sg.Config, partials: Any, counters: Any,
                             check_scratch: Callable[[Any, Any, str], None]) -> None:
    """The kernel twice in a row on one scratch, each run's C to the twin's float32 bound; check_scratch(partials,
    counters, what) after each run (the split configurations' counters back at zero, the cluster ones' scratch
    untouched)."""
    import cupy

    a, b = operands(m, n, k, dtype, seed=m + n)
    want = np.zeros((m, n), np.float32)
    sg.skinny_gemm(np, a, b, want, None, None, config=config)
    bound = 1e-5 * (1 + magnitude(a, b))
    for run in range(2):
        out = cupy.full((m, n), np.nan, np.float32)
        sg.skinny_gemm(cupy, cupy.asarray(a), cupy.asarray(b), out, partials, counters, config=config)
        got = out.get()
        assert np.all(np.abs(got - want) <= bound), f"run {run}: {int((np.abs(got - want) > bound).sum())} past"
        check_scratch(partials, counters, f"run {run}")


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


# (m, 2 I, K): the 0.6B and 8B gate/up projections, one column tile past a whole number of the widest, a K split deep
SWIGLU_SHAPES = [(1, 6144, 1024), (8, 6144, 1024), (1, 24576, 4096), (3, 1040, 96), (2, 256, 2048)]


def swiglu_reference(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """SiLU(gate) x up in float64, gate's and up's columns of b interleaved PAIR_COLS at a time."""
    from backends.kernels.activation import gate_up_columns

    c = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    gate, up = gate_up_columns(b.shape[1] // 2, sg.PAIR_COLS)
    return c[:, gate] / (1 + np.exp(-c[:, gate])) * c[:, up]


# the twin against float64 on the CPU lane: every shape but the 8B's (6.5 s of CI's 2 cores for 100M weights; the
# GPU lane's test below runs the twin there, against the kernel)
@pytest.mark.parametrize("m,n,k", [s for s in SWIGLU_SHAPES if s != (1, 24576, 4096)])
def test_the_swiglu_twin_activates_each_interleaved_pair(m: int, n: int, k: int) -> None:
    a, b = operands(m, n, k, "bfloat16", seed=n)
    act = np.zeros((m, n // 2), np.uint16)
    sg.skinny_gemm_swiglu(np, a, b, np.zeros((m, n), np.float32), act, None, None)
    want = swiglu_reference(a, b)
    assert np.all(np.abs(widen_host(act) - want) <= 2 ** -7 * np.abs(want) + 1e-5), "to a bf16 ulp"
    c = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    halves = c[:, : n // 2] / (1 + np.exp(-c[:, : n // 2])) * c[:, n // 2:]
    assert np.abs(halves - want).max() > 0.05, "non-vacuity: gate then up, unpaired, is another activation"


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("m,n,k", SWIGLU_SHAPES)
def test_cuda_skinny_gemm_with_the_swiglu_epilogue_equals_its_twin_on_one_scratch(m: int, n: int, k: int,
                                                                                 config: sg.Config) -> None:
    """act = SiLU(gate) x up from one launch, against the GEMM's twin and silu_mul's over the interleaved pairs, twice
    on one scratch (the tile counters back at zero); C is the unfused path's scratch and stays unwritten."""
    assert_swiglu_kernel_equals_its_twin(sg.skinny_gemm_swiglu, m, n, k, config)


def assert_swiglu_kernel_equals_its_twin(kernel: Callable[..., None], m: int, n: int, k: int, config: Any,
                                         sums_bound: float = 0.0) -> None:
    """A SwiGLU epilogue's kernel (the CUDA-core or tensor-core skinny GEMM's) against its twin, twice on one scratch:
    act to a bf16 ulp, the tile counters back at zero, C left unwritten. sums_bound: how far the kernel's gate and up
    sums may stand from the twin's, per unit of sum |a| |b| (the plain kernel's own bound); what that moves SiLU(gate)
    x up by is allowed beside the ulp (|SiLU(g)| du + max |SiLU'| |u| dg, max |SiLU'| < 1.1)."""
    import cupy

    from backends.kernels.activation import gate_up_columns

    a, b = operands(m, n, k, "bfloat16", seed=m + n)
    want, sums = np.zeros((m, n // 2), np.uint16), np.zeros((m, n), np.float32)
    kernel(np, a, b, sums, want, None, None, config=config)
    partials = cupy.zeros(sg.SCRATCH_FLOATS, np.float32)
    counters = cupy.zeros(sg.MAX_TILES, np.uint32)
    exp = widen_host(want)
    gate, up = gate_up_columns(n // 2, sg.PAIR_COLS)
    moved = sums_bound * (1 + magnitude(a, b))
    g, u = sums[:, gate].astype(np.float64), sums[:, up].astype(np.float64)
    carried = np.abs(g / (1 + np.exp(-g))) * moved[:, up] + 1.1 * np.abs(u) * moved[:, gate]
    bound = 2 ** -7 * np.abs(exp) + 1e-5 + carried
    for run in range(2):
        c, act = cupy.full((m, n), np.nan, np.float32), cupy.zeros((m, n // 2), np.uint16)
        kernel(cupy, cupy.asarray(a), cupy.asarray(b), c, act, partials, counters, config=config)
        got = widen_host(act.get())
        past = ~(np.abs(got - exp) <= bound)  # a NaN is past
        worst = np.unravel_index(np.argmax(np.abs(got - exp) - bound), past.shape)
        assert not past.any(), (f"run {run}: {int(past.sum())} of {past.size} outputs past the bound; worst at "
                                f"{worst}: {got[worst]} against {exp[worst]} (bound {bound[worst]:.3g})")
        assert int(counters.sum()) == 0, f"run {run}: the tile counters are back at zero"
        assert bool(cupy.isnan(c).all()), f"run {run}: C left unwritten"
    assert np.abs(exp).max() > 0.05, "non-vacuity: outputs far from zero"
    carried_ulps = np.median(carried / (2 ** -7 * np.abs(exp) + 1e-30))
    assert carried_ulps < 2, f"non-vacuity: the carried part is within two ulps for most outputs ({carried_ulps:.2f})"


# 0.6B's o and down; the 30B-A3B's o (a row of 2,048: two float4s a thread) and the 8B's (four)
NORM_SHAPES = [(1, 1024, 2048), (1, 1024, 3072), (8, 1024, 3072), (3, 2048, 1024), (2, 512, 96), (1, 2048, 4096),
               (8, 4096, 4096)]
NORM_RUNS = 6


def norm_case(m: int, n: int, k: int, config: Any, kernel: Callable[..., None] = sg.skinny_gemm_norm) -> tuple:
    """A norm epilogue's operands a, b, the residual x0 and the norm's weight w, and its twin's C, x and h (the
    CUDA-core skinny GEMM's by default, or `kernel`'s)."""
    a, b = operands(m, n, k, "bfloat16", seed=m + k)
    rng = np.random.default_rng(n)
    x0 = rng.standard_normal((m, n), dtype=np.float32)
    w = (1 + 0.1 * rng.standard_normal(n)).astype(np.float32)
    want_c, want_x, want_h = np.zeros((m, n), np.float32), x0.copy(), np.zeros((m, n), np.uint16)
    kernel(np, a, b, want_c, None, None, want_x, w, want_h, eps=1e-6, config=config)
    return a, b, x0, w, (want_c, want_x, widen_host(want_h))


def assert_norm_outputs(c: np.ndarray, x: np.ndarray, h: np.ndarray, want: tuple, a: np.ndarray, b: np.ndarray,
                        run: int) -> None:
    """C to the product's float32 bound, x += C, and h (bf16 bits) to a bf16 ulp of want's."""
    want_c, want_x, exp_h = want
    assert np.all(np.abs(c - want_c) <= 1e-5 * (1 + magnitude(a, b))), f"run {run}: C"
    np.testing.assert_allclose(x, want_x, rtol=1e-5, atol=1e-4, err_msg=f"run {run}: x += C")
    assert np.all(np.abs(widen_host(h) - exp_h) <= 2 ** -7 * np.abs(exp_h) + 1e-6), f"run {run}: h, to a bf16 ulp"


@pytest.mark.parametrize("m,n,k", NORM_SHAPES)
def test_the_norm_twin_adds_the_product_into_x_and_norms_it(m: int, n: int, k: int) -> None:
    """The twin the norm epilogue is held to, against float64: C = A @ B, x += C, h = x / rms(x) * w in bf16."""
    assert_norm_twin_is_the_float64_norm(sg.skinny_gemm_norm, sg.DEFAULT, m, n, k)


def assert_norm_twin_is_the_float64_norm(kernel: Callable[..., None], config: Any, m: int, n: int, k: int) -> None:
    """A norm epilogue's twin (the CUDA-core or tensor-core skinny GEMM's) against float64."""
    a, b, x0, w, got = norm_case(m, n, k, config, kernel)
    c = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    x = x0 + c
    h = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + 1e-6) * w
    assert_norm_outputs(got[0], got[1], narrow_host(got[2].astype(np.float32), np.dtype(np.uint16)), (c, x, h), a,
                        b, 0)
    assert np.abs(x - x0).max() > 0.1, "non-vacuity: the add moved the residual"


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("m,n,k", NORM_SHAPES)
def test_cuda_skinny_gemm_with_the_norm_epilogue_equals_its_twin_on_one_scratch(m: int, n: int, k: int,
                                                                               config: sg.Config) -> None:
    """C, the residual stream x += C and the next norm h from one launch, against the GEMM's twin and add_rms_norm's;
    RUNS times on one scratch: the tile counters and the norm's own are back at zero after each, and a norm that ran
    before every tile of C was written (a race, so not every run shows it) read a NaN."""
    assert_norm_kernel_equals_its_twin(sg.skinny_gemm_norm, m, n, k, config, NORM_RUNS)


def assert_norm_kernel_equals_its_twin(kernel: Callable[..., None], m: int, n: int, k: int, config: Any,
                                       runs: int) -> None:
    """A norm epilogue's kernel (the CUDA-core or tensor-core skinny GEMM's) against its twin, `runs` times on one
    scratch: C, x += C and h each run, every counter (the norm's too) back at zero after each."""
    import cupy

    a, b, x0, w, want = norm_case(m, n, k, config, kernel)
    partials = cupy.zeros(sg.SCRATCH_FLOATS, np.float32)
    counters = cupy.zeros(sg.MAX_TILES, np.uint32)
    for run in range(runs):
        c, x, h = cupy.full((m, n), np.nan, np.float32), cupy.asarray(x0), cupy.zeros((m, n), np.uint16)
        kernel(cupy, cupy.asarray(a), cupy.asarray(b), c, partials, counters, x, cupy.asarray(w), h, eps=1e-6,
               config=config)
        assert_norm_outputs(c.get(), x.get(), h.get(), want, a, b, run)
        assert int(counters.sum()) == 0, f"run {run}: every counter, the norm's too, back at zero"
    assert np.abs(want[1] - x0).max() > 0.1, "non-vacuity: the add moved the residual"


@pytest.mark.gpu
def test_on_the_gpu_a_decode_step_on_skinny_plans_norms_inside_its_gemms_and_computes_the_same(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """With every decode GEMM's plan on the skinny kernel, each layer's o and down projections run the norm after
    them in their epilogue, and its gate/up projection the SwiGLU activation: three nodes a layer fewer in the
    captured step than with the epilogues refused, and the same logits (to the norm's summation order)."""
    import cupy

    from backends.cuda import CudaBackend
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    backend = CudaBackend()
    model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, "bfloat16")
    model.consumer_norm = False  # the norm epilogues' path (test_consumer_norm.py holds the other to it)
    kv = model.make_kv_cache(num_blocks=16, block_size=16)
    inp = DecodeInputs(np.array([11]), np.array([20]), np.array([5 * 16 + 4]), np.array([[3, 5]]))
    got = {}
    for fused in (True, False):
        if not fused:
            for op in ("gemm_add_rms_norm", "gemm_silu_mul"):
                monkeypatch.setattr(backend.xp, op, lambda *args: False)
        driver = GraphDriver(model, kv, max_num_seqs=4)
        driver.step(inp)  # cold: every shape planned and tuned
        skinny = [p for p in backend.blas.lt.plans.values()
                  if p.storage is not None and sg.fits(p.m, p.n, p.storage, p.epilogue)]
        for plan in skinny:
            plan.algo = sg.DEFAULT
            sg.load(cupy, plan.storage, plan.m, sg.DEFAULT, plan.epilogue)  # as a tuning that picked it would have
        driver.step(inp)  # captured
        driver.step(inp)  # replayed
        epilogues = {p.epilogue for p in skinny}
        assert driver.num_replays > 0 and epilogues >= {"", "norm", "swiglu"}, "non-vacuity: a replay, skinny plans"
        got[fused] = driver.last_slot.graph.num_nodes, driver.last_logits()
    layers = model.cfg.num_hidden_layers
    assert got[True][0] == got[False][0] - 3 * layers, f"nodes fused / not: {got[True][0]} / {got[False][0]}"
    fused_logits, plain = got[True][1], got[False][1]
    assert np.abs(fused_logits - plain).max() <= 0.02 * np.abs(plain).max()
    assert np.argmax(fused_logits, -1).tolist() == np.argmax(plain, -1).tolist()
