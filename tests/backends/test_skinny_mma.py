"""The tensor-core skinny GEMM (backends/kernels/skinny_mma.py) in each configuration: its K split covers K exactly in
whole k16 steps, within the skinny GEMM's scratch; its twin against a float64 product; (GPU lane) the kernel against
its twin, twice in a row on one scratch (the tile counters back at zero), and as a candidate a 16-row cuBLASLt plan
times beside cuBLASLt's algorithms. Its epilogues (the residual add + RMSNorm, SwiGLU): their twins against float64,
the shapes they serve, the plans that take them; (GPU lane) each against its twin, twice on one scratch. Whether a
plan times it at all (VT_SKINNY_MMA): test_skinny_mma_timing.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from backends.kernels import skinny_gemm as sg
from backends.kernels import skinny_mma as sm
from tests.backends.test_skinny_gemm import (
    assert_norm_kernel_equals_its_twin,
    assert_norm_twin_is_the_float64_norm,
    assert_swiglu_kernel_equals_its_twin,
    assert_twin_is_the_product,
    magnitude,
    operands,
    swiglu_reference,
)
from tests.helpers import flag_set
from vt.dtypes import widen_host

# (m, n, k): the 0.6B shape's qkv / o / gate-up / down projections at a prefix hit's 16 rows, a decode step of 9 rows
# over the 8B shape's o projection, a K that no slice length divides (a short last slice), a tiny N split deep, a
# wide N unsplit, a K of one partial k16 step per warp
SHAPES = [(16, 4096, 1024), (16, 1024, 2048), (16, 6144, 1024), (16, 1024, 3072), (9, 4096, 4096),
          (3, 1024, 2056), (5, 8, 4096), (2, 32768, 1024), (16, 1000, 24)]
CONFIG_IDS = [f"nt{c.nt}s{c.stages}x{c.per_sm}" for c in sm.CONFIGS]


@pytest.mark.parametrize("config", sm.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_the_split_covers_k_exactly_in_whole_k16_steps_within_the_scratch(m: int, n: int, k: int,
                                                                           config: sm.MmaConfig) -> None:
    step, s = sm.split(m, n, k, config)
    covered = [r for i in range(s) for r in range(i * step, min(k, (i + 1) * step))]
    assert covered == list(range(k)), "every row of K in exactly one slice"
    assert s == 1 or step % 16 == 0, "a slice is whole k16 steps (a warp's step never crosses into the next)"
    assert s == 1 or (s * m * n <= sg.SCRATCH_FLOATS and -(-n // config.cols) <= sg.MAX_TILES)


def test_the_split_reaches_a_short_last_slice_and_spreads_a_narrow_n() -> None:
    """Non-vacuity of the cases: a shape whose last slice is shorter than the others, a narrow N split deep, a wide N
    left whole."""
    step, s = sm.split(3, 1024, 2056)
    assert s > 1 and s * step > 2056, (step, s)
    assert sm.split(16, 1024, 2048)[1] > 1, "eight column tiles alone would leave most SMs idle"
    assert sm.split(16, 151936, 1024)[1] == 1, "the LM head has blocks enough unsplit"


def test_the_kernel_serves_two_to_sixteen_rows_of_16_bit_operands() -> None:
    """One row stays the CUDA-core kernel's (a read of B); more than the mma's 16 rows is cuBLASLt's."""
    assert sm.fits(2, 1024, 1024, np.uint16) and sm.fits(16, 1024, 1024, np.float16)
    assert not sm.fits(1, 1024, 1024, np.uint16) and not sm.fits(17, 1024, 1024, np.uint16)
    assert not sm.fits(16, 1020, 1024, np.uint16) and not sm.fits(16, 1024, 1020, np.uint16)
    assert not sm.fits(16, 1024, 1024, np.float32)


