"""The skinny GEMM's cluster configurations (skinny_gemm_cluster, VT_SKINNY_CLUSTER=1): a column tile's K in
CLUSTER slices, one thread-block cluster, whose first block adds the slices' tiles in slice order through
distributed shared memory. The same twin as the split configurations; (GPU lane) the kernel against it, plain and
with each epilogue, and as candidates of a decode shape's plan under the flag."""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path

import numpy as np
import pytest

import vt.env
from backends.kernels import skinny_gemm as sg
from tests.backends.test_skinny_gemm import (
    NORM_SHAPES,
    SHAPES,
    SWIGLU_SHAPES,
    assert_norm_outputs,
    assert_twice_equals_twin,
    magnitude,
    norm_case,
    operands,
)
from vt.dtypes import widen_host

CLUSTER_IDS = [f"tc{c.tc}u{c.unroll}" for c in sg.CLUSTER_CONFIGS]
SHORT_K = (1, 64, 10)  # K shorter than two rows a slice: the cluster's last three slices are empty
# each epilogue's shapes, and a short K with empty slices
CLUSTER_SWIGLU_SHAPES, CLUSTER_NORM_SHAPES = [*SWIGLU_SHAPES, (1, 256, 10)], [*NORM_SHAPES, (1, 256, 10)]


def test_the_cluster_is_as_many_slices_as_the_kernel_declares() -> None:
    cu = (Path(sg.__file__).parent / "skinny_gemm.cu").read_text()
    assert f"constexpr int SKINNY_CLUSTER = {sg.CLUSTER};" in cu, "the host's slice count is the kernel's cluster"
    assert "__cluster_dims__(1, SKINNY_CLUSTER, 1)" in cu, "non-vacuity: the kernel declares its cluster by it"


@pytest.mark.parametrize("config", sg.CLUSTER_CONFIGS, ids=CLUSTER_IDS)
@pytest.mark.parametrize("m,n,k", [*SHAPES, SHORT_K])
def test_a_cluster_configuration_covers_k_in_the_clusters_slices(m: int, n: int, k: int, config: sg.Config) -> None:
    step, s = sg.split(m, n, k, config)
    covered = [r for i in range(s) for r in range(i * step, min(k, (i + 1) * step))]
    assert s == sg.CLUSTER, "one slice a block of the cluster"
    assert covered == list(range(k)), "every row of K in exactly one slice"


@pytest.mark.parametrize("config", sg.CLUSTER_CONFIGS, ids=CLUSTER_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [*SHAPES, SHORT_K])
def test_the_twin_of_a_cluster_configuration_equals_the_product(m: int, n: int, k: int, dtype: str,
                                                                config: sg.Config) -> None:
    a, b = operands(m, n, k, dtype)
    out = np.zeros((m, n), np.float32)
    sg.skinny_gemm(np, a, b, out, None, None, config=config)
    want = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    assert np.all(np.abs(out - want) <= 1e-5 * (1 + magnitude(a, b))), "C = A @ B, float32 accumulation"


def test_the_tuner_times_the_cluster_configurations_only_under_the_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    assert vt.env.Flags.from_environ().skinny_cluster is (os.environ.get("VT_SKINNY_CLUSTER") == "1"), "off by default"
    for on in (False, True):  # whatever this process's environment says
        monkeypatch.setattr(vt.env, "flags", lambda on=on: dataclasses.replace(vt.env.Flags.from_environ(),
                                                                              skinny_cluster=on))
        assert sg.configs() == (sg.CONFIGS + sg.CLUSTER_CONFIGS if on else sg.CONFIGS)
    assert all(c.cluster for c in sg.CLUSTER_CONFIGS) and not any(c.cluster for c in sg.CONFIGS), "non-vacuity"


# ---- the kernel against its twin (GPU lane) -----------------------------------------------------------------------
def scratch():  # type: ignore[no-untyped-def]
    """The split configurations' scratch, NaN partials and zero counters: a cluster launch touches neither."""
    import cupy

    return cupy.full(sg.SCRATCH_FLOATS, np.nan, np.float32), cupy.zeros(sg.MAX_TILES, np.uint32)


