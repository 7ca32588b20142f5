"""The GEMM tuner's timing chain (backends/cublaslt.py): a decode-sized GEMM is timed over weights no launch finds in
the L2 cache, as no layer of a step finds its own; timed on a weight the L2 still holds, a candidate that wins
there loses inside the step (measured on the H200, docs/gpu-lane-h200-2026-12-02-session10.md)."""

from __future__ import annotations

import pytest

from backends import cublaslt
from backends.cublaslt import CUDA_R_16BF, CUDA_R_32F, L2_BYTES, L2_FLUSH_BYTES, Plan

SCRATCH = 1 << 40  # a device address, 256-byte aligned


def plan(m: int, n: int, k: int, dtype: int = CUDA_R_16BF) -> Plan:
    p = object.__new__(Plan)  # the chain is arithmetic on the shape: no cuBLASLt needed
    p.m, p.n, p.k, p.dtype = m, n, k, dtype

    class Lt:
        scratch = staticmethod(lambda: SCRATCH)

    p.lt = Lt()  # type: ignore[assignment]
    return p


DECODE = [(1, 4096, 1024), (1, 1024, 2048), (8, 6144, 1024), (1, 1024, 3072), (1, 2048, 6144), (4, 1000, 96),
          (1, 128, 2048), (2, 3000, 1000, CUDA_R_32F), (1, 4096, 4096)]


@pytest.mark.parametrize("shape", DECODE, ids=lambda s: "x".join(map(str, s)))
def test_a_decode_gemm_is_timed_over_weights_the_l2_does_not_hold(shape: tuple) -> None:
    p = plan(*shape)
    size = p.n * p.k * cublaslt.ITEM_BYTES[p.dtype]
    weights = p._timing_weights(b_ptr=7 << 20)
    assert len(weights) >= cublaslt.CHAIN
    tail = SCRATCH + L2_FLUSH_BYTES - cublaslt.EPILOGUE_BYTES  # where a timed epilogue writes its outputs
    assert all(w % 256 == 0 and SCRATCH <= w and w + size <= tail for w in weights), \
        "every launch reads an aligned region inside the scratch, clear of the epilogues' tail"
    regions = sorted(set(weights))
    assert all(b - a >= size for a, b in zip(regions, regions[1:])), "regions overlap"
    for i, w in enumerate(weights):  # between two reads of one region, more than the L2 of other weights
        later = [j for j in range(i + 1, len(weights)) if weights[j] == w]
        if later:
            assert (later[0] - i - 1) * size > L2_BYTES, f"launch {later[0]} finds launch {i}'s weights in L2"
    assert len(regions) * size > L2_BYTES or len(regions) == cublaslt.MAX_CHAIN, "one timed replay fits the L2"


@pytest.mark.parametrize("shape", [(1, 151936, 1024), (1024, 4096, 1024), (2048, 6144, 1024)],
                         ids=["lm-head", "prefill-1024", "prefill-2048"])
def test_a_weight_past_the_l2_or_a_prefill_gemm_is_timed_on_its_own_weight(shape: tuple) -> None:
    weights = plan(*shape)._timing_weights(b_ptr=7 << 20)
    assert weights == [7 << 20] * cublaslt.CHAIN