@pytest.mark.parametrize("config", sm.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_the_twin_equals_the_product(m: int, n: int, k: int, dtype: str, config: sm.MmaConfig) -> None:
    assert_twin_is_the_product(sm.skinny_mma, m, n, k, dtype, config)


@pytest.mark.gpu
@pytest.mark.parametrize("config", sm.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", SHAPES)
def test_cuda_skinny_mma_equals_its_twin_twice_on_one_scratch(m: int, n: int, k: int, dtype: str,
                                                             config: sm.MmaConfig) -> None:
    """Each run's C (every row, every column: NaN before the run) within the twin's float32 bound, and the tile
    counters back at zero after each."""
    import cupy

    partials = cupy.zeros(sg.SCRATCH_FLOATS, np.float32)
    counters = cupy.zeros(sg.MAX_TILES, np.uint32)
    a, b = operands(m, n, k, dtype, seed=m + n)
    want = np.zeros((m, n), np.float32)
    sm.skinny_mma(np, a, b, want, None, None, config=config)
    bound = 1e-5 * (1 + magnitude(a, b))
    for run in range(2):
        out = cupy.full((m, n), np.nan, np.float32)
        sm.skinny_mma(cupy, cupy.asarray(a), cupy.asarray(b), out, partials, counters, config=config)
        got = out.get()
        assert np.all(np.abs(got - want) <= bound), f"run {run}: {int((~(np.abs(got - want) <= bound)).sum())} past"
        assert int(counters.sum()) == 0, f"run {run}: the tile counters are back at zero"


@pytest.mark.gpu
def test_a_16_row_plan_times_the_tensor_core_gemm_and_every_candidate_is_right() -> None:
    """A 16-row shape's plan (a prefix hit's tail, a decode step of 9 to 16 requests) times the tensor-core GEMM
    beside cuBLASLt's algorithms; whichever it picks must be right, so each candidate's output is checked after the
    tuning ran each of them several times."""
    import cupy

    from backends import cublaslt
    from backends.cuda import CudaBackend

    a, b = operands(16, 4096, 1024, "bfloat16", seed=6)
    da, db = cupy.asarray(a), cupy.asarray(b)
    out = cupy.zeros((16, 4096), np.float32)
    with flag_set("VT_SKINNY_MMA", "1"):  # the plan is made (and tuned) at the first call
        backend = CudaBackend()
        backend.xp.matmul(da, db, out=out)
    plans = [p for p in backend.blas.lt.plans.values() if (p.m, p.n, p.k) == (16, 4096, 1024)]
    assert plans and all(c in plans[0].candidates for c in sm.CONFIGS), "each tensor-core configuration a candidate"
    plan = plans[0]
    assert len(plan.times_us) == len(plan.candidates) > len(sm.CONFIGS), "every candidate timed, cuBLASLt's too"
    want = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    bound = 1e-5 * (1 + magnitude(a, b))
    stream = cupy.cuda.get_current_stream()
    for i, cand in enumerate(plan.candidates):
        out.fill(np.nan)
        plan.run(da.data.ptr, db.data.ptr, out.data.ptr, stream.ptr, cand)
        assert np.all(np.abs(out.get() - want) <= bound), f"candidate {i} ({cublaslt.name(cand)}) after the tuning"
    print(f"\n16x4096x1024 bf16: {plan.picked} picked; times {plan.times_us} us (tensor-core configurations last)")


def test_the_tuner_names_a_tensor_core_candidate_by_its_configuration() -> None:
    """The tuner's log and the lane's tables name the candidate a plan picked: a tensor-core configuration by its
    tiles, stages and blocks a SM, never as cuBLASLt."""
    from backends import cublaslt

    names = {cublaslt.name(c) for c in sm.CONFIGS}
    assert len(names) == len(sm.CONFIGS) and not names & {"cuBLASLt"}, names
    assert cublaslt.name(object()) == "cuBLASLt", "non-vacuity: anything else reads as cuBLASLt"


def run_mma(xp: Any, a: np.ndarray, b: np.ndarray, config: sm.MmaConfig) -> np.ndarray:
    out = np.zeros((a.shape[0], b.shape[1]), np.float32)
    sm.skinny_mma(xp, a, b, out, None, None, config=config)
    return out


@pytest.mark.gpu
@pytest.mark.parametrize("rows", [8, 16])
def test_on_the_gpu_a_step_on_tensor_core_plans_computes_the_cublaslt_steps_logits(rows: int) -> None:
    """tiny-qwen3 (bf16), a decode step of `rows` rows through the graph driver, cold, captured and replayed, with
    every plan that times the tensor-core GEMM set to it, against the same step with those plans on cuBLASLt's first
    pick: the same logits to the GEMMs' summation order. At 8 and 16 rows the o, down and gate/up plans have consumers
    (the norm, SwiGLU), which the kernel runs in its own launch, and cuBLASLt's pick as a launch after it."""
    from backends.cuda import CudaBackend
    from models.loader import load_checkpoint, resolve_model
    from models.registry import load_model
    from vt.engine.worker.graph_driver import DecodeInputs, GraphDriver

    with flag_set("VT_SKINNY_MMA", "1"):
        backend = CudaBackend()
        model = load_model(load_checkpoint(resolve_model("tiny-qwen3")), backend, "bfloat16")
        kv = model.make_kv_cache(num_blocks=4 * rows, block_size=16)
        tables = np.array([[2 * i + 1, 2 * i + 2] for i in range(rows)])
        positions = np.full(rows, 20)
        slots = tables[:, 1] * 16 + 4
        inp = DecodeInputs(np.arange(11, 11 + rows), positions, slots, tables)
        got, kinds = {}, set()
        for mode in ("mma", "cublaslt"):
            driver = GraphDriver(model, kv, max_num_seqs=rows)
            driver.step(inp)  # cold: every shape planned and tuned (each candidate loaded)
            plans = [p for p in backend.blas.lt.plans.values()
                     if p.m == rows and any(isinstance(c, sm.MmaConfig) for c in p.candidates)]
            for plan in plans:
                plan.algo = sm.CONFIGS[0] if mode == "mma" else plan.candidates[0]
            kinds |= {p.epilogue for p in plans}
            driver.step(inp)  # captured
            driver.step(inp)  # replayed
            assert plans and driver.num_replays > 0, "non-vacuity: tensor-core plans, a replay"
            got[mode] = driver.last_logits()
    assert kinds >= {"", "norm", "swiglu"}, f"plans with consumers among them: {kinds}"
    mma, plain = got["mma"], got["cublaslt"]
    assert np.abs(mma - plain).max() <= 0.02 * np.abs(plain).max()
    assert np.argmax(mma, -1).tolist() == np.argmax(plain, -1).tolist()


# (m, 2 I, K) of the SwiGLU epilogue: 0.6B's gate/up at a hit's 16 rows and at 8, a partial last column tile of whole
# pairs, a K split deep; the 8B's on the GPU lane only (its twin is 6 s of CI's CPU)
MMA_SWIGLU_SHAPES = [(16, 6144, 1024), (8, 6144, 1024), (9, 1040, 96), (2, 256, 2048)]
# (m, n, K) of the norm epilogue: 0.6B's o and down at 16 and 8 rows, the 30B-A3B's o, a short K, the 8B's o, a
# last column tile cut short
MMA_NORM_SHAPES = [(16, 1024, 2048), (8, 1024, 3072), (3, 2048, 1024), (2, 512, 96), (16, 4096, 4096), (16, 1032, 1024)]


@pytest.mark.parametrize("m,n,k", MMA_NORM_SHAPES[:2])
def test_the_norm_twin_adds_the_product_into_x_and_norms_it(m: int, n: int, k: int) -> None:
    """The twin the kernel's norm epilogue is held to, against float64: C = A @ B, x += C, h = x / rms(x) * w."""
    assert_norm_twin_is_the_float64_norm(sm.skinny_mma_norm, sm.CONFIGS[0], m, n, k)


@pytest.mark.parametrize("m,n,k", MMA_SWIGLU_SHAPES[1:])
def test_the_swiglu_twin_activates_each_interleaved_pair(m: int, n: int, k: int) -> None:
    a, b = operands(m, n, k, "bfloat16", seed=n)
    act = np.zeros((m, n // 2), np.uint16)
    sm.skinny_mma_swiglu(np, a, b, np.zeros((m, n), np.float32), act, None, None)
    want = swiglu_reference(a, b)
    assert np.all(np.abs(widen_host(act) - want) <= 2 ** -7 * np.abs(want) + 1e-5), "to a bf16 ulp"
    assert np.abs(want).max() > 0.05, "non-vacuity: outputs far from zero"


def test_the_epilogues_serve_whole_gate_up_pairs_and_one_consumer_a_launch() -> None:
    """SwiGLU needs N in whole gate/up pairs of PAIR_COLS (a column tile never splits one); the norm any N the plain
    kernel serves; the consumer's norm (one row's) is not the kernel's to run; one epilogue a launch."""
    from backends.kernels.activation import PAIR_COLS

    assert sm.fits(16, 6144, 1024, np.uint16, "swiglu") and sm.fits(16, 1032, 1024, np.uint16, "norm")
    assert not sm.fits(16, 1032, 1024, np.uint16, "swiglu"), "1,032 columns end in half a gate/up pair"
    assert sm.fits(16, 1032, 1024, np.uint16), "non-vacuity: the plain kernel serves that N"
    assert all(c.cols % (2 * PAIR_COLS) == 0 for c in sm.CONFIGS), "every configuration's tile holds whole pairs"
    assert [e for e in ("", "norm", "swiglu", "resid", "norm_in", "norm_in_swiglu") if sm.fuses(e)] == \
        ["", "norm", "swiglu"]
    with pytest.raises(ValueError, match="one epilogue"):
        sm.launch(np, np.uint16, 0, 0, 0, 0, 0, 16, 1024, 1024, norm=(0, 0, 0, 1e-6), act=0)


def test_a_16_row_norm_or_swiglu_plan_is_fusable_only_under_the_flag() -> None:
    """Past the CUDA-core kernel's 8 rows, a GEMM and its norm or SwiGLU get a plan of their own (which may pick the
    tensor-core kernel's fused launch) only when that kernel is timed; the consumer's norm kinds never."""
    from backends.cublaslt import _fusable

    for kind in ("norm", "swiglu"):
        assert not _fusable("uint16", 16, 6144, 1024, kind), f"{kind}: no kernel fuses 16 rows without the flag"
        with flag_set("VT_SKINNY_MMA", "1"):
            assert _fusable("uint16", 16, 6144, 1024, kind), f"{kind}: the tensor-core kernel fuses 16 rows"
    with flag_set("VT_SKINNY_MMA", "1"):
        assert not _fusable("uint16", 16, 6144, 1024, "resid") and not _fusable("uint16", 17, 6144, 1024, "norm")
    assert _fusable("uint16", 8, 6144, 1024, "norm"), "non-vacuity: the CUDA-core kernel fuses 8 rows as before"


@pytest.mark.gpu
@pytest.mark.parametrize("config", sm.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("m,n,k", MMA_NORM_SHAPES)
def test_cuda_skinny_mma_with_the_norm_epilogue_equals_its_twin_on_one_scratch(m: int, n: int, k: int,
                                                                              config: sm.MmaConfig) -> None:
    """C, x += C and the next norm h from one launch, against the twin, six times on one scratch: the tile counters
    and the norm's own back at zero after each (else the next launch finds no last block and leaves x unmoved)."""
    assert_norm_kernel_equals_its_twin(sm.skinny_mma_norm, m, n, k, config, 6)


@pytest.mark.gpu
@pytest.mark.parametrize("config", sm.CONFIGS, ids=CONFIG_IDS)
@pytest.mark.parametrize("m,n,k", [*MMA_SWIGLU_SHAPES, (16, 24576, 4096)])
def test_cuda_skinny_mma_with_the_swiglu_epilogue_equals_its_twin_on_one_scratch(m: int, n: int, k: int,
                                                                                config: sm.MmaConfig) -> None:
    """act = SiLU(gate) x up from one launch, against the twin, twice on one scratch (the tile counters back at
    zero); C is the unfused path's scratch and stays unwritten. The kernel's float32 sums and the twin's (numpy's,
    in an order of the host's BLAS) differ at K = 4,096 by up to 1.5e-7 of sum |a||b| (H200, session 42), which
    moves an output near zero past a bf16 ulp: on the H100's host 16 x 24,576 x 4,096 failed three configurations
    against the ulp alone, on the H200's none. So the bound carries the plain kernel's bound on each sum through
    SiLU(gate) x up."""
    assert_swiglu_kernel_equals_its_twin(sm.skinny_mma_swiglu, m, n, k, config, sums_bound=1e-5)
