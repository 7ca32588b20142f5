"""The GEMM tuner (backends/cublaslt.py) on the GPU: an epilogue plan times each candidate with its consumer, on a
scratch copy of the residual stream; once start-up is over a new shape is not timed. Apart from the skinny GEMM's
kernel tests so their mutants run these alone."""

from __future__ import annotations

import numpy as np
import pytest

from backends.kernels import skinny_gemm as sg
from tests.backends.test_skinny_gemm import magnitude, operands
from vt.dtypes import widen_host

pytestmark = pytest.mark.gpu


def test_an_epilogue_plan_times_each_cublaslt_candidate_with_its_consumers_kernel(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A norm plan times every cuBLASLt candidate followed by add_rms_norm, once a weight of its timing chain (and
    the skinny GEMM's fused variant with none after it); the chains write a scratch copy of the residual stream, so
    the stream the caller passed moves once, by the real call after the tuning."""
    import cupy

    from backends import cublaslt
    from backends.cuda import CudaBackend

    separate = cublaslt.Norm.separate
    calls = []

    def counted(self: cublaslt.Norm, cp: object, c: object) -> None:
        calls.append(self.x.data.ptr)
        separate(self, cp, c)

    monkeypatch.setattr(cublaslt.Norm, "separate", counted)
    backend = CudaBackend()
    m, n, k = 1, 1024, 3072
    a, b = operands(m, n, k, "bfloat16", seed=9)
    c = cupy.zeros((m, n), np.float32)
    x0 = np.random.default_rng(1).standard_normal((m, n)).astype(np.float32)
    x, w, h = cupy.asarray(x0), cupy.ones(n, np.float32), cupy.zeros((m, n), np.uint16)
    assert backend.xp.gemm_add_rms_norm(cupy.asarray(a), cupy.asarray(b), c, x, w, h, 1e-6), "a norm plan serves it"
    plan = backend.blas.lt.plans[(cublaslt.CUDA_R_16BF, m, n, k, "norm")]
    cublas = [cand for cand in plan.candidates if not isinstance(cand, sg.Config)]
    chain = len(plan._timing_weights(0))
    timed = [p for p in calls if p != x.data.ptr]
    assert len(timed) == len(cublas) * (chain + 1), f"{len(timed)} norms timed for {len(cublas)} cuBLASLt candidates"
    assert len(plan.times_us) == len(plan.candidates) > len(cublas), "every candidate timed, the skinny GEMM's too"
    want_x = x0 + widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    np.testing.assert_allclose(x.get(), want_x, rtol=1e-4, atol=1e-3, err_msg="x moved once, by the real call")
    print(f"\nnorm plan 1x1024x3072: {plan.picked} picked; times {plan.times_us} us (skinny configurations last)")


@pytest.mark.parametrize("n,k", [(1024, 3072), (4096, 12288)], ids=["0.6B-down", "8B-down"])
def test_a_resid_plans_timing_chains_add_into_a_scratch_copy_of_the_residual_stream(n: int, k: int) -> None:
    """The consumer's norm's resid plan (gemm_add) times every candidate, the skinny GEMM's RESID variant too, on a
    scratch copy of x: the stream the caller passed moves once, by the real call after the tuning (a chain adding
    into it would move it once a launch). A weight that fits the L2 is timed over regions of the zeroed tuning
    scratch (a chain would add zeros: H200, session 25, the mutant survived the 0.6B case alone); the 8B's down
    projection, larger than the L2, over the caller's own weight."""
    import cupy

    from backends import cublaslt
    from backends.cuda import CudaBackend

    assert (n * k * 2 >= cublaslt.L2_BYTES) is (n == 4096), "non-vacuity: the 8B weight is past the L2 (chains read it)"
    backend = CudaBackend()
    m = 1
    a, b = operands(m, n, k, "bfloat16", seed=9)
    x0 = np.random.default_rng(1).standard_normal((m, n)).astype(np.float32)
    x = cupy.asarray(x0)
    assert backend.xp.gemm_add(cupy.asarray(a), cupy.asarray(b), cupy.zeros((m, n), np.float32), x), "a plan serves it"
    plan = backend.blas.lt.plans[(cublaslt.CUDA_R_16BF, m, n, k, "resid")]
    assert len(plan.times_us) == len(plan.candidates) > 1, "non-vacuity: every candidate timed, more than one"
    want_x = x0 + widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    np.testing.assert_allclose(x.get(), want_x, rtol=1e-4, atol=1e-3, err_msg="x moved once, by the real call")



def test_after_start_up_a_new_shape_keeps_the_heuristics_pick_untimed() -> None:
    """Once start-up is over, a shape seen for the first time (an eager step's row count) is planned without timing
    (no candidate compiled or run on a request's time) and runs cuBLASLt's first pick, with or without an epilogue;
    shapes seen before keep their timed plan."""
    import cupy

    from backends import cublaslt
    from backends.cuda import CudaBackend

    backend = CudaBackend()
    lt = backend.blas.lt

    def gemm(m: int, n: int, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a, b = operands(m, n, k, "bfloat16", seed=m)
        out = cupy.zeros((m, n), np.float32)
        backend.xp.matmul(cupy.asarray(a), cupy.asarray(b), out=out)
        return a, b, out.get()

    gemm(1, 4096, 1024)
    early = lt.plans[(cublaslt.CUDA_R_16BF, 1, 4096, 1024, "")]
    assert len(early.times_us) == len(early.candidates) > 1, "non-vacuity: during start-up a new shape is timed"
    backend.end_start_up()
    a, b, got = gemm(3, 4096, 1024)
    late = lt.plans[(cublaslt.CUDA_R_16BF, 3, 4096, 1024, "")]
    assert late.times_us == [] and late.algo is late.candidates[0], "after it: untimed, the heuristic's first pick"
    assert np.all(np.abs(got - widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64))
                  <= 1e-5 * (1 + magnitude(a, b)))
    x, w, h = cupy.zeros((3, 1024), np.float32), cupy.ones(1024, np.float32), cupy.zeros((3, 1024), np.uint16)
    a, b = operands(3, 1024, 2048, "bfloat16", seed=4)
    assert backend.xp.gemm_add_rms_norm(cupy.asarray(a), cupy.asarray(b), cupy.zeros((3, 1024), np.float32), x, w, h,
                                        1e-6)
    assert lt.plans[(cublaslt.CUDA_R_16BF, 3, 1024, 2048, "norm")].times_us == [], "an epilogue plan too"
    assert early.times_us and early.algo is not None, "the timed plan stays"