def assert_scratch_untouched(partials, counters, what: str) -> None:  # type: ignore[no-untyped-def]
    import cupy

    assert bool(cupy.isnan(partials[: 1 << 16]).all()), f"{what}: the partials' scratch written"
    assert int(counters.sum()) == 0, f"{what}: a counter raised"


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CLUSTER_CONFIGS, ids=CLUSTER_IDS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
@pytest.mark.parametrize("m,n,k", [*SHAPES, SHORT_K])
def test_cuda_cluster_skinny_gemm_equals_its_twin(m: int, n: int, k: int, dtype: str, config: sg.Config) -> None:
    assert_twice_equals_twin(m, n, k, dtype, config, *scratch(), assert_scratch_untouched)


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CLUSTER_CONFIGS, ids=CLUSTER_IDS)
@pytest.mark.parametrize("m,n,k", CLUSTER_SWIGLU_SHAPES)
def test_cuda_cluster_skinny_gemm_with_the_swiglu_epilogue_equals_its_twin(m: int, n: int, k: int,
                                                                           config: sg.Config) -> None:
    import cupy

    a, b = operands(m, n, k, "bfloat16", seed=m + n)
    want = np.zeros((m, n // 2), np.uint16)
    sg.skinny_gemm_swiglu(np, a, b, np.zeros((m, n), np.float32), want, None, None, config=config)
    partials, counters = scratch()
    exp = widen_host(want)
    c, act = cupy.full((m, n), np.nan, np.float32), cupy.zeros((m, n // 2), np.uint16)
    sg.skinny_gemm_swiglu(cupy, cupy.asarray(a), cupy.asarray(b), c, act, partials, counters, config=config)
    past = np.abs(widen_host(act.get()) - exp) > 2 ** -7 * np.abs(exp) + 1e-5
    assert not past.any(), f"{int(past.sum())} of {past.size} outputs past a bf16 ulp"
    assert bool(cupy.isnan(c).all()), "C left unwritten"
    assert_scratch_untouched(partials, counters, "swiglu")
    assert np.abs(exp).max() > 0.05, "non-vacuity: outputs far from zero"


@pytest.mark.gpu
@pytest.mark.parametrize("config", sg.CLUSTER_CONFIGS, ids=CLUSTER_IDS)
@pytest.mark.parametrize("m,n,k", CLUSTER_NORM_SHAPES)
def test_cuda_cluster_skinny_gemm_with_the_norm_epilogue_equals_its_twin(m: int, n: int, k: int,
                                                                         config: sg.Config) -> None:
    """C, x += C and the next norm h, three times on one scratch: the norm's counter (the scratch's last) is back
    at zero after each, and no other counter moved."""
    import cupy

    a, b, x0, w, want = norm_case(m, n, k, config)
    partials, counters = scratch()
    for run in range(3):
        c, x, h = cupy.full((m, n), np.nan, np.float32), cupy.asarray(x0), cupy.zeros((m, n), np.uint16)
        sg.skinny_gemm_norm(cupy, cupy.asarray(a), cupy.asarray(b), c, partials, counters, x, cupy.asarray(w), h,
                            eps=1e-6, config=config)
        assert_norm_outputs(c.get(), x.get(), h.get(), want, a, b, run)
        assert_scratch_untouched(partials, counters, f"run {run}")
    assert np.abs(want[1] - x0).max() > 0.1, "non-vacuity: the add moved the residual"


@pytest.mark.gpu
def test_under_the_flag_a_decode_plan_times_the_cluster_configurations_and_each_is_right(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import cupy

    from backends import cublaslt
    from backends.cuda import CudaBackend

    monkeypatch.setattr(vt.env, "flags", lambda: dataclasses.replace(vt.env.Flags.from_environ(), skinny_cluster=True))
    backend = CudaBackend()
    a, b = operands(1, 1024, 2048, "bfloat16", seed=7)
    da, db = cupy.asarray(a), cupy.asarray(b)
    out = cupy.zeros((1, 1024), np.float32)
    backend.xp.matmul(da, db, out=out)
    plan = next(p for p in backend.blas.lt.plans.values() if (p.m, p.n, p.k) == (1, 1024, 2048))
    assert all(c in plan.candidates for c in sg.CLUSTER_CONFIGS), "the cluster configurations are candidates"
    assert len(plan.times_us) == len(plan.candidates), "every candidate timed, the cluster configurations too"
    want = widen_host(a).astype(np.float64) @ widen_host(b).astype(np.float64)
    stream = cupy.cuda.get_current_stream()
    for cand in plan.candidates:
        out.fill(np.nan)
        plan.run(da.data.ptr, db.data.ptr, out.data.ptr, stream.ptr, cand)
        assert np.all(np.abs(out.get() - want) <= 1e-5 * (1 + magnitude(a, b))), f"{cublaslt.name(cand)}"
    print(f"\n1x1024x2048 bf16 under VT_SKINNY_CLUSTER=1: {plan.picked} picked; times {plan.times_us} us")
