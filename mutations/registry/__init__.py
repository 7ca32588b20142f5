"""The reviewed list of named mutations. One entry per gate at least; each names the tests that
must go red. Anchors are exact text and must match `count` places, or the verdict is NotApplied.

One module per area holds that area's entries as its `ENTRIES` list; `gates.py` holds the test ids they
share (gate files, model names, helpers such as g1() and per_model()). ENTRIES here concatenates the areas
in a fixed order, the order `python -m mutations list` and the reports show.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry import (
    async_scheduling,
    capture,
    checkpoints,
    chunked_prefill,
    cpu_backend,
    cuda_backend,
    engine,
    engine_core,
    failures,
    gemm_plans,
    guarantees,
    house,
    kernels,
    moe,
    mutation_suite,
    no_hangs,
    offline_api,
    openai_compat,
    parallel_samples,
    piecewise,
    pool,
    prefix_cache,
    sanitizer,
    scheduler,
    seams,
    seeds,
    server,
    serving,
    spec,
    startup_capture,
    tensor_parallel,
)

AREAS = (
    pool,
    cpu_backend,
    capture,
    engine,
    seams,
    failures,
    cuda_backend,
    spec,
    checkpoints,
    guarantees,
    mutation_suite,
    no_hangs,
    scheduler,
    seeds,
    chunked_prefill,
    server,
    parallel_samples,
    sanitizer,
    offline_api,
    engine_core,
    piecewise,
    tensor_parallel,
    house,
    kernels,
    moe,
    prefix_cache,
    openai_compat,
    startup_capture,
    async_scheduling,
    serving,
    gemm_plans,
)

ENTRIES: list[Mutation] = [m for area in AREAS for m in area.ENTRIES]
