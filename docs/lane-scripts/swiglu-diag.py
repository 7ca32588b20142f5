"""Session 42: why the tensor-core SwiGLU epilogue missed its twin by more than a bf16 ulp at 16 x 24,576 x 4,096
unsplit (session 42's first run): the plain kernel's sums against the twin's, per unit of sum |a| |b|, and the outputs
past the ulp bound with the gate and up sums behind them."""
import cupy
import numpy as np

from backends.kernels import skinny_gemm as sg
from backends.kernels import skinny_mma as sm
from backends.kernels.activation import gate_up_columns
from tests.backends.test_skinny_gemm import magnitude, operands
from vt.dtypes import widen_host

m, n, k = 16, 24576, 4096
a, b = operands(m, n, k, "bfloat16", seed=m + n)
mag = magnitude(a, b)
gate, up = gate_up_columns(n // 2, sg.PAIR_COLS)
for config in sm.CONFIGS:
    sums = np.zeros((m, n), np.float32)
    want = np.zeros((m, n // 2), np.uint16)
    sm.skinny_mma_swiglu(np, a, b, sums, want, None, None, config=config)
    c = cupy.full((m, n), np.nan, np.float32)
    partials, counters = cupy.zeros(sg.SCRATCH_FLOATS, np.float32), cupy.zeros(sg.MAX_TILES, np.uint32)
    sm.skinny_mma(cupy, cupy.asarray(a), cupy.asarray(b), c, partials, counters, config=config)
    err = np.abs(c.get() - sums) / (1 + mag)
    act = cupy.zeros((m, n // 2), np.uint16)
    sm.skinny_mma_swiglu(cupy, cupy.asarray(a), cupy.asarray(b), c, act, partials, counters, config=config)
    got, exp = widen_host(act.get()), widen_host(want)
    past = np.abs(got - exp) > 2 ** -7 * np.abs(exp) + 1e-5
    print(f"{config} split {sm.split(m, n, k, config)}: sums off by {err.max():.2e} (max) / {np.median(err):.2e} "
          f"(median) of 1 + sum|a||b|; {int(past.sum())} of {past.size} outputs past a bf16 ulp")
    for r, o in list(zip(*np.nonzero(past)))[:3]:
        print(f"   [{r},{o}] got {got[r, o]:.5g} want {exp[r, o]:.5g}; gate {sums[r, gate[o]]:.5g} "
              f"up {sums[r, up[o]]:.5g}")
