"""The CPU backend: its capture simulation and sanitizer (backends/cpu.py), and the CuPy model's pool traffic
(backends/cupy_model.py), checked against what an H200 recorded.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import CONF, CPU, MODEL, SCOPE

ENTRIES: list[Mutation] = [
    Mutation(
        id="cpu-allows-alloc-in-global-capture",
        description="the CPU backend lets a driver allocation through a global-mode capture",
        file="backends/cpu.py", old="        if self.mode is CaptureMode.GLOBAL:\n            return True",
        new="        if self.mode is CaptureMode.GLOBAL:\n            return False",
        gates=(f"{CONF}::test_capture_rule[pool miss -> driver alloc-global-cpu]",
               f"{CONF}::test_capture_rule[driver alloc on a forked side stream-global-cpu]",
               f"{CONF}::test_capture_rule[raw driver alloc-global-cpu]",
               f"{CPU}::test_global_capture_refuses_the_first_allocation_and_counts_it",
               f"{SCOPE}::test_failure_inside_is_marked_kept_and_exit_does_not_raise",
               f"{SCOPE}::test_a_driver_free_inside_a_global_capture_invalidates_it"),
        expect="cudaErrorStreamCaptureUnsupported",
    ),
    Mutation(
        id="cpu-end-capture-ignores-unjoined",
        description="end_capture returns a graph although a forked side stream was never joined",
        file="backends/cpu.py", old="        if unjoined:\n", new="        if False:\n",
        gates=(f"{CONF}::test_capture_rule[side stream forked, not joined-global-cpu]",
               f"{CONF}::test_capture_rule[side stream forked, not joined-thread_local-cpu]",
               f"{CONF}::test_capture_rule[side stream forked, not joined-relaxed-cpu]",
               f"{SCOPE}::test_failure_at_end_capture_is_marked",
               f"{CONF}::test_segment_rule[side stream forked inside a segment, unjoined at its end-cpu]",
               f"{CPU}::test_a_chain_that_stops_short_of_the_origin_is_unjoined"),
    ),
    Mutation(
        id="cpu-sanitizer-stops-poisoning",
        description="the sanitizer no longer poisons freed memory",
        file="backends/cpu.py", old="            buf.mem.fill(POISON_BYTE)", new="            pass",
        gates=(f"{CPU}::test_sanitizer_catches_use_after_free_with_both_stack_traces",),
        expect="freed memory is poisoned",
    ),
    Mutation(
        id="cpu-sanitizer-stops-checking",
        description="the sanitizer no longer checks the tensors a launch touches",
        file="backends/cpu.py", old="        if self.is_sanitizing:\n            for a in (*args, *kw.values()):",
        new="        if False:\n            for a in (*args, *kw.values()):",
        gates=(f"{CPU}::test_sanitizer_catches_use_after_free_with_both_stack_traces",
               f"{CPU}::test_sanitizer_catches_an_out_of_range_write",
               f"{CPU}::test_sanitizer_catches_use_after_free_on_replay",
               f"{CPU}::test_sanitizer_names_a_kernel_reading_a_released_pool_block_with_both_stacks",
               f"{CPU}::test_sanitizer_names_a_stale_tensor_whose_block_another_owner_holds_now"),
    ),
    Mutation(
        id="cpu-launch-executes-during-capture",
        description="a launch on a capturing stream executes instead of being recorded",
        file="backends/cpu.py", old="            stream.capture.ops.append((kernel, args, kw))",
        new="            stream.capture.ops.append((kernel, args, kw))\n            self._execute(kernel, args, kw)",
        gates=(f"{CPU}::test_captured_chain_records_without_executing_and_replays_to_the_eager_numbers",
               f"{SCOPE}::test_scope_captures_and_the_graph_replays",
               f"{SCOPE}::test_breakable_graph_replays_segments_and_breaks_in_order"),
        expect="nothing may execute during capture",
    ),
    Mutation(
        id="cpu-model-drops-temporaries",
        description="the CPU backend stops charging the arrays a kernel creates: its profile misses CuPy's temporaries",
        file="backends/cupy_model.py", old="    def _hold(self, owner: Any, key: int) -> None:\n",
        new="    def _hold(self, owner: Any, key: int) -> None:\n        return\n",
        gates=(f"{MODEL}::test_a_kernels_arrays_are_pool_blocks_for_exactly_their_life",
               f"{MODEL}::test_a_capture_charges_temporaries_so_a_missing_pregrow_is_caught_on_the_cpu",
               f"{MODEL}::test_replay_creates_nothing", f"{MODEL}::test_a_reduction_draws_its_result_and_cubs_temp_storage_from_the_pool", f"{MODEL}::test_a_kernels_recorded_traffic_is_replayed_only_at_its_own_shapes"),
    ),
    Mutation(
        id="cpu-model-forgets-cub-scratch",
        description="the CPU model leaves out CUB's temp storage for segmented reductions",
        file="backends/cupy_model.py",
        old="    def cub_temp(self) -> None:\n", new="    def cub_temp(self) -> None:\n        return\n",
        gates=(f"{MODEL}::test_a_reduction_draws_its_result_and_cubs_temp_storage_from_the_pool",),
    ),
    Mutation(
        id="cpu-model-replay-keeps-blocks",
        description="a kernel's replayed plan takes its blocks and never gives them back",
        file="backends/cupy_model.py", old="                    self.backend.pool.put(blocks[n])\n", new="",
        # The leak also starves the captures in the same file: their pre-grown blocks never come back.
        gates=(f"{MODEL}::test_a_capture_charges_temporaries_so_a_missing_pregrow_is_caught_on_the_cpu",
               f"{MODEL}::test_replay_creates_nothing"),
    ),
    Mutation(
        id="cpu-model-plan-ignores-shapes",
        description="a kernel's recorded pool traffic is replayed at any shape, not only at the signature it was made at",
        file="backends/cupy_model.py", old="            parts.append((name, v.shape, v.dtype.str, v.strides))",
        new="            parts.append((name, v.dtype.str))",
        gates=(f"{MODEL}::test_a_kernels_recorded_traffic_is_replayed_only_at_its_own_shapes",),
    ),
    Mutation(
        id="cpu-capture-skips-shadow-run",
        description="a launch in a CPU capture records without allocating what CuPy would allocate while recording",
        file="backends/cpu.py", old="            self._shadow_run(kernel, args, kw, stream.capture)\n", new="",
        gates=(f"{MODEL}::test_a_capture_charges_temporaries_so_a_missing_pregrow_is_caught_on_the_cpu",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="cpu-replay-charges-temporaries",
        description="a CPU graph replay charges temporaries to the pool, which a CUDA graph replay never does",
        file="backends/cpu.py", old="            self.backend._execute(kernel, args, kw, replay=True)  # type: ignore[attr-defined]\n",
        new="            self.backend._execute(kernel, args, kw, charged=True, replay=True)  # type: ignore[attr-defined]\n",
        gates=(f"{MODEL}::test_replay_creates_nothing",),
    ),
    Mutation(
        id="cpu-blas-threads-left-to-the-library",
        description="the CPU backend never sets BLAS threads: OpenBLAS runs one per core beside the server's",
        file="backends/cpu.py", old="        limit_blas_threads()\n", new="",
        gates=("tests/vt/test_env.py::test_the_cpu_backend_sets_blas_threads_as_the_flag_says",),
    ),
]
