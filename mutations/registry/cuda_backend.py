"""The CUDA backend (issue 6): capture mode, CuPy's allocator routed through the pool, cuBLAS's workspace,
graphs let go inside a capture, event queries. The GPU lane runs these (needs_gpu).
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import CONF, CUDA, SEAMS, per_model

ENTRIES: list[Mutation] = [
    Mutation(
        id="cuda-relaxed-capture-mode",
        description="the CUDA backend captures in relaxed mode (CuPy's default), letting cudaMalloc through",
        file="backends/cuda.py", old="{CaptureMode.GLOBAL: rt.streamCaptureModeGlobal,",
        new="{CaptureMode.GLOBAL: rt.streamCaptureModeRelaxed,", needs_gpu=True,
        gates=(f"{CONF}::test_capture_rule[pool miss -> driver alloc-global-cuda]",
               f"{CONF}::test_capture_rule[raw driver alloc-global-cuda]",
               f"{CONF}::test_capture_rule[driver alloc on a forked side stream-global-cuda]",
               *per_model(f"{SEAMS}::test_G1_without_the_pregrow_the_capture_dies_as_on_the_gpu", "-cuda")),
    ),
    Mutation(
        id="cuda-allocator-not-routed",
        description="CuPy keeps its own allocator: its hidden temporaries bypass the pool and the profile",
        file="backends/cuda.py", old="            with stream.handle, self.cp.cuda.using_allocator(self._allocator):",
        new="            with stream.handle:",
        needs_gpu=True,
        # The step's library kernels make no CuPy temporaries any more, so the demand-profile parity test stayed green
        # under this mutant on the H200 (session 28): the hook has its own gate, a launch that makes one
        gates=(f"{CUDA}::test_a_kernels_cupy_temporary_is_a_pool_block_charged_to_it",),
    ),
    Mutation(
        id="cuda-cublas-no-preset-workspace",
        description="the cuBLAS handle keeps no workspace of ours: cuBLAS allocates one inside each capture",
        file="backends/cublas.py", old="        if ptr is not None:\n", new="        if False:\n", needs_gpu=True,
        # Measured on the H200: at B=1 (and for MoE) cuBLAS takes no workspace for tiny-qwen3's GEMMs,
        # so those G1 cases stay green; at B=3 and 8, and in the spec keys, it does.
        # test_cublas_draws_no_device_memory_of_its_own went red under this mutant in one H200 run and stayed
        # green in the next (cuBLAS's lazy eager-mode workspace): not a gate, it would make the verdict flaky.
        gates=(f"{CUDA}::test_a_captured_gemm_allocates_no_workspace",
               # float32 only: cuBLAS GemmEx in bf16 takes no workspace at these shapes (H200, CUDA 13)
               *(f"{CUDA}::test_G1_cuda_capture_allocates_nothing_after_drain[tiny-qwen3-{b}-float32]" for b in (3, 8)),
               *(f"{CUDA}::test_G8_cuda_spec_keys_capture_nothing[{m}-{q}]"
                 for m, q in (("tiny-qwen3", 5), ("tiny-qwen3-moe", 5), ("tiny-qwen3-draft", 1)))),
    ),
    Mutation(
        id="cuda-library-alloc-nodes-uncounted",
        description="allocation nodes a library puts into a capture are not counted as allocations in it",
        file="backends/cuda.py", old="            self.allocs_in_capture += max(hidden, 0)", new="            pass",
        needs_gpu=True, gates=(f"{CUDA}::test_a_captured_gemm_allocates_no_workspace",),
        expect="vt counts a library's allocation inside the capture",
    ),
    Mutation(
        id="cuda-graph-destroyed-inside-capture",
        description="a graph let go during another capture is destroyed at once, invalidating that capture",
        file="backends/cuda.py", old="        if self._captures:\n            self._graveyard.append", new="        if False:\n            self._graveyard.append",
        needs_gpu=True, gates=tuple(f"{CONF}::test_capture_rule[another graph destroyed-{m}-cuda]"
                                    for m in ("global", "thread_local")),  # relaxed lets the destroy through
    ),
    Mutation(
        id="cuda-query-not-guarded",
        description="an event query inside a capture reaches CuPy, which answers False and invalidates silently",
        file="backends/cuda.py", old="        # cudaEventQuery inside a capture invalidates it and CuPy answers False: refuse by name.\n        if self._captures:",
        new="        if False:", needs_gpu=True,
        gates=tuple(f"{CONF}::test_capture_rule[event query-{m}-cuda]" for m in ("global", "thread_local", "relaxed")),
    ),
]
