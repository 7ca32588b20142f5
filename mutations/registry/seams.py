"""Decode graphs and seams (issue 5): the graph driver's pre-grow, step boundary, padding rows, slot rebuilds,
pins against drain, and the bypass lane's predicate.
"""

from __future__ import annotations

from mutations.model import Kind, Mutation
from mutations.registry.gates import (
    MODELS,
    SEAM_GUARANTEES,
    SEAMS,
    SEAMS_PINS,
    SEAMS_REPLAY,
    SEAMS_WIDTH,
    TP_SEAMS,
    g1,
    g8,
    per_model,
)

ENTRIES: list[Mutation] = [
    Mutation(
        id="driver-pregrow-under-a-condition",
        description="the pre-grow sits under a condition (speculative keys only) that plain decode never meets",
        file="vt/engine/worker/graph_driver.py",
        old="        self._pregrow(slot.demand)  # before EVERY capture, unconditionally\n",
        new="        if slot.key[2]:\n            self.pool.pregrow_for_capture(slot.demand)\n",
        gates=g1(), expect="cudaErrorStreamCaptureUnsupported",
    ),
    Mutation(
        id="driver-pregrow-call-deleted",
        description="the driver opens its captures with no pre-grow at all",
        file="vt/engine/worker/graph_driver.py",
        old="        self._pregrow(slot.demand)  # before EVERY capture, unconditionally\n",
        new="",
        gates=(*g1(), *g8(), *(f"{TP_SEAMS}::test_the_decode_capture_allocates_nothing_after_drain_on_every_rank"
                               f"[{m}]" for m in MODELS)), expect="cudaErrorStreamCaptureUnsupported",
    ),
    Mutation(
        id="pool-pregrow-returns-0-in-the-engine",
        description="pregrow_for_capture returns 0 without growing: every seam capture must die",
        file="vt/pool.py", old="        grown = 0\n", new="        return 0\n        grown = 0\n",
        gates=(*g1(), *g8()), expect="operation not permitted when stream is capturing",
    ),
    Mutation(
        id="driver-no-step-boundary",
        description="the driver no longer marks the step boundary, so a slot's profile carries old peaks",
        file="vt/engine/worker/graph_driver.py", old="        _check_inputs(inp)\n        self.pool.mark_step_boundary()\n",
        new="        _check_inputs(inp)\n",
        gates=per_model(f"{SEAMS_REPLAY}::test_G5_demand_profile_is_the_decode_steps_own"),
    ),
    Mutation(
        id="driver-padding-rows-write-kv",
        description="padding rows get slot 0 instead of -1 and write another request's KV",
        file="vt/engine/worker/graph_driver.py", old="slots[:n], slots[n:] = inp.slots, -1", new="slots[:n], slots[n:] = inp.slots, 0",
        gates=per_model(f"{SEAMS_REPLAY}::test_G3_padding_rows_leave_every_other_requests_kv_untouched"),
        expect="were written",
        # the two-launch path: with the decode attention's rope variant the twin refuses the step first (a padding
        # row writes a slot a real token reads), before the gate's own comparison
        env=(("VT_ROPE_IN_ATTENTION", "0"),),
    ),
    Mutation(
        id="driver-every-step-at-the-widest-table",
        description="every step replays the graph of the widest table, not its own width bucket's: a short "
                    "context pays the longest one's attention partitions",
        file="vt/engine/worker/graph_driver.py",
        old="        self.max_width = width_bucket(max(1, blocks), self.min_width)\n",
        new="        self.max_width = self.min_width = width_bucket(max(1, blocks), self.min_width)\n",
        # the slots' staged tables grow to the widest too: the one-logits-buffer test's size bound sees it
        gates=(*per_model(f"{SEAMS_WIDTH}::test_G4_graph_is_rebuilt_not_reused_after_the_block_table_width_changes"),
               f"{SEAMS_REPLAY}::test_the_graph_slots_share_one_logits_buffer"),
    ),
    Mutation(
        id="driver-returns-failed-capture",
        description="a failed capture's garbage outputs are returned instead of re-raising",
        file="vt/engine/worker/graph_driver.py",
        old="            raise scope.error  # the capture executed nothing: its outputs are garbage",
        new="            return",
        gates=per_model(f"{SEAMS}::test_G1_without_the_pregrow_the_capture_dies_as_on_the_gpu", "-cpu"),
    ),
    Mutation(
        id="pool-drain-ignores-graph-pins",
        description="drain frees blocks a live graph uses as temporaries",
        file="vt/pool.py", old="for b in sc.free if b not in self._pins]", new="for b in sc.free]",
        gates=(*per_model(f"{SEAMS_PINS}::test_G7_drain_never_frees_a_live_graphs_temporaries"),
               *per_model(f"{SEAMS_PINS}::test_G7_retiring_one_of_two_graphs_keeps_the_pins_the_other_holds")),
    ),
    Mutation(
        id="test-seam-drain-removed",
        description="the seam test's drain is removed: the non-vacuity guard (allocs_in_step > 0) must fire",
        kind=Kind.TEST_SETUP, file=SEAMS,
        old="    freed = h.pool.drain()\n    assert freed > 0", new="    freed = 1  # drain removed\n    assert freed > 0",
        gates=g1(), expect="non-vacuity: the step did allocate",
    ),
    Mutation(
        id="bypass-predicate-false",
        description="the bypass-lane predicate says False on the bypass lane, so guarantee tests run there",
        file="seams/lanes.py", old="    return flags().pool_bypass", new="    return False",
        env=(("VT_POOL_BYPASS", "1"),), baseline_skipped=True,
        gates=(*SEAM_GUARANTEES, *per_model(f"{SEAMS_REPLAY}::test_G3_padding_rows_leave_every_other_requests_kv_untouched")),
    ),
]
