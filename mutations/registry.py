"""The reviewed list of named mutations. One entry per gate at least; each names the tests that
must go red. Anchors are exact text and must match `count` places, or the verdict is NotApplied.
"""

from __future__ import annotations

from mutations.model import Kind, Mutation

POOL = "tests/vt/test_pool.py"
CPU = "tests/backends/test_cpu_backend.py"
CONF = "tests/vt/test_conformance.py"
SCOPE = "tests/vt/test_capture_scope.py"

ENTRIES: list[Mutation] = [
    # ---- DevicePool -------------------------------------------------------------------------
    Mutation(
        id="pool-pregrow-returns-0",
        description="pregrow_for_capture returns 0 without growing anything",
        file="vt/pool.py", old="        grown = 0\n", new="        return 0\n        grown = 0\n",
        gates=(f"{POOL}::test_pregrow_makes_the_profiled_gets_hits_and_is_idempotent", f"{POOL}::TestPoolMachine"),
    ),
    Mutation(
        id="pool-put-demotes-loan",
        description="put returns a borrowed block to the requester's class instead of its own",
        file="vt/pool.py",
        old="                blk.home.free.append(blk)", new="                requester.free.append(blk)",
        gates=(f"{POOL}::test_put_returns_a_borrowed_block_to_its_own_class_and_decrements_the_requester",
               f"{POOL}::TestPoolMachine"),
    ),
    Mutation(
        id="pool-bypass-flag-reread",
        description="the pool re-reads VT_POOL_BYPASS on every get instead of once per process",
        file="vt/pool.py", old="            if self.is_bypass:\n                blk = Block(",
        new="            if __import__('os').environ.get('VT_POOL_BYPASS') == '1':\n                blk = Block(",
        gates=("tests/vt/test_env.py::test_pool_lane_does_not_change_when_the_environment_does",),
    ),
    Mutation(
        id="pool-drain-frees-live",
        description="drain frees every pooled block, live ones included",
        file="vt/pool.py", old="doomed = [b for sc in self._classes.values() for b in sc.free]",
        new="doomed = list(self._owned)",
        gates=(f"{POOL}::test_drain_frees_only_free_blocks", f"{POOL}::TestPoolMachine"),
    ),
    Mutation(
        id="test-pool-pregrow-nothing-to-drain",
        description="the pregrow test forgets to put its blocks back, so its drain frees nothing",
        kind=Kind.TEST_SETUP, file=POOL,
        old="    for b in blocks:\n        pool.put(b)\n    demand = pool.step_demand_profile()\n",
        new="    demand = pool.step_demand_profile()\n",
        gates=(f"{POOL}::test_pregrow_makes_the_profiled_gets_hits_and_is_idempotent",),
        expect="freed > 0",
    ),
    # ---- CPU backend: capture simulation and sanitizer --------------------------------------
    Mutation(
        id="cpu-allows-alloc-in-global-capture",
        description="the CPU backend lets a driver allocation through a global-mode capture",
        file="backends/cpu.py", old="        if self.mode is CaptureMode.GLOBAL:\n            return True",
        new="        if self.mode is CaptureMode.GLOBAL:\n            return False",
        gates=(f"{CONF}::test_capture_rule[pool miss -> driver alloc-global-cpu]",
               f"{CONF}::test_capture_rule[raw driver alloc-global-cpu]",
               f"{CPU}::test_global_capture_refuses_the_first_allocation_and_counts_it",
               f"{SCOPE}::test_failure_inside_is_marked_kept_and_exit_does_not_raise"),
        expect="cudaErrorStreamCaptureUnsupported",
    ),
    Mutation(
        id="cpu-end-capture-ignores-unjoined",
        description="end_capture returns a graph although a forked side stream was never joined",
        file="backends/cpu.py", old="        if unjoined:\n", new="        if False:\n",
        gates=(f"{CONF}::test_capture_rule[side stream forked, not joined-global-cpu]",
               f"{CONF}::test_capture_rule[side stream forked, not joined-thread_local-cpu]",
               f"{CONF}::test_capture_rule[side stream forked, not joined-relaxed-cpu]",
               f"{SCOPE}::test_failure_at_end_capture_is_marked"),
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
               f"{CPU}::test_sanitizer_catches_use_after_free_on_replay"),
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
    # ---- capture scope ----------------------------------------------------------------------
    Mutation(
        id="scope-raises-from-exit",
        description="GraphCaptureScope's exit re-raises the failure instead of marking it",
        file="vt/capture.py",
        old="        return ev is None or isinstance(ev, Exception)", new="        return ev is None",
        gates=(f"{SCOPE}::test_failure_inside_is_marked_kept_and_exit_does_not_raise",),
    ),
    Mutation(
        id="scope-allows-nesting",
        description="GraphCaptureScope no longer refuses a second open scope on the thread",
        file="vt/capture.py", old="        if getattr(_open_scopes, \"scope\", None) is not None:",
        new="        if False:",
        gates=(f"{SCOPE}::test_second_scope_on_the_same_thread_is_refused",),
    ),
]
