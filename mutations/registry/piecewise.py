"""Piecewise graphs and streams (issue 15): bucket pre-grow, BreakableGraph replay order and joins, the race
detector, the readback stream, bucket pins.
"""

from __future__ import annotations

from mutations.model import Kind, Mutation
from mutations.registry.gates import (
    CONF,
    ENGINE_STREAMS,
    MODELS,
    PIECE_SEAMS,
    PIECE_STEPS,
    PIECES,
    STREAM_POLICIES,
    STREAMS,
)

EVERY_BUCKET = f"{PIECES}::test_P1_every_bucket_the_largest_included_captures_nothing_after_drain[pool-lane]"

ENTRIES: list[Mutation] = [
    Mutation(
        id="piecewise-bucket-pregrow-skipped",
        description="a token bucket's segments are captured with no pre-grow before them",
        file="vt/engine/worker/graph_driver.py",
        old="        self._pregrow(bucket.demand)  # before EVERY segment's capture, unconditionally\n",
        new="        pass\n",
        gates=(*PIECE_SEAMS, EVERY_BUCKET), expect="cudaErrorStreamCaptureUnsupported",
    ),
    Mutation(
        id="piecewise-largest-bucket-pregrow-skipped",
        description="every bucket's segments are pre-grown before their capture but the largest bucket's",
        file="vt/engine/worker/graph_driver.py",
        old="        self._pregrow(bucket.demand)  # before EVERY segment's capture, unconditionally\n",
        new="        if bucket.num_tokens < self.token_ladder[-1]:\n            self._pregrow(bucket.demand)\n",
        gates=(EVERY_BUCKET,), expect="cudaErrorStreamCaptureUnsupported",
    ),
    Mutation(
        id="test-piecewise-drain-removed",
        description="the bucket seam test's drain is removed: its non-vacuity guard (allocs_in_step) must fire",
        kind=Kind.TEST_SETUP, file=PIECES,
        old="    assert h.pool.drain() > 0, \"precondition", new="    assert 1 > 0, \"precondition",
        gates=PIECE_SEAMS, expect="non-vacuity",
    ),
    Mutation(
        id="breakable-replay-order-swapped",
        description="a BreakableGraph replays each break before its segment instead of after it",
        file="vt/capture.py",
        old="            seg.replay(self.stream)\n            if i < len(self.breaks):\n                self._run_break(self.breaks[i])\n",
        new="            if i < len(self.breaks):\n                self._run_break(self.breaks[i])\n            seg.replay(self.stream)\n",
        gates=(*(f"{PIECES}::test_P4_greedy_tokens_with_graphs_equal_eager_at_every_bucket_edge[pool-lane-{b}]"
                 for b in (64, 512)),
               f"{STREAMS}::test_breakable_graph_replays_segment_break_segment_in_that_order",
               *(f"{PIECES}::test_P2_replayed_prefill_logits_equal_eager_bit_for_bit[{m}-{s}]"
                 for m in MODELS for s in PIECE_STEPS),
               *(f"{PIECES}::test_P3_bucketed_prefill_agrees_with_the_unsplit_unpadded_prefill[{s}-{m}]"
                 for m in MODELS for s in PIECE_STEPS),
               *(f"{PIECES}::test_P4_one_bucket_replays_whatever_sequences_its_step_holds[{m}]" for m in MODELS),
               *(f"{PIECES}::test_P5_a_drain_never_frees_a_live_buckets_temporaries[{m}]" for m in MODELS),
               *(f"{STREAMS}::test_a_breaks_side_work_joined_in_the_legal_window_never_races[{p}]"
                 for p in STREAM_POLICIES)),
    ),
    Mutation(
        id="breakable-join-removed",
        description="a break's side-stream work is never joined before the next segment",
        file="vt/capture.py",
        old="            self.backend.wait_event(self.stream, event)\n", new="            pass\n",
        gates=tuple(f"{STREAMS}::test_a_breaks_side_work_joined_in_the_legal_window_never_races[{p}]"
                    for p in STREAM_POLICIES), expect="no wait between",
    ),
    Mutation(
        id="breakable-sync-in-open-segment",
        description="the join moves into the open segment as a synchronize, where CUDA refuses it",
        file="vt/capture.py",
        old="nullcontext(set()) as used, scope:\n                fn()\n",
        new="nullcontext(set()) as used, scope:\n                self.backend.synchronize()\n                fn()\n",
        gates=(f"{CONF}::test_segment_rule[break on the graph's stream-cpu]",
               f"{CONF}::test_segment_rule[break forks a side stream, joined after the break (the legal window)-cpu]",
               f"{CONF}::test_segment_rule[side stream forked inside a segment, unjoined at its end-cpu]"),
    ),
    Mutation(
        id="race-detector-blind-to-one-stream",
        description="the race detector ignores the writes of the highest-numbered stream",
        file="backends/streams.py",
        old="        conflicts = [(a, other) for other, accs in h.writes.items() for a in accs]\n",
        new="        conflicts = [(a, other) for other, accs in h.writes.items() for a in accs if other != max(h.writes)]\n",
        gates=(f"{STREAMS}::test_the_detector_sees_a_writer_on_any_stream[second side stream]",
               f"{STREAMS}::test_the_detector_sees_a_writer_on_any_stream[first side stream]",
               f"{STREAMS}::test_a_host_read_of_an_unjoined_side_write_is_a_race",
               *(f"{STREAMS}::test_a_missing_wait_is_a_race_under_every_schedule_with_both_stacks[{p}]"
                 for p in ("in order", "seeded 0", "seeded 1")),
               *(f"{STREAMS}::test_a_breaks_side_work_left_unjoined_is_a_race_deterministically[{p}]"
                 for p in ("in order", "seeded 0"))),
    ),
    Mutation(
        id="readback-host-skips-the-copy-event",
        description="the host reads the pinned ids without waiting for the copy stream's event",
        file="vt/engine/worker/readback.py", old="        b.host_wait(self.done)  # the host waits for the copy only\n",
        new="",
        gates=tuple(f"{ENGINE_STREAMS}::test_the_engine_is_race_free_and_unchanged_under_every_schedule[{p}]"
                    for p in ("in order", "side streams late", "seeded 3")), expect="a host read",
    ),
    Mutation(
        id="readback-copy-before-the-step",
        description="the copy stream does not wait for the compute stream: it may copy ids the step has not written",
        file="vt/engine/worker/readback.py",
        old="        b.wait_event(self.stream, b.record_event(self.compute))  # the copy follows the step's work\n",
        new="",
        gates=tuple(f"{ENGINE_STREAMS}::test_the_engine_is_race_free_and_unchanged_under_every_schedule[{p}]"
                    for p in ("in order", "side streams late", "seeded 3")), expect="no wait between",
    ),
    Mutation(
        id="piecewise-prefill-unreachable",
        description="the runner prefills through the unsplit eager forward: no bucket is ever captured",
        file="vt/engine/worker/runner.py",
        old="        logits = self.decoder.prefill(seqs, [i for i, rid in enumerate(computed) if rid in scored], num_decode, "
            "feed)\n",
        new="        logits = __import__('models.base', fromlist=['x']).prefill_logits(self.model, seqs, self.kv, "
            "[i for i, rid in enumerate(computed) if rid in scored], num_decode)\n",
        gates=(f"{ENGINE_STREAMS}::test_prefills_replay_piecewise_graphs_in_the_engine",
               *(f"{ENGINE_STREAMS}::test_the_engine_is_race_free_and_unchanged_under_every_schedule[{p}]"
                 for p in ("in order", "side streams late", "seeded 3"))),
    ),
    Mutation(
        id="piecewise-pins-dropped",
        description="a captured bucket's segment temporaries are not pinned: a drain frees memory the graph writes",
        file="vt/engine/worker/graph_driver.py", old="            self.pool.pin(graph.used)\n", new="            pass\n",
        gates=tuple(f"{PIECES}::test_P5_a_drain_never_frees_a_live_buckets_temporaries[{m}]" for m in MODELS),
        expect="touched freed",
    ),
    Mutation(
        id="eager-prefill-metadata-freed-to-the-driver",
        description="a step above every bucket stages its block tables, token rows and tiles in driver memory and "
                    "frees them after its forward: a cudaFree a step, which waits for the whole device",
        file="models/base.py",
        old="    own = stage_prefill_meta(b, fb, meta, num_decode, pool.empty)\n    model.forward(fb, kv, logits)\n"
            "    for t in (*staged, *own):\n        pool.release(t)",
        new="    own = stage_prefill_meta(b, fb, meta, num_decode, b.empty)\n    model.forward(fb, kv, logits)\n"
            "    for t in staged:\n        pool.release(t)\n    for t in own:\n        b.free(t.buffer)",
        gates=(f"{PIECES}::test_P6_a_step_above_every_bucket_returns_nothing_to_the_driver[pool-lane]",),
        expect="driver frees in each of three eager",
    ),
]
