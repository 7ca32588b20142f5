"""The reviewed list of named mutations. One entry per gate at least; each names the tests that
must go red. Anchors are exact text and must match `count` places, or the verdict is NotApplied.
"""

from __future__ import annotations

from mutations.model import Kind, Mutation

POOL = "tests/vt/test_pool.py"
CPU = "tests/backends/test_cpu_backend.py"
CONF = "tests/vt/test_conformance.py"
SCOPE = "tests/vt/test_capture_scope.py"
SEAMS = "tests/seams/test_decode_seams.py"
ORACLE = "tests/models/test_oracle.py"
CAP = "tests/engine/test_capacity.py"
GEN = "tests/engine/test_generation.py"
BATCH = "tests/engine/test_input_batch.py"
CUDA = "tests/backends/test_cuda_backend.py"
MODEL = "tests/backends/test_cupy_model.py"
SPEC = "tests/engine/test_spec_decode.py"
MODELS = ("tiny-qwen3", "tiny-qwen3-moe")
ARCH = "tests/models/test_architectures.py"
ARCH_ERR = "tests/models/test_checkpoint_errors.py"
ARCH_NAMES = ("qwen3-yarn", "qwen3-moe", "qwen2", "llama3")
DTYPES = "tests/vt/test_dtypes.py"


def FILC(test: str, *ids: str) -> tuple[str, ...]:
    return tuple(f"{FIL}::{test}[{i}]" for i in ids)


def bf16_vs_hf(*archs: str) -> tuple[str, ...]:
    return tuple(f"{ARCH}::test_dtype_bfloat16_computes_as_transformers_bf16_does[{a}]" for a in archs)
GUAR = "tests/engine/test_guarantees.py"
CLI = "tests/vt/test_cli.py"
API = "tests/engine/test_offline_api.py"
DETOK = "tests/engine/test_detokenizer.py"
PEN = "tests/engine/test_penalties.py"
FIL = "tests/engine/test_filters.py"
PAR = "tests/engine/test_parallel_samples.py"
SEEDS = "tests/engine/test_seeds.py"
RULE = "tests/server/test_server_rule.py"
CHUNK = "tests/engine/test_chunked_prefill.py"
OAI = "tests/server/test_openai_server.py"
SPEC_LOSSLESS = (*(f"tests/engine/test_spec_decode.py::test_G1_greedy_with_speculation_equals_greedy_without[{c}]"
                   for c in (1, 2, 4, 8)),
                 "tests/engine/test_ngram.py::test_ngram_greedy_with_speculation_equals_greedy_without")


def g1() -> tuple[str, ...]:
    """The G1 seam cases (zero allocations in capture)."""
    return tuple(f"{SEAMS}::test_G1_capture_allocates_nothing_after_drain[{m}-B{b}]"
                 for m in MODELS for b in (1, 3, 8, 13))


def g8() -> tuple[str, ...]:
    """The speculative seam cases (target verify q=5 and draft q=1 keys)."""
    return tuple(f"{SEAMS}::test_G8_spec_keys_capture_nothing[{m}-q{q}-B{b}]"
                 for m in (*MODELS, "tiny-qwen3-draft") for q in (1, 5) for b in (1, 3, 8))


def h200_traces() -> tuple[str, ...]:
    """The CPU-lane replays of the pool traffic an H200 recorded (one per fixture)."""
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "tests" / "backends" / "data"
    return tuple(f"{MODEL}::test_the_cpu_step_makes_the_pool_traffic_an_h200_recorded[{p.stem}]"
                 for p in sorted(data.glob("cupy-trace-*.json")))


def per_model(test: str, suffix: str = "") -> tuple[str, ...]:
    return tuple(f"{test}[{m}{suffix}]" for m in MODELS)

# Every seam case whose guarantee is false by design on the bypass lane (skipped there).
SEAM_GUARANTEES = (
    *g1(),
    *per_model(f"{SEAMS}::test_G1_without_the_pregrow_the_capture_dies_as_on_the_gpu", "-cpu"),
    *per_model(f"{SEAMS}::test_G2_replayed_logits_equal_eager_logits_bit_for_bit"),
    *per_model(f"{SEAMS}::test_G4_graph_is_rebuilt_not_reused_after_the_block_table_width_changes"),
    *per_model(f"{SEAMS}::test_G6_engine_tokens_identical_with_graphs_on_and_off"),
    *per_model(f"{SEAMS}::test_G7_drain_never_frees_a_live_graphs_temporaries"),
    *per_model(f"{SEAMS}::test_G7_retiring_one_of_two_graphs_keeps_the_pins_the_other_holds"),
    f"{SEAMS}::test_G6_vt_generate_identical_under_VT_CUDAGRAPH_0[pool-lane]",
    *g8(),
)

SPEC_ROW_MOVE_GATES = (
    f"{SPEC}::test_G2_keeper_keeps_proposing_after_the_leaver_finishes_and_the_batch_condenses",
    f"{SPEC}::test_G2_keeper_keeps_proposing_when_the_decode_first_reorder_swaps_rows",
)
# Without proposals the draft never advances, so the position invariant fires in every spec test.
SPEC_PROPOSAL_GATES = tuple(f"{SPEC}::{t}" for t in (
    "test_G1_greedy_with_speculation_equals_greedy_without",
    "test_full_acceptance_with_the_target_as_its_own_draft",
    "test_almost_no_acceptance_with_a_shuffled_draft",
    "test_builtin_draft_accepts_a_meaningful_share",
    "test_a_request_finishing_inside_an_accepted_run",
    "test_speculative_sampling_keeps_requests_reproducible_and_alive",
    "test_G2_keeper_keeps_proposing_after_the_leaver_finishes_and_the_batch_condenses",
    "test_G2_keeper_keeps_proposing_when_the_decode_first_reorder_swaps_rows",
    "test_G3_keepers_proposals_match_a_solo_run",
    "test_G3_the_draft_is_sensitive_to_its_context",
    "test_G4_a_broken_position_invariant_raises",
    "test_G5_draft_entries_never_outnumber_live_requests_after_a_step",
    "test_G5_preempted_and_resumed_requests_are_disabled_not_crashed",
    "test_ladder_reports_the_acceptance_rate",
    "test_G6_speculative_sampling_draws_from_the_target_distribution",
))

STREAMS = "tests/backends/test_stream_order.py"
ENGINE_STREAMS = "tests/engine/test_engine_streams.py"
TP = "tests/engine/test_tensor_parallel.py"
TP_SEAMS = "tests/seams/test_tp_seams.py"
TP_SERVE = "tests/server/test_tp_serve.py"
TP_MODELS = ("tiny-qwen3", "tiny-qwen3-moe", "qwen2", "llama3", "qwen2-mqa")
TP_EQUALITY = (*(f"{TP}::test_tp2_generates_the_tokens_tp1_does[{n}]" for n in TP_MODELS),
               f"{TP}::test_tp4_replicates_the_kv_heads_and_generates_the_tokens_tp1_does")
PIECES = "tests/seams/test_piecewise_seams.py"
PIECE_STEPS = ("one-5", "two-40", "chunk-at-32")
PIECE_SEAMS = tuple(f"{PIECES}::test_P1_a_buckets_capture_allocates_nothing_after_drain[{m}-{s}]"
                    for m in MODELS for s in PIECE_STEPS)
STREAM_POLICIES = ("in order", "side streams late", "seeded 0", "seeded 1")

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
        file="vt/pool.py", old="doomed = [b for sc in self._classes.values() for b in sc.free if b not in self._pins]",
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
               f"{CONF}::test_capture_rule[driver alloc on a forked side stream-global-cpu]",
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
               f"{MODEL}::test_replay_creates_nothing", *h200_traces()),
    ),
    Mutation(
        id="cpu-model-forgets-cub-scratch",
        description="the CPU model leaves out CUB's temp storage for segmented reductions",
        file="backends/cupy_model.py",
        old="    def cub_temp(self) -> None:\n", new="    def cub_temp(self) -> None:\n        return\n",
        gates=h200_traces(), expect="cpu vs h200",
    ),
    Mutation(
        id="cpu-model-replay-keeps-blocks",
        description="a kernel's replayed plan takes its blocks and never gives them back",
        file="backends/cupy_model.py", old="                    self.backend.pool.put(blocks[n])\n", new="",
        # The leak also starves the captures in the same file: their pre-grown blocks never come back.
        gates=(*h200_traces(), f"{MODEL}::test_a_capture_charges_temporaries_so_a_missing_pregrow_is_caught_on_the_cpu",
               f"{MODEL}::test_replay_creates_nothing"),
    ),
    Mutation(
        id="cpu-model-plan-ignores-shapes",
        description="a kernel's recorded pool traffic is replayed at any shape, not only at the signature it was made at",
        file="backends/cupy_model.py", old="            parts.append((name, v.shape, v.dtype.str, v.strides))",
        new="            parts.append((name, v.dtype.str))",
        gates=h200_traces(), expect="cpu vs h200",
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

    # ---- engine (issue 4) -------------------------------------------------------------------
    Mutation(
        id="scheduler-preempts-oldest",
        description="under KV pressure the scheduler preempts the oldest running request, not the newest",
        file="vt/engine/scheduler.py", old="                victim = self.running[-1]", new="                victim = self.running[0]",
        gates=(f"{CAP}::test_preemption_takes_the_newest_running_request_first",
               f"{CAP}::test_a_step_that_preempted_admits_nothing",
               "tests/engine/test_scheduler_machine.py::TestSchedulerMachine"),
    ),
    Mutation(
        id="batch-moves-rows-without-block-table",
        description="swap_states moves every per-row field except the block table",
        file="vt/engine/input_batch.py", old='"num_tokens", "block_table", "num_blocks"', new='"num_tokens", "num_blocks"',
        gates=(f"{BATCH}::TestInputBatchMachine",), expect="block table moved apart",
    ),
    Mutation(
        id="batch-remove-keeps-stale-block-table",
        description="a finished request's row keeps its block table (a stale row trusted to stay hidden)",
        file="vt/engine/input_batch.py", old="        self.block_table[row] = self.trash_block\n        self._trim()",
        new="        self._trim()",
        gates=(f"{BATCH}::TestInputBatchMachine",), expect="stale block table",
    ),
    Mutation(
        id="capacity-check-removed",
        description="start-up no longer refuses a max_model_len that cannot fit in the KV blocks",
        file="vt/engine/config.py", old="        if needed > self.num_blocks:", new="        if False:",
        gates=(f"{CAP}::test_startup_refuses_a_max_model_len_that_cannot_fit",
               f"{CAP}::test_startup_counts_the_drafts_kv_with_the_targets"),
    ),
    Mutation(
        id="precedence-checkpoint-beats-explicit",
        description="generation_config.json overrides what the user set explicitly",
        file="vt/engine/sampling.py",
        old="picked[name] = explicit if explicit is not None else gen.get(name, neutral)",
        new="picked[name] = gen.get(name, explicit if explicit is not None else neutral)",
        gates=(f"{GEN}::test_explicit_beats_checkpoint", f"{GEN}::test_temperature_zero_is_greedy_and_clears_the_filters",
               *per_model(f"{GEN}::test_greedy_is_deterministic"), *per_model(f"{GEN}::test_greedy_is_batch_invariant"),
               f"{GEN}::test_max_tokens_and_eos_finish_reasons"),
    ),
    Mutation(
        id="greedy-keeps-filters",
        description="temperature 0 no longer clears top_k/top_p/min_p",
        file="vt/engine/sampling.py", old="            picked.update(top_p=1.0, top_k=0, min_p=0.0)", new="            pass",
        gates=(f"{GEN}::test_temperature_zero_is_greedy_and_clears_the_filters",),
    ),
    Mutation(
        id="sampler-seed-not-the-requests",
        description="every request samples with the engine's seed instead of its own",
        file="vt/engine/llm.py", old="        seed = resolved.seed if resolved.seed is not None else int(self._rng.integers(1 << 62))\n",
        new="        seed = self.cfg.seed\n",
        gates=per_model(f"{GEN}::test_seeded_sampling_is_reproducible_and_batch_invariant"),
    ),
    Mutation(
        id="never-fit-request-crashes",
        description="a prompt longer than max_model_len is queued instead of failed",
        file="vt/engine/llm.py", old="        if len(ids) >= self.cfg.max_model_len:", new="        if False:",
        gates=(f"{CAP}::test_a_request_that_can_never_fit_gets_an_error_and_the_rest_finish",),
    ),
    Mutation(
        id="rope-rotates-the-wrong-way",
        description="rotate_half with the sign on the wrong half",
        file="models/rope.py", old="np.concatenate([cos, cos, -sin, sin], axis=-1)",
        new="np.concatenate([cos, cos, sin, -sin], axis=-1)",
        gates=tuple(f"{ORACLE}::test_logits_match_hf_for_prefill_and_decode[{m}-{p}]"
                    for m in MODELS for p in ("eager", "graph")),
    ),
    Mutation(
        id="moe-ignores-norm-topk-prob",
        description="the MoE router skips renormalising the top-k probabilities",
        file="models/kernels.py", old="    if norm_topk_prob:", new="    if False:",
        gates=tuple(f"{ORACLE}::test_logits_match_hf_for_prefill_and_decode[tiny-qwen3-moe-{p}]"
                    for p in ("eager", "graph")),
    ),
    Mutation(
        id="recompute-drops-generated-tokens",
        description="a preempted request is recomputed from its prompt only, losing its generated tokens' KV",
        file="vt/engine/scheduler.py", old="NewRequestData(req.id, req.all_ids, len(req.prompt_ids), blocks,",
        new="NewRequestData(req.id, req.prompt_ids, len(req.prompt_ids), blocks,",
        gates=per_model(f"{CAP}::test_preemption_under_a_tiny_pool_finishes_everything_with_unconstrained_tokens"),
    ),

    # ---- decode graphs and seams (issue 5) --------------------------------------------------
    Mutation(
        id="driver-pregrow-under-a-condition",
        description="the pre-grow sits under a condition (speculative keys only) that plain decode never meets",
        file="vt/engine/graph_driver.py",
        old="        self._pregrow(slot.demand)  # before EVERY capture, unconditionally\n",
        new="        if slot.key[2]:\n            self.pool.pregrow_for_capture(slot.demand)\n",
        gates=g1(), expect="cudaErrorStreamCaptureUnsupported",
    ),
    Mutation(
        id="driver-pregrow-call-deleted",
        description="the driver opens its captures with no pre-grow at all",
        file="vt/engine/graph_driver.py",
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
        file="vt/engine/graph_driver.py", old="        _check_inputs(inp)\n        self.pool.mark_step_boundary()\n",
        new="        _check_inputs(inp)\n",
        gates=per_model(f"{SEAMS}::test_G5_demand_profile_is_the_decode_steps_own"),
    ),
    Mutation(
        id="driver-padding-rows-write-kv",
        description="padding rows get slot 0 instead of -1 and write another request's KV",
        file="vt/engine/graph_driver.py", old="slots[:n], slots[n:] = inp.slots, -1", new="slots[:n], slots[n:] = inp.slots, 0",
        gates=per_model(f"{SEAMS}::test_G3_padding_rows_leave_every_other_requests_kv_untouched"),
        expect="were written",
    ),
    Mutation(
        id="driver-reuses-graph-after-width-change",
        description="a slot keeps its graph after the block-table width changes",
        file="vt/engine/graph_driver.py", old="        if slot is not None and slot.width != width:", new="        if False:",
        gates=(*per_model(f"{SEAMS}::test_G4_graph_is_rebuilt_not_reused_after_the_block_table_width_changes"),
               *per_model(f"{SEAMS}::test_G6_engine_tokens_identical_with_graphs_on_and_off")),
    ),
    Mutation(
        id="driver-returns-failed-capture",
        description="a failed capture's garbage outputs are returned instead of re-raising",
        file="vt/engine/graph_driver.py",
        old="            raise scope.error  # the capture executed nothing: its outputs are garbage",
        new="            return",
        gates=per_model(f"{SEAMS}::test_G1_without_the_pregrow_the_capture_dies_as_on_the_gpu", "-cpu"),
    ),
    Mutation(
        id="pool-drain-ignores-graph-pins",
        description="drain frees blocks a live graph uses as temporaries",
        file="vt/pool.py", old="for b in sc.free if b not in self._pins]", new="for b in sc.free]",
        gates=(*per_model(f"{SEAMS}::test_G7_drain_never_frees_a_live_graphs_temporaries"),
               *per_model(f"{SEAMS}::test_G7_retiring_one_of_two_graphs_keeps_the_pins_the_other_holds")),
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
        gates=(*SEAM_GUARANTEES, *per_model(f"{SEAMS}::test_G3_padding_rows_leave_every_other_requests_kv_untouched")),
    ),

    # ---- failures -----------------------------------------------------------------------------
    Mutation(
        id="nonfinite-logits-sampled-anyway",
        description="a request whose logits are NaN is sampled as if nothing happened (the CPU sampler skips the check)",
        file="vt/engine/sampler.py", old="    out_ids[bad] = -1\n", new="",
        gates=("tests/engine/test_failures.py::test_a_request_with_non_finite_logits_fails_alone",
               *(f"tests/engine/test_failures.py::test_a_failed_requests_garbage_kv_never_reaches_its_neighbours[{k}]"
                 for k in ("plain", "speculative")),
               f"{FIL}::test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone[cpu]"),
    ),
    Mutation(
        id="fatal-error-hides-requests-in-flight",
        description="a fatal engine error no longer names the requests in flight",
        file="vt/engine/llm.py",
        old='            print(f"vt: fatal engine error; requests in flight: {in_flight}", file=sys.stderr)\n',
        new="",
        gates=("tests/engine/test_failures.py::test_a_fatal_error_prints_the_traceback_and_the_requests_in_flight",),
    ),

    # ---- CUDA backend (issue 6): the GPU lane runs these -------------------------------------
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
        gates=tuple(f"{CUDA}::test_demand_profile_parity_cpu_and_cuda_identical[{m}-{b}-{d}]"
                    for m in (*MODELS, "tiny-qwen3-draft") for b in (1, 4) for d in ("float32", "bfloat16")),
        expect="hidden temporaries went through the pool",
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

    # ---- speculative decoding (issue 7) ---------------------------------------------------------
    Mutation(
        id="sandbox-drops-untracked-files",
        description="the mutation sandbox copies only files in the git index, losing new modules",
        file="mutations/sandbox.py", old='"--cached", "--others", "--exclude-standard"', new='"--cached"',
        gates=("tests/mutations/test_runner.py::test_the_sandbox_takes_the_tree_as_it_is_on_disk_minus_ignored_files",),
        expect="an untracked, not ignored file belongs in the sandbox",
    ),
    Mutation(
        id="spec-context-keyed-by-row",
        description="draft contexts are keyed by batch row: a moved request lands on its neighbour's context",
        file="vt/engine/proposers.py",
        old="        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return req_id",
        new="        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return str(batch.row_of[req_id])",
        # Each moved request meets its neighbour's context: the position invariant fires wherever rows move.
        gates=(f"{SPEC}::test_G6_speculative_sampling_draws_from_the_target_distribution", f"{SPEC}::test_speculative_sampling_keeps_requests_reproducible_and_alive",
               *SPEC_ROW_MOVE_GATES, f"{SPEC}::test_G3_keepers_proposals_match_a_solo_run",
               f"{SPEC}::test_G5_preempted_and_resumed_requests_are_disabled_not_crashed",
               *(f"{SPEC}::test_G1_greedy_with_speculation_equals_greedy_without[{c}]" for c in (2, 4, 8)),
               f"{SPEC}::test_builtin_draft_accepts_a_meaningful_share", f"{SPEC}::test_G3_the_draft_is_sensitive_to_its_context",
               f"{SPEC}::test_G5_draft_entries_never_outnumber_live_requests_after_a_step",
               f"{SPEC}::test_ladder_reports_the_acceptance_rate"),
    ),
    Mutation(
        id="spec-mismatch-disables-instead-of-raising",
        description="a position mismatch quietly disables the request instead of raising",
        file="vt/engine/proposers.py",
        old="        if ctx is not None and ctx.length + ctx.owed != r.position:\n",
        new="        if ctx is not None and ctx.length + ctx.owed != r.position:\n            return None\n",
        gates=(f"{SPEC}::test_G4_a_broken_position_invariant_raises",),
    ),
    Mutation(
        id="spec-row-keyed-and-reset-context-stands",
        description="row-keyed contexts, and a missing one silently reset at the row's position: no crash, "
                    "lossless tokens, the keeper keeps proposing, but from the wrong context",
        file="vt/engine/proposers.py",
        old='        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return req_id  # never the batch row: rows move under condense, swap and reorder\n\n    def add(self, batch: InputBatch, reqs: list[NewRequestData]) -> None:\n        fresh = [r for r in reqs if r.can_speculate]\n        self.disabled.update(r.req_id for r in reqs if not r.can_speculate)\n        if fresh:  # the draft prefills what the target prefilled, into its own group\'s blocks (through its\n            # driver\'s piecewise graphs); it keeps the KV and never reads the logits back\n            self.driver.pool.release(self.driver.prefill([(r.token_ids, batch.blocks(r.req_id, DRAFT))\n                                                          for r in fresh]))\n        for r in fresh:\n            self.contexts[self._key(batch, r.req_id)] = DraftContext(r.req_id, length=len(r.token_ids))\n\n    def drop(self, req_ids: Iterable[str]) -> None:\n        for rid in req_ids:\n            self.contexts.pop(rid, None)\n            self.disabled.discard(rid)\n\n    def _context(self, batch: InputBatch, r: SpecRequest) -> DraftContext | None:\n        """The request\'s context, with the position invariant checked: never silenced."""\n        ctx = self.contexts.get(self._key(batch, r.req_id))\n        if ctx is not None and ctx.length + ctx.owed != r.position:\n            raise DraftPositionMismatch(f"request {r.req_id}: draft context holds {ctx.length} positions "\n                                        f"(+{ctx.owed} owed) but its row is at position {r.position}")\n        return ctx\n',
        new='        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return str(batch.row_of[req_id])\n\n    def add(self, batch: InputBatch, reqs: list[NewRequestData]) -> None:\n        fresh = [r for r in reqs if r.can_speculate]\n        self.disabled.update(r.req_id for r in reqs if not r.can_speculate)\n        if fresh:  # the draft prefills what the target prefilled, into its own group\'s blocks (through its\n            # driver\'s piecewise graphs); it keeps the KV and never reads the logits back\n            self.driver.pool.release(self.driver.prefill([(r.token_ids, batch.blocks(r.req_id, DRAFT))\n                                                          for r in fresh]))\n        for r in fresh:\n            self.contexts[self._key(batch, r.req_id)] = DraftContext(r.req_id, length=len(r.token_ids))\n\n    def drop(self, req_ids: Iterable[str]) -> None:\n        for rid in req_ids:\n            self.contexts.pop(rid, None)\n            self.disabled.discard(rid)\n\n    def _context(self, batch: InputBatch, r: SpecRequest) -> DraftContext | None:\n        """The request\'s context, with the position invariant checked: never silenced."""\n        ctx = self.contexts.get(self._key(batch, r.req_id))\n        if ctx is None and r.req_id not in self.disabled:\n            ctx = self.contexts[self._key(batch, r.req_id)] = DraftContext(r.req_id, length=r.position)\n        if ctx is not None and ctx.length + ctx.owed != r.position:\n            raise DraftPositionMismatch(f"request {r.req_id}: draft context holds {ctx.length} positions "\n                                        f"(+{ctx.owed} owed) but its row is at position {r.position}")\n        return ctx\n',
        gates=(f"{SPEC}::test_G6_speculative_sampling_draws_from_the_target_distribution", f"{SPEC}::test_speculative_sampling_keeps_requests_reproducible_and_alive",
               f"{SPEC}::test_G3_keepers_proposals_match_a_solo_run",
               f"{SPEC}::test_G5_preempted_and_resumed_requests_are_disabled_not_crashed",
               f"{SPEC}::test_G1_greedy_with_speculation_equals_greedy_without",
               f"{SPEC}::test_builtin_draft_accepts_a_meaningful_share", *SPEC_ROW_MOVE_GATES,
               f"{SPEC}::test_G3_the_draft_is_sensitive_to_its_context",
               f"{SPEC}::test_G5_draft_entries_never_outnumber_live_requests_after_a_step",
               f"{SPEC}::test_ladder_reports_the_acceptance_rate"),
    ),
    Mutation(
        id="spec-never-prunes",
        description="draft contexts are never pruned against the batch's membership",
        file="vt/engine/proposers.py", old="            self.contexts.pop(rid, None)\n            self.disabled.discard(rid)\n",
        new="            pass\n",
        gates=(f"{SPEC}::test_G5_draft_entries_never_outnumber_live_requests_after_a_step",
               f"{SPEC}::test_G5_preempted_and_resumed_requests_are_disabled_not_crashed"),
    ),
    Mutation(
        id="spec-propose-call-deleted",
        description="the draft never proposes: every step is a plain decode in a verify-shaped batch",
        file="vt/engine/runner.py", old="        proposals = self.proposer.propose(self.batch, asks)",
        new="        proposals = {}",
        gates=SPEC_PROPOSAL_GATES,
    ),
    Mutation(
        id="spec-sampling-always-accepts",
        description="verification accepts a draft token the target did not sample: the output follows the draft",
        file="vt/engine/rejection.py", old="        if d != t:\n", new="        if False:\n",
        gates=(f"{SPEC}::test_G6_speculative_sampling_draws_from_the_target_distribution",
               f"{SPEC}::test_accept_keeps_the_agreeing_prefix_then_the_targets_token",
               "tests/engine/test_ngram.py::test_sampled_requests_draw_the_same_tokens_with_and_without_ngram_speculation",
               f"{SPEC}::test_almost_no_acceptance_with_a_shuffled_draft",
               f"{SPEC}::test_builtin_draft_accepts_a_meaningful_share",
               f"{SPEC}::test_G2_keeper_keeps_proposing_after_the_leaver_finishes_and_the_batch_condenses",
               f"{SPEC}::test_G2_keeper_keeps_proposing_when_the_decode_first_reorder_swaps_rows",
               f"{SPEC}::test_G5_preempted_and_resumed_requests_are_disabled_not_crashed",
               f"{SPEC}::test_ladder_reports_the_acceptance_rate",
               *SPEC_LOSSLESS),
    ),
    Mutation(
        id="spec-rejection-emits-the-proposal",
        description="at the first mismatch the draft's token is emitted instead of the target's own draw",
        file="vt/engine/rejection.py", old="            return [*out, t]\n", new="            return [*out, d]\n",
        gates=(f"{SPEC}::test_G6_speculative_sampling_draws_from_the_target_distribution",
               f"{SPEC}::test_accept_keeps_the_agreeing_prefix_then_the_targets_token",
               "tests/engine/test_ngram.py::test_sampled_requests_draw_the_same_tokens_with_and_without_ngram_speculation",
               f"{SPEC}::test_almost_no_acceptance_with_a_shuffled_draft",
               f"{SPEC}::test_G2_keeper_keeps_proposing_after_the_leaver_finishes_and_the_batch_condenses",
               f"{SPEC}::test_G2_keeper_keeps_proposing_when_the_decode_first_reorder_swaps_rows",
               f"{SPEC}::test_G5_preempted_and_resumed_requests_are_disabled_not_crashed",
               *SPEC_LOSSLESS),
    ),
    Mutation(
        id="attention-reads-hidden-values",
        description="decode attention multiplies masked (zero) probabilities into hidden slots' values: 0 * NaN",
        file="models/kernels.py", old="    v = xp.where(visible[:, None, :, None], v, 0.0)\n", new="",
        gates=("tests/engine/test_failures.py::test_a_failed_requests_garbage_kv_never_reaches_its_neighbours",),
    ),
    Mutation(
        id="pool-one-recording-for-all-threads",
        description="recording() is keyed by a constant, not by the capturing thread: no capture records its blocks",
        file="vt/pool.py", old="        me = threading.get_ident()  # captures on two threads record separately",
        new="        me = 0", gates=(f"{POOL}::test_recordings_on_two_threads_stay_apart",),
    ),

    Mutation(
        id="draft-position-limit-unchecked",
        description="a draft whose max_position_embeddings is below max_model_len + k is accepted at start-up",
        file="vt/engine/llm.py",
        old="        if cfg.max_model_len + cfg.num_speculative_tokens > draft.config.max_position_embeddings:",
        new="        if False:",
        gates=(f"{SPEC}::test_a_draft_too_short_for_max_model_len_is_refused_at_startup",),
    ),

    # ---- real checkpoints (issue 12) ----------------------------------------------------------
    Mutation(
        id="manifest-check-removed",
        description="the loader reads weights without comparing the checkpoint's tensors with what the config implies",
        file="models/loader.py", old="    check_manifest(config, infos)  # before any weight is read\n", new="",
        gates=(f"{ARCH_ERR}::test_the_manifest_names_missing_unexpected_and_misshaped_tensors",
               f"{ARCH_ERR}::test_more_layers_in_the_config_than_in_the_weights",
               f"{ARCH_ERR}::test_an_unsupported_dtype_is_refused_by_name",
               f"{ARCH_ERR}::test_a_damaged_checkpoint_raises_only_typed_errors"),
    ),
    Mutation(
        id="bf16-read-as-float16",
        description="BF16 tensors are read with float16's bit layout instead of widened from bfloat16",
        file="models/safetensors_io.py", old='"BF16": np.dtype(ml_dtypes.bfloat16)', new='"BF16": np.dtype(np.float16)',
        gates=(*(f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[{a}]" for a in ("qwen3-yarn", "llama3")),
               f"{ARCH}::test_dtype_bfloat16_rounds_float32_weights_as_torch_does", *bf16_vs_hf(*ARCH_NAMES)),
    ),
    Mutation(
        id="config-alias-num-local-experts",
        description="transformers 5's num_local_experts is not read: a Qwen3-MoE config reads as dense",
        file="models/config.py", old='int(d.get("num_experts", d.get("num_local_experts", 0)) or 0)',
        new='int(d.get("num_experts", 0) or 0)',
        gates=(f"{ARCH}::test_both_config_layouts_read_the_same[qwen3-moe-float32]",
               f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[qwen3-moe]", *bf16_vs_hf("qwen3-moe")),
    ),
    Mutation(
        id="config-alias-rope-parameters",
        description="transformers 5's rope_parameters is not read: theta and the rope type fall back to defaults",
        file="models/config.py", old='    params = d.get("rope_parameters")\n', new='    params = None\n',
        gates=(*(f"{ARCH}::test_both_config_layouts_read_the_same[{a}-float32]" for a in ARCH_NAMES),
               f"{ARCH}::test_both_config_layouts_read_the_same[llama3-bfloat16]",
               *(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[{a}]" for a in ARCH_NAMES),
               *(f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[{a}]" for a in ("qwen3-yarn", "llama3")),
               *bf16_vs_hf("qwen3-yarn", "qwen3-moe", "qwen2")),
    ),
    Mutation(
        id="config-alias-torch-dtype",
        description="transformers 4's torch_dtype is not read: a bf16 checkpoint declares float32",
        file="models/config.py", old='str(d.get("dtype") or d.get("torch_dtype") or "float32")',
        new='str(d.get("dtype") or "float32")',
        gates=(f"{ARCH}::test_both_config_layouts_read_the_same[llama3-bfloat16]",),
    ),
    Mutation(
        id="rope-llama3-ignored",
        description="llama3 rope scaling is read but not applied: plain RoPE frequencies",
        file="models/rope.py", old='    if c.rope_type == "llama3":\n', new='    if False:\n',
        gates=(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[llama3]",
               f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[llama3]"),
    ),
    Mutation(
        id="rope-yarn-ignored",
        description="YaRN rope scaling is read but not applied: plain RoPE frequencies, no attention factor",
        file="models/rope.py", old='    if c.rope_type == "yarn":\n', new='    if False:\n',
        gates=(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[qwen3-yarn]",
               f"{ARCH}::test_a_bf16_checkpoint_widens_exactly[qwen3-yarn]", *bf16_vs_hf("qwen3-yarn")),
    ),
    Mutation(
        id="qwen2-qkv-bias-skipped",
        description="Qwen2's q/k/v biases are loaded but never added",
        file="models/decoder.py", old="        if c.has_qkv_bias:\n            b.launch(K.add, qkv", new="        if False:\n            b.launch(K.add, qkv",
        gates=(f"{ARCH}::test_greedy_tokens_and_logits_match_transformers[qwen2]", *bf16_vs_hf("qwen2")),
    ),
    Mutation(
        id="bf16-narrow-truncates",
        description="float32 -> bf16 truncates instead of rounding to nearest even (the KV cache and every GEMM operand)",
        file="vt/dtypes.py", old="    rne = (u + ((u >> 16) & 1) + 0x7FFF) >> 16\n", new="    rne = u >> 16\n",
        gates=(f"{DTYPES}::test_narrow_rounds_every_float32_class_as_ml_dtypes_does",
               f"{DTYPES}::test_widen_is_exact_and_to_storage_agrees_with_narrow",
               *(f"{DTYPES}::test_a_low_precision_gemm_rounds_its_left_operand_and_accumulates_in_float32[{d}]"
                 for d in ("bfloat16",))),
    ),
    Mutation(
        id="cuda-bf16-narrow-truncates",
        description="the CUDA float32 -> bf16 kernel truncates instead of rounding to nearest even",
        file="vt/dtypes.py", old=": (unsigned short)((u + ((u >> 16) & 1u) + 0x7FFFu) >> 16);",
        new=": (unsigned short)(u >> 16);", needs_gpu=True,
        gates=(f"{DTYPES}::test_the_cuda_conversion_kernels_equal_the_numpy_ones",),
    ),
    Mutation(
        id="gemm-left-operand-not-rounded",
        description="a bf16 GEMM takes its float32 activations unrounded (cuBLAS GemmEx would read them as bf16 bits)",
        file="backends/gemm.py", old="        a = narrow(xp, a, b.dtype)\n", new="        pass\n",
        gates=tuple(f"{DTYPES}::test_a_low_precision_gemm_rounds_its_left_operand_and_accumulates_in_float32[{d}]"
                    for d in ("bfloat16", "float16")),
    ),
    Mutation(
        id="kv-cache-ignores-model-dtype",
        description="the KV cache is float32 whatever the model dtype: a bf16 model's cache takes twice the memory",
        file="models/base.py", old="    dtype = model.kv_dtype\n", new="    dtype = np.dtype(F32)\n",
        gates=tuple(f"{ARCH}::test_a_low_precision_model_holds_half_the_bytes[{d}]" for d in ("bfloat16", "float16")),
    ),
    Mutation(
        id="low-precision-weights-kept-float32",
        description="dtype=bfloat16 keeps every weight in float32 (no rounding, twice the bytes)",
        file="models/decoder.py", old="            return widen(np, to_storage(np.asarray(hf[name], dtype=F32), self.dtype))\n",
        new="            return np.asarray(hf[name], dtype=F32)\n",
        gates=(f"{ARCH}::test_dtype_bfloat16_rounds_float32_weights_as_torch_does",),
    ),
    Mutation(
        id="generation-config-unvalidated",
        description="generation_config.json's sampling defaults are taken without validation",
        file="vt/engine/llm.py", old="        return validate_generation_config(ckpt.generation_config)\n",
        new="        return dict(ckpt.generation_config)\n",
        gates=tuple(f"{ARCH_ERR}::test_generation_config_is_validated_like_sampling_params[{g}]"
                    for g in ("top_p", "temperature", "max_new_tokens", "top_k")),
    ),
    Mutation(
        id="generation-config-max-new-tokens-ignored",
        description="a checkpoint's max_new_tokens is not the default max_tokens",
        file="vt/engine/sampling.py", old='        max_tokens = self.max_tokens or gen.get("max_new_tokens") or DEFAULT_MAX_TOKENS',
        new="        max_tokens = self.max_tokens or DEFAULT_MAX_TOKENS",
        gates=(f"{ARCH_ERR}::test_generation_config_max_new_tokens_is_the_default_max_tokens",),
    ),

    # ---- guarantees no test guarded (issue 19) --------------------------------------------------
    Mutation(
        id="capacity-one-block-short",
        description="start-up accepts a pool one block short of one max_model_len request",
        file="vt/engine/config.py", old="        if needed > self.num_blocks:", new="        if needed > self.num_blocks + 1:",
        gates=(f"{GUAR}::test_startup_refuses_a_pool_one_block_short_of_one_max_model_len_request",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="cpu-side-stream-alloc-allowed",
        description="the CPU backend refuses a driver allocation only on the capturing stream itself, not on a side stream forked into it",
        file="backends/cpu.py", old="        forbidding = [c for c in self._captures if c.forbids_unsafe_calls()]",
        new="        forbidding = [c for c in self._captures if c.forbids_unsafe_calls() and c.origin is self.current_stream()]",
        gates=tuple(f"{CONF}::test_capture_rule[driver alloc on a forked side stream-{m}-cpu]" for m in ("global", "thread_local")),
    ),
    Mutation(
        id="cpu-relaxed-refuses-side-stream-alloc",
        description="the CPU backend refuses an allocation on a forked side stream even in relaxed mode",
        file="backends/cpu.py", old="        forbidding = [c for c in self._captures if c.forbids_unsafe_calls()]",
        new="        forbidding = [c for c in self._captures if c.forbids_unsafe_calls() or self.current_stream() in c.members[1:]]",
        gates=(f"{CONF}::test_capture_rule[driver alloc on a forked side stream-relaxed-cpu]",),
    ),
    Mutation(
        id="pool-unpin-drops-every-pin",
        description="retiring one graph drops every pin on its blocks, though another live graph still holds them",
        file="vt/pool.py", old="                n = self._pins.pop(b) - 1\n                if n:\n                    self._pins[b] = n",
        new="                self._pins.pop(b, None)",
        gates=per_model(f"{SEAMS}::test_G7_retiring_one_of_two_graphs_keeps_the_pins_the_other_holds"),
        expect="the surviving graph replayed over blocks the drain freed",
    ),
    Mutation(
        id="spec-draft-keyed-by-prompt",
        description="draft contexts are keyed by the prompt's tokens: two identical prompts share one context",
        file="vt/engine/proposers.py",
        old="        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return req_id",
        new="        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return str(batch.tokens(req_id)[:4].tolist())",
        gates=(f"{GUAR}::test_identical_prompts_keep_their_own_draft_state",),
        expect="two identical prompts shared draft state",
    ),
    Mutation(
        id="preempted-requeued-at-the-back",
        description="a preempted request goes to the back of the queue, behind later arrivals",
        file="vt/engine/scheduler.py", old="        self.waiting.appendleft(req)", new="        self.waiting.append(req)",
        gates=(f"{GUAR}::test_a_preempted_request_goes_back_to_the_front_of_the_queue",),
        expect="waits ahead of the later arrival",
    ),
    Mutation(
        id="spec-lookahead-unclamped",
        description="speculative lookahead is not clamped at max_model_len: the last steps overrun the block table",
        file="vt/engine/scheduler.py",
        old="return k if k and req.can_speculate and req.num_tokens + k <= self.cfg.max_model_len else 0",
        new="return k if k and req.can_speculate else 0",
        gates=tuple(f"{GUAR}::test_speculation_near_max_model_len_finishes_with_length[{s}]" for s in ("draft", "ngram")),
        expect="broke an engine invariant",
    ),
    Mutation(
        id="checkpoint-zero-read-as-unset",
        description="a generation_config.json value of 0 is read as unset: temperature 0 samples at 1.0",
        file="vt/engine/sampling.py",
        old="picked[name] = explicit if explicit is not None else gen.get(name, neutral)",
        new="picked[name] = explicit if explicit is not None else (gen.get(name) or neutral)",
        gates=(f"{GUAR}::test_a_checkpoint_temperature_of_zero_is_greedy",),
    ),
    Mutation(
        id="driver-stages-first-block-only",
        description="the slot's staging copies only each row's first block: graphed and eager steps agree, both wrong",
        file="vt/engine/graph_driver.py", old="        tables[:B, :W] = inp.block_tables",
        new="        tables[:B, :1] = inp.block_tables[:, :1]",
        gates=per_model(f"{SEAMS}::test_G4_graph_is_rebuilt_not_reused_after_the_block_table_width_changes"),
        expect="disagrees with an independent forward",
    ),

    # ---- mutation reports (issue 20) -------------------------------------------------------------
    Mutation(
        id="report-json-not-embedded",
        description="the HTML report carries the viewer but not the report: the page renders no score",
        file="mutations/reports.py",
        old="        f\"<script>document.querySelector('mutation-test-report-app').report = {data};</script>\",\n",
        new="",
        gates=("tests/mutations/test_reports.py::test_the_html_report_renders_in_a_real_browser",
               "tests/mutations/test_reports.py::test_all_four_reports_are_written_and_the_json_validates"),
        expect="the viewer shows the mutation score",
    ),
    Mutation(
        id="since-ignores-shared-helpers",
        description="--since runs only mutants whose own files changed, though a shared test helper changed",
        file="mutations/__main__.py", old="    if shared or \"mutations/registry.py\" in changed:",
        new="    if \"mutations/registry.py\" in changed:",
        gates=("tests/mutations/test_runner.py::test_since_runs_only_the_mutants_a_diff_touches",),
        expect="a shared helper: all",
    ),

    # ---- no hangs, no raw tracebacks (issue 18, in part) ---------------------------------------
    Mutation(
        id="stall-detector-removed",
        description="an engine step that can schedule nothing with requests in flight returns quietly: the caller spins",
        file="vt/engine/llm.py", old="                self._check_stall()\n", new="",
        gates=(f"{GUAR}::test_a_request_that_can_never_be_admitted_stalls_loudly_not_forever",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="ladder-level-unchecked",
        description="a concurrency level below 1 is not refused by name",
        file="vt/engine/ladder.py", old="    if bad or not concurrency:", new="    if not concurrency:",
        gates=tuple(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[{c}]"
                    for c in ("concurrency-0", "concurrency-negative")),
    ),
    Mutation(
        id="ladder-progress-only-on-a-terminal",
        description="the ladder shows progress only as a terminal bar: a CI log sees nothing for minutes",
        file="vt/engine/ladder.py", old="    if not sys.stderr.isatty():", new="    if False:",
        gates=(f"{CLI}::test_long_work_shows_progress_as_plain_lines_off_a_terminal",),
        expect="vt ladder: c=1 done",
    ),
    Mutation(
        id="ladder-failures-unexplained",
        description="a ladder rung reports failed requests without saying why",
        file="vt/cli.py", old="            print(f\"vt: c={r.c}: {r.errors.count(reason)} request(s) failed: {reason}\", file=sys.stderr)",
        new="            pass",
        gates=(f"{CLI}::test_a_ladder_with_failed_requests_says_why",),
    ),
    Mutation(
        id="no-cupy-unexplained",
        description="--backend cuda without CuPy ends in a raw ModuleNotFoundError",
        file="backends/cuda.py", old="        try:\n            import cupy\n        except ImportError as e:",
        new="        import cupy\n\n        try:\n            pass\n        except ImportError as e:",
        gates=(f"{CLI}::test_the_cuda_backend_without_cupy_is_one_typed_line",),
        expect="raw ModuleNotFoundError escaped",
    ),
    Mutation(
        id="cache-dir-error-unexplained",
        description="an unwritable VT_CACHE_DIR ends in a raw OSError traceback",
        file="models/tiny.py", old="    except OSError as e:\n        from vt.errors import ConfigError", new="    except ZeroDivisionError as e:\n        from vt.errors import ConfigError",
        gates=(f"{CLI}::test_an_unwritable_cache_dir_is_one_typed_line",),
    ),
    Mutation(
        id="engine-seed-unchecked",
        description="a negative engine seed reaches NumPy, which raises a raw ValueError",
        file="vt/engine/config.py",
        old='        _need(isinstance(self.seed, int) and 0 <= self.seed < 2**63, "seed", self.seed, "an int in [0, 2**63)")\n',
        new="",
        gates=tuple(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[{c}]"
                    for c in ("negative-ladder-seed", "negative-seed")),
        expect="raw ValueError escaped",
    ),
    Mutation(
        id="prompt-utf8-unchecked",
        description="a prompt with undecodable bytes reaches the tokenizer, which raises a raw TypeError",
        file="vt/engine/llm.py", old='            try:\n                prompt.encode("utf-8")\n',
        new='            try:\n                pass\n',
        gates=(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[non-utf8-prompt]",),
        expect="raw TypeError escaped",
    ),
    Mutation(
        id="env-flags-case-sensitive",
        description="VT_* flags accept only lowercase words: VT_CUDAGRAPH=True is refused",
        file="vt/env.py", old="    if raw.strip().lower() in TRUE:", new="    if raw in TRUE:",
        gates=(f"{CLI}::test_flag_values_are_read_in_any_case_and_bad_ones_named[True-True]",),
    ),

    # ---- the scheduler and KV manager against a reference (issue 18) ------------------------------
    Mutation(
        id="scheduler-ignores-max-num-seqs",
        description="admission ignores max_num_seqs: more requests run than the batch has rows",
        file="vt/engine/scheduler.py",
        old="        while self.waiting and len(self.running) < self.cfg.max_num_seqs:",
        new="        while self.waiting:",
        gates=("tests/engine/test_scheduler_machine.py::TestSchedulerMachine",),
        expect="max_num_seqs",
    ),
    Mutation(
        id="kv-release-loses-a-block",
        description="releasing a request's blocks drops the last one: the pool shrinks a block at a time",
        file="vt/engine/kv_manager.py", old="        for b in (b for t in tables for b in t):",
        new="        for b in [b for t in tables for b in t][:-1]:",
        gates=("tests/engine/test_scheduler_machine.py::TestSchedulerMachine",),
        expect="a block lost or duplicated",
    ),

    # ---- seeds: draws keyed by (seed, output position) (issue 13) -----------------------------
    Mutation(
        id="seed-counter-keyed-by-row",
        description="a request's draw position is keyed by its batch row: neighbours and row moves change its tokens",
        file="vt/engine/runner.py", old="        counter = len(toks) - st.num_prompt_tokens + ahead\n",
        new="        counter = len(toks) - st.num_prompt_tokens + ahead + 7 * self.batch.row_of[rid]\n",
        gates=(f"{SEEDS}::test_a_seeded_request_draws_the_same_tokens_whatever_runs_beside_it",
               f"{SEEDS}::test_the_target_really_moves_rows_and_still_draws_the_same",
               f"{SEEDS}::test_a_preempted_seeded_request_resumes_the_same_draws"),
    ),
    Mutation(
        id="seed-counter-restarts-on-recompute",
        description="a recomputed request is readmitted with all its tokens counted as prompt: its draws restart",
        file="vt/engine/scheduler.py", old="NewRequestData(req.id, req.all_ids, len(req.prompt_ids), blocks,",
        new="NewRequestData(req.id, req.all_ids, len(req.all_ids), blocks,",
        gates=(f"{SEEDS}::test_a_preempted_seeded_request_resumes_the_same_draws",),
    ),
    Mutation(
        id="min-tokens-bans-nothing",
        description="min_tokens is accepted but EOS and stop ids are never banned: the output may stop early",
        file="vt/engine/runner.py", old="        banned = () if counter >= p.min_tokens else",
        new="        banned = () if True else",
        gates=(f"{API}::test_min_tokens_holds_off_eos_and_stop_ids_then_lets_them_stop",),
    ),
    Mutation(
        id="prompt-logprobs-off-by-one",
        description="prompt logprobs score each position's own token instead of the next one",
        file="vt/engine/runner.py", old="for t in toks[c.start + 1 : upto + 1]]", new="for t in toks[c.start : upto]]",
        gates=(f"{API}::test_prompt_logprobs_score_each_prompt_token_as_transformers_does",),
    ),

    Mutation(
        id="slot-owns-its-logits",
        description="every graph slot allocates its own [rows, vocab] logits buffer",
        file="vt/engine/graph_driver.py", old="        self.logits = driver.logits.view((n, c.vocab_size))\n",
        new="        self.logits = b.empty((n, c.vocab_size), F32)\n",
        gates=(f"{SEAMS}::test_the_graph_slots_share_one_logits_buffer",),
    ),

    # ---- chunked prefill (issue 15) ------------------------------------------------------------
    Mutation(
        id="chunk-budget-off-by-one",
        description="a prefill chunk takes one token more than the step's budget leaves",
        file="vt/engine/scheduler.py", old="        return 0 if self.num_spec_tokens else max(budget, 0)",
        new="        return 0 if self.num_spec_tokens else max(budget + 1, 0)",
        gates=tuple(f"{CHUNK}::test_chunked_runs_generate_what_the_unchunked_run_does[{b}]" for b in (16, 33, 64)),
    ),
    Mutation(
        id="prefill-chunks-before-decodes",
        description="prefill chunks take the budget before the decodes: a long prompt starves decoding requests",
        file="vt/engine/scheduler.py",
        old="        budget = self.cfg.max_num_batched_tokens - self._decode(out)\n        budget = self._continue_prefills(out, budget)\n",
        new="        budget = self._continue_prefills(out, self.cfg.max_num_batched_tokens)\n        if budget > 0:\n            budget -= self._decode(out)\n",
        gates=(f"{CHUNK}::test_decodes_go_first_and_are_never_starved_by_a_long_prompt",
               *(f"{CHUNK}::test_chunked_runs_generate_what_the_unchunked_run_does[{b}]" for b in (16, 33, 64)),
               f"{CHUNK}::test_prompt_logprobs_come_chunk_by_chunk",
               f"{CHUNK}::test_a_preempted_chunked_prefill_recomputes_to_the_same_tokens_and_prompt_logprobs"),
    ),

    Mutation(
        id="prompt-logprobs-appended-on-recompute",
        description="a request preempted mid-prefill appends its rescored prompt logprobs instead of replacing them",
        file="vt/engine/llm.py", old="r.prompt_logprobs = [*(r.prompt_logprobs or [None])[:first], *scored]",
        new="r.prompt_logprobs = [*(r.prompt_logprobs or [None]), *scored]",
        gates=(f"{CHUNK}::test_a_preempted_chunked_prefill_recomputes_to_the_same_tokens_and_prompt_logprobs",),
    ),

    Mutation(
        id="bench-serve-unreachable-base-url-traceback",
        description="vt bench serve asks an unreachable --base-url for its model unguarded: a raw ConnectError",
        file="vt/cli.py", old="    except (httpx.HTTPError, ValueError, KeyError, IndexError, TypeError) as e:",
        new="    except () as e:",
        gates=(f"{CLI}::test_bad_input_is_one_typed_line_and_exit_2[bench-unreachable-server]",),
    ),
    Mutation(
        id="serve-port-unchecked",
        description="an impossible --port reaches getaddrinfo, which wraps it: 99999 listens on 34463",
        file="vt/server/serve.py", old="    if not 0 <= port < 65536:", new="    if False:",
        gates=(f"{RULE}::test_an_impossible_port_is_refused_not_wrapped_to_another",),
    ),

    # ---- the server rule (issue 14) ------------------------------------------------------------
    Mutation(
        id="server-role-frame-before-the-first-result",
        description="a stream's 200 and role frame go out before the engine produced anything: errors and TTFT lie",
        file="vt/server/app.py", old="        firsts = await self._first()  # before any byte",
        new="        firsts = None  # before any byte",
        gates=(f"{RULE}::test_no_byte_is_sent_while_the_engine_is_held_inside_sampling",
               f"{RULE}::test_an_error_before_the_first_token_is_the_whole_response[stream]"),
    ),
    Mutation(
        id="server-error-swallowed-after-a-200",
        description="a request that fails after its first token ends its stream as if it had finished",
        file="vt/server/app.py", old='            if c.finish_reason == "error":\n', new="            if False:\n",
        gates=(f"{RULE}::test_a_failure_after_the_first_token_is_one_error_frame_then_done",),
    ),
    Mutation(
        id="server-error-frame-without-done",
        description="after an engine failure mid-stream the error frame is the last thing sent: no [DONE]",
        file="vt/server/app.py", old="            yield _sse(err.body())\n", new="            yield _sse(err.body())\n            return\n",
        gates=(f"{RULE}::test_a_fatal_engine_error_mid_stream_is_an_error_frame_then_done_and_health_goes_503",),
    ),
    Mutation(
        id="server-abort-does-not-free",
        description="a client that goes away leaves its request running: its blocks stay in use until it finishes",
        file="vt/server/async_llm.py", old="                self.abort(request_id)  # queued after its add",
        new="                pass  # queued after its add",
        gates=(f"{RULE}::test_a_client_that_goes_away_frees_its_blocks_within_one_engine_step",
               f"{RULE}::test_a_non_streaming_client_that_goes_away_is_aborted_too",
               f"{RULE}::test_a_disconnect_frees_the_draft_state_too"),
    ),
    Mutation(
        id="server-usage-counts-one-sample",
        description="usage counts the first sample's tokens only, whatever n is",
        file="vt/server/app.py", old="completion = sum(len(c.token_ids) for out in outs for c in out.outputs)",
        new="completion = sum(len(out.outputs[0].token_ids) for out in outs)",
        gates=(f"{OAI}::test_n_samples_logprobs_stop_and_seed",),
    ),

    # ---- n > 1: shared prompt blocks (issue 13) ------------------------------------------------
    Mutation(
        id="fork-shares-the-partial-block",
        description="the samples share the prompt's partial last block too, and overwrite each other's tokens in it",
        file="vt/engine/scheduler.py", old="self.kv.fork(leader, req.id, n // self.kv.block_size)",
        new="self.kv.fork(leader, req.id, -(-n // self.kv.block_size))",
        gates=(f"{PAR}::test_each_sample_is_the_request_it_would_be_alone",
               f"{PAR}::test_the_samples_share_the_prompts_full_blocks"),
    ),
    Mutation(
        id="fork-partial-block-not-copied",
        description="a forked sample's own partial prompt block is never filled from its leader's",
        file="vt/engine/runner.py", old="            if n % bs:  # the partial last block", new="            if False:  # the partial last block",
        gates=(f"{PAR}::test_each_sample_is_the_request_it_would_be_alone",
               f"{PAR}::test_a_sample_that_finishes_early_leaves_the_shared_blocks_to_the_others"),
    ),
    Mutation(
        id="release-ignores-the-refcount",
        description="a sample that finishes frees the prompt blocks its siblings still read",
        file="vt/engine/kv_manager.py", old="            if self.refs[b] == 0:\n", new="            if True:\n",
        gates=(f"{PAR}::test_a_sample_that_finishes_early_leaves_the_shared_blocks_to_the_others",
               f"{PAR}::test_the_samples_share_the_prompts_full_blocks"),
    ),

    # ---- the sanitizer as DESIGN states it (issue 18) ------------------------------------------
    Mutation(
        id="sanitizer-ignores-released-blocks",
        description="the sanitizer checks freed buffers only: a kernel reading a released pool block runs silently",
        file="backends/cpu.py",
        old="        if not owned_by_graph and blk is not None and (not blk.is_live or blk.generation != t.generation):",
        new="        if False:",
        gates=(f"{CPU}::test_sanitizer_names_a_kernel_reading_a_released_pool_block_with_both_stacks",
               f"{CPU}::test_sanitizer_names_a_stale_tensor_whose_block_another_owner_holds_now"),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="sanitizer-ignores-other-owners",
        description="the sanitizer does not tell a block's owners apart: a stale tensor reads its successor's data",
        file="backends/cpu.py",
        old="        if not owned_by_graph and blk is not None and (not blk.is_live or blk.generation != t.generation):",
        new="        if not owned_by_graph and blk is not None and not blk.is_live:",
        gates=(f"{CPU}::test_sanitizer_names_a_stale_tensor_whose_block_another_owner_holds_now",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="sanitizer-aliasing-unchecked",
        description="a graph replays over a temporary that a long-lived tensor still holds, unreported",
        file="vt/engine/graph_driver.py", old="                self.pool.check_idle(slot.pinned, f\"the graph of slot {slot.key}\")\n",
        new="                pass\n",
        gates=(f"{CPU}::test_sanitizer_refuses_a_replay_over_a_temporary_someone_still_holds[pool-lane]",),
        expect="DID NOT RAISE",
    ),
    Mutation(
        id="sanitizer-no-quarantine",
        description="a released block is handed out again first (LIFO) even when the sanitizer runs",
        file="vt/pool.py", old="            elif self.is_sanitizing:  # quarantine", new="            elif False:  # quarantine",
        gates=(f"{CPU}::test_sanitizer_quarantines_a_released_block_behind_every_other_free_one",),
        expect="sanitize=True",
    ),
    Mutation(
        id="pool-release-not-poisoned",
        description="a released pool block keeps its contents: a stale read sees plausible numbers",
        file="vt/pool.py", old="                self.backend.poison(blk.buffer)\n", new="                pass\n",
        gates=(f"{CPU}::test_sanitizer_names_a_kernel_reading_a_released_pool_block_with_both_stacks",),
        expect="a released block is poisoned",
    ),

    # ---- the offline API (issue 13, in part) -----------------------------------------------------
    Mutation(
        id="prompt-dict-iterated-as-a-list",
        description="a single {'prompt': ...} dict is taken as a list of prompts: vt generates for the word 'prompt'",
        file="vt/engine/api.py", old="    is_single = isinstance(prompts, (str, dict)) or",
        new="    prompts = list(prompts) if isinstance(prompts, dict) else prompts\n    is_single = isinstance(prompts, str) or",
        gates=(f"{API}::test_every_prompt_shape_vllm_accepts_generates_the_same",
               f"{API}::test_a_prompt_of_another_shape_is_a_typed_error_and_queues_nothing[both-keys]",
               f"{API}::test_a_prompt_of_another_shape_is_a_typed_error_and_queues_nothing[unknown-key]"),
    ),
    Mutation(
        id="chat-template-without-trim-blocks",
        description="chat templates render without trim_blocks: every block tag leaves its newline behind",
        file="vt/engine/chat.py", old="ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)",
        new="ImmutableSandboxedEnvironment(trim_blocks=False, lstrip_blocks=True)",
        gates=tuple(f"{API}::test_chat_renders_the_template_as_transformers_does[{g}-layered]" for g in ("True", "False")),
    ),
    Mutation(
        id="chat-template-without-lstrip-blocks",
        description="chat templates render without lstrip_blocks: indented block tags leave their indentation",
        file="vt/engine/chat.py", old="ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)",
        new="ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=False)",
        gates=tuple(f"{API}::test_chat_renders_the_template_as_transformers_does[{g}-layered]" for g in ("True", "False")),
    ),
    Mutation(
        id="detok-releases-partial-characters",
        description="the detokenizer releases text that ends in half a character (U+FFFD)",
        file="vt/engine/detokenizer.py", old="        if len(full) <= len(prefix) or full.endswith(REPLACEMENT):",
        new="        if len(full) <= len(prefix):",
        gates=(f"{DETOK}::test_the_released_text_is_the_whole_decode_and_never_ends_in_a_partial_character",
               f"{DETOK}::test_a_stop_string_is_found_wherever_it_falls_and_cut_before",
               *(f"{DETOK}::test_a_stop_string_of_multibyte_characters_splitting_across_tokens[{i}]"
                 for i in ("euro", "e-acute-space-c", "emoji"))),
    ),
    Mutation(
        id="detok-window-never-advances",
        description="the decode window never moves on: every token re-decodes the whole output (quadratic)",
        file="vt/engine/detokenizer.py", old="        self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)",
        new="        self.read_offset = len(self.ids)",
        gates=(f"{DETOK}::test_the_cost_stays_linear_on_a_long_output",
               f"{DETOK}::test_the_released_text_is_the_whole_decode_and_never_ends_in_a_partial_character"),
        expect="linear",
    ),
    Mutation(
        id="stop-search-misses-straddlers",
        description="stop strings are searched in the new text only: one straddling two releases is missed",
        file="vt/engine/detokenizer.py", old="        start = max(0, len(self.text) - self.max_stop + 1)",
        new="        start = len(self.text)",
        gates=(f"{DETOK}::test_a_stop_string_is_found_wherever_it_falls_and_cut_before",
               f"{DETOK}::test_a_stop_string_of_multibyte_characters_splitting_across_tokens[e-acute-space-c]"),
    ),
    Mutation(
        id="stop-token-ids-ignored",
        description="stop_token_ids are accepted and never stop anything",
        file="vt/engine/llm.py", old="        elif can_stop and token in p.stop_token_ids:", new="        elif False:",
        gates=(f"{API}::test_a_stop_token_id_finishes_with_its_id_as_the_stop_reason",
               f"{API}::test_min_tokens_holds_off_eos_and_stop_ids_then_lets_them_stop"),
    ),
    Mutation(
        id="include-stop-str-ignored",
        description="include_stop_str_in_output is accepted and the stop string is cut anyway",
        file="vt/engine/detokenizer.py", old="(len(s) if self.include_stop else 0)", new="0",
        gates=(f"{API}::test_include_stop_str_in_output_keeps_the_stop_string",),
    ),
    Mutation(
        id="repetition-penalty-multiplies-positive-logits",
        description="the repetition penalty multiplies every seen token's logit, raising positive ones",
        file="vt/engine/sampler.py", old="        v = np.where(v > 0, v / F32(rep), v * F32(rep)).astype(F32)\n",
        new="        v = (v * F32(rep)).astype(F32)\n",
        gates=(f"{PEN}::test_repetition_penalty_matches_transformers[cpu]",
               f"{PEN}::test_a_strong_repetition_penalty_changes_greedy_output_in_the_engine"),
    ),
    Mutation(
        id="cuda-repetition-penalty-multiplies-positive-logits",
        description="the CUDA sampler's repetition penalty multiplies every seen token's logit",
        file="vt/engine/sampler_cuda.py", old="v = v > 0.0f ? __fdiv_rn(v, rep) : __fmul_rn(v, rep);",
        new="v = __fmul_rn(v, rep);", needs_gpu=True,
        gates=(f"{PEN}::test_repetition_penalty_matches_transformers[cuda]",),
    ),
    Mutation(
        id="presence-penalty-per-occurrence",
        description="the presence penalty is charged per occurrence, like the frequency penalty",
        file="vt/engine/sampler.py", old="(F32(freq) * counts[hit].astype(F32) + F32(pres))",
        new="(F32(freq) * counts[hit].astype(F32) + F32(pres) * counts[hit].astype(F32))",
        gates=tuple(f"{PEN}::test_presence_and_frequency_follow_openai_on_output_tokens_only[{c}-cpu]"
                    for c in ("0.8-0.0", "-0.4-1.3")),
    ),
    Mutation(
        id="frequency-penalty-counts-the-prompt",
        description="the frequency penalty counts prompt tokens too, not only the output's",
        file="vt/engine/sampler.py", old="np.unique(hist[num_prompt:], return_counts=True)",
        new="np.unique(hist, return_counts=True)",
        gates=tuple(f"{PEN}::test_presence_and_frequency_follow_openai_on_output_tokens_only[{c}-cpu]"
                    for c in ("0.8-0.0", "0.0-0.5", "-0.4-1.3")),
    ),
    Mutation(
        id="cuda-frequency-penalty-counts-the-prompt",
        description="the CUDA sampler counts prompt tokens too for presence and frequency",
        file="vt/engine/sampler_cuda.py", old="for (int k = num_prompt; k < num_hist; k++) cnt += h[k] == t;",
        new="for (int k = 0; k < num_hist; k++) cnt += h[k] == t;", needs_gpu=True,
        gates=tuple(f"{PEN}::test_presence_and_frequency_follow_openai_on_output_tokens_only[{c}-cuda]"
                    for c in ("0.8-0.0", "0.0-0.5", "-0.4-1.3")),
    ),
    Mutation(
        id="penalties-never-applied",
        description="penalties are validated and carried, never staged for the sampler",
        file="vt/engine/runner.py", old="                       toks if p.has_penalties else None,", new="                       None,",
        gates=(f"{PEN}::test_a_strong_repetition_penalty_changes_greedy_output_in_the_engine",),
    ),
    Mutation(
        id="top-k-off",
        description="top_k is accepted and never applied",
        file="vt/engine/sampler.py", old="    if 0 < top_k < x.size:\n        idx = np.flatnonzero", new="    if False:\n        idx = np.flatnonzero",
        gates=(*(f"{FIL}::test_top_k_keeps_the_k_most_likely[{k}]" for k in (1, 3, 7)),
               f"{FIL}::test_top_p_applies_to_the_top_k_survivors",
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "top_k-cpu", "all-cpu")),
    ),
    Mutation(
        id="cuda-top-k-off",
        description="the CUDA sampler never applies top_k",
        file="vt/engine/sampler_cuda.py", old="if (top_k > 0 && top_k < V) f.kmin", new="if (false) f.kmin", needs_gpu=True,
        gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", "top_k-cuda", "all-cuda"), f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary"),
    ),
    Mutation(
        id="top-p-off",
        description="top_p is accepted and never applied",
        file="vt/engine/sampler.py", old="    if top_p < 1.0:\n        k = keys(x[idx])\n", new="    if False:\n        k = keys(x[idx])\n",
        gates=(*(f"{FIL}::test_top_p_keeps_the_smallest_set_reaching_p[{p}]" for p in (0.3, 0.5, 0.6, 0.9)),
               f"{FIL}::test_top_p_applies_to_the_top_k_survivors",
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "top_p-cpu", "all-cpu")),
    ),
    Mutation(
        id="cuda-top-p-off",
        description="the CUDA sampler never applies top_p",
        file="vt/engine/sampler_cuda.py", old="        if (top_p < 1.0f) {", new="        if (false) {", needs_gpu=True,
        gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", "top_p-cuda", "all-cuda"), f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary"),
    ),
    Mutation(
        id="top-p-one-short",
        description="top_p keeps the largest set below p instead of the smallest set reaching it",
        file="vt/engine/sampler.py", old='np.searchsorted(cum, target, side="left")', new='np.searchsorted(cum, target, side="left") - 1',
        gates=(*(f"{FIL}::test_top_p_keeps_the_smallest_set_reaching_p[{p}]" for p in (0.3, 0.5, 0.6, 0.9)),
               f"{FIL}::test_top_p_applies_to_the_top_k_survivors",
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "top_p-cpu", "all-cpu")),
    ),
    Mutation(
        id="min-p-off",
        description="min_p is accepted and never applied",
        file="vt/engine/sampler.py", old="    if min_p > 0.0:\n        w *= e", new="    if False:\n        w *= e",
        gates=(*(f"{FIL}::test_min_p_keeps_tokens_at_least_min_p_times_the_top[{m}]" for m in (0.3, 0.6)),
               *FILC("test_draws_follow_the_renormalized_support_chi_square", "min_p-cpu")),
    ),
    Mutation(
        id="cuda-min-p-off",
        description="the CUDA sampler never applies min_p",
        file="vt/engine/sampler_cuda.py", old="f.weighted = 1; f.min_p = min_p;", new="f.weighted = 1; f.min_p = 0.0f;",
        needs_gpu=True, gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", "min_p-cuda"), f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary"),
    ),
    Mutation(
        id="seed-counter-ignored",
        description="draws depend on the seed only, not on the output position: every position draws the same uniform",
        file="vt/engine/sampler.py", old="GOLDEN * (counter.astype(np.uint64) + np.uint64(1))", new="GOLDEN",
        gates=(*FILC("test_draws_follow_the_renormalized_support_chi_square", *(f"{k}-cpu" for k in
                                                                               ("plain", "top_k", "top_p", "min_p", "all"))),
               *FILC("test_temperature_sharpens_and_zero_is_argmax_with_the_lowest_index_on_ties", "cpu"),
               *FILC("test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone", "cpu")),
    ),
    Mutation(
        id="cuda-seed-counter-ignored",
        description="the CUDA sampler's draws depend on the seed only, not on the output position",
        file="vt/engine/sampler_cuda.py", old="mix64(seed + 0x9E3779B97F4A7C15ull * (counter + 1ull))",
        new="mix64(seed + 0x9E3779B97F4A7C15ull)", needs_gpu=True,
        gates=(*(*FILC("test_draws_follow_the_renormalized_support_chi_square", *(f"{k}-cuda" for k in
                                                                               ("plain", "top_k", "top_p", "min_p", "all"))),
               *FILC("test_temperature_sharpens_and_zero_is_argmax_with_the_lowest_index_on_ties", "cuda"),
               *FILC("test_banned_tokens_are_never_drawn_and_non_finite_rows_fail_alone", "cuda")), f"{FIL}::test_the_cuda_sampler_draws_what_the_numpy_reference_draws_at_a_real_vocabulary"),
    ),
    Mutation(
        id="logprobs-from-the-penalized-row",
        description="logprobs are taken from a rescaled row instead of the model's logits",
        file="vt/engine/sampler.py", old="    x = row.astype(np.float64)\n", new="    x = row.astype(np.float64) / 2\n",
        gates=(*(f"{API}::test_logprobs_are_the_models_log_softmax_as_transformers_computes_it[{s}]"
                 for s in ("plain", "ngram")),
               f"{API}::test_prompt_logprobs_score_each_prompt_token_as_transformers_does"),
    ),
    Mutation(
        id="logprobs-of-an-accepted-run-misaligned",
        description="after a verify, every accepted token gets the first position's logprobs",
        file="vt/engine/runner.py", old="[i * q + j for j in range(len(toks))]", new="[i * q for _ in range(len(toks))]",
        gates=(f"{API}::test_logprobs_are_the_models_log_softmax_as_transformers_computes_it[ngram]",),
    ),
    Mutation(
        id="stop-reason-unset",
        description="a request stopped by a stop string does not say which",
        file="vt/engine/llm.py", old="            r.stop_reason = stop\n", new="",
        gates=(f"{API}::test_a_stop_string_names_itself_as_the_stop_reason",
               f"{API}::test_include_stop_str_in_output_keeps_the_stop_string"),
    ),

    # ---- engine core (issue 11) ------------------------------------------------------------------
    Mutation(
        id="kv-draft-memory-uncounted",
        description="the start-up capacity check counts the target's KV blocks only, not the draft's in the same pool",
        file="vt/engine/config.py", old="        groups = self.num_kv_groups\n", new="        groups = 1\n",
        gates=(f"{CAP}::test_startup_counts_the_drafts_kv_with_the_targets",), expect="DID NOT RAISE",
    ),
    Mutation(
        id="update-keeps-a-finished-request",
        description="the engine's update step finishes a request without handing it to the scheduler: its blocks stay taken",
        file="vt/engine/llm.py", old="        self.scheduler.finish(r)  # its blocks, in every KV group, are free before the step ends\n",
        new="",
        # Every engine run in the gate file ends in the stall detector once a finished request holds its slot.
        gates=(*(f"{CAP}::test_a_finished_request_frees_its_blocks_in_the_step_that_finished_it[{s}]"
                 for s in ("plain", "speculative")),
               *per_model(f"{CAP}::test_preemption_under_a_tiny_pool_finishes_everything_with_unconstrained_tokens"),
               f"{CAP}::test_a_request_that_can_never_fit_gets_an_error_and_the_rest_finish",
               f"{CAP}::test_generation_stops_at_max_model_len_without_overrunning_the_block_table",
               f"{CAP}::test_a_max_length_request_runs_to_the_end_when_the_pool_holds_exactly_target_and_draft"),
        expect="a finished request holds blocks",
    ),
    Mutation(
        id="update-appends-past-a-finish",
        description="the update step keeps appending a speculative run's tokens after the request finished",
        file="vt/engine/llm.py", old="                    if r.is_finished:\n                        break\n", new="",
        # A finished request that keeps tokens diverges from the same run without speculation.
        gates=(f"{SPEC}::test_G6_speculative_sampling_draws_from_the_target_distribution",
               f"{SPEC}::test_a_request_finishing_inside_an_accepted_run",
               f"{SPEC}::test_G1_greedy_with_speculation_equals_greedy_without", *SPEC_ROW_MOVE_GATES,
               f"{SPEC}::test_full_acceptance_with_the_target_as_its_own_draft",
               f"{SPEC}::test_speculative_sampling_keeps_requests_reproducible_and_alive",
               f"{SPEC}::test_G5_preempted_and_resumed_requests_are_disabled_not_crashed"),
    ),
    Mutation(
        id="ngram-index-keyed-by-row",
        description="the n-gram proposer keys its per-request index by batch row: a moved request reads its neighbour's history",
        file="vt/engine/proposers.py",
        old="        self.index: dict[str, NgramIndex] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return req_id",
        new="        self.index: dict[str, NgramIndex] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return str(batch.row_of[req_id])",
        gates=("tests/engine/test_ngram.py::test_ngram_proposals_are_the_lookup_over_the_requests_own_tokens",
               "tests/engine/test_ngram.py::test_ngram_keepers_proposals_match_a_solo_run_through_row_moves"),
    ),
    Mutation(
        id="backend-imports-pool",
        description="vt/backend.py imports vt/pool.py again (for a type), closing the import circle the layers forbid",
        file="vt/backend.py", old="from typing import Any\n",
        new="from typing import TYPE_CHECKING, Any\n\nif TYPE_CHECKING:\n    from vt.pool import DevicePool  # noqa: F401\n",
        gates=("tests/vt/test_layers.py::test_nothing_imports_in_a_circle",), expect="import circle",
    ),

    Mutation(
        id="driver-replays-over-mismatched-inputs",
        description="the driver stages inputs of any shape or dtype into a captured slot",
        file="vt/engine/graph_driver.py", old="        _check_inputs(inp)\n", new="",
        gates=tuple(f"{SEAMS}::test_G9_inputs_of_another_shape_or_dtype_are_refused_by_name[{f}]"
                    for f in ("tokens", "positions", "block_tables")),
    ),

    # ---- piecewise graphs and streams (issue 15) ------------------------------------------------
    Mutation(
        id="piecewise-bucket-pregrow-skipped",
        description="a token bucket's segments are captured with no pre-grow before them",
        file="vt/engine/graph_driver.py",
        old="        self._pregrow(bucket.demand)  # before EVERY segment's capture, unconditionally\n",
        new="        pass\n",
        gates=PIECE_SEAMS, expect="cudaErrorStreamCaptureUnsupported",
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
        gates=(f"{STREAMS}::test_breakable_graph_replays_segment_break_segment_in_that_order",
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
        file="vt/engine/readback.py", old="        b.host_wait(self.done)  # the host waits for the copy only\n",
        new="",
        gates=tuple(f"{ENGINE_STREAMS}::test_the_engine_is_race_free_and_unchanged_under_every_schedule[{p}]"
                    for p in ("in order", "side streams late", "seeded 3")), expect="a host read",
    ),
    Mutation(
        id="readback-copy-before-the-step",
        description="the copy stream does not wait for the compute stream: it may copy ids the step has not written",
        file="vt/engine/readback.py",
        old="        b.wait_event(self.stream, b.record_event(self.compute))  # the copy follows the step's work\n",
        new="",
        gates=tuple(f"{ENGINE_STREAMS}::test_the_engine_is_race_free_and_unchanged_under_every_schedule[{p}]"
                    for p in ("in order", "side streams late", "seeded 3")), expect="no wait between",
    ),
    Mutation(
        id="piecewise-prefill-unreachable",
        description="the runner prefills through the unsplit eager forward: no bucket is ever captured",
        file="vt/engine/runner.py",
        old="        logits = self.decoder.prefill(seqs, [i for i, rid in enumerate(computed) if rid in scored])\n",
        new="        logits = __import__('models.base', fromlist=['x']).prefill_logits(self.model, seqs, self.kv, "
            "[i for i, rid in enumerate(computed) if rid in scored])\n",
        gates=(f"{ENGINE_STREAMS}::test_prefills_replay_piecewise_graphs_in_the_engine",
               *(f"{ENGINE_STREAMS}::test_the_engine_is_race_free_and_unchanged_under_every_schedule[{p}]"
                 for p in ("in order", "side streams late", "seeded 3"))),
    ),
    Mutation(
        id="piecewise-pins-dropped",
        description="a captured bucket's segment temporaries are not pinned: a drain frees memory the graph writes",
        file="vt/engine/graph_driver.py", old="            self.pool.pin(graph.used)\n", new="            pass\n",
        gates=tuple(f"{PIECES}::test_P5_a_drain_never_frees_a_live_buckets_temporaries[{m}]" for m in MODELS),
        expect="freed since",
    ),
    # ---- tensor parallelism (issue 17) ----------------------------------------------------------
    Mutation(
        id="tp-warm-up-removed",
        description="the pre-grow no longer warms the collectives up: a capture is the first enqueue of its kind",
        file="vt/engine/graph_driver.py", old="            group.warm_up()\n", new="            pass\n",
        gates=tuple(f"{TP_SEAMS}::test_a_capture_that_is_the_groups_first_collective_allocates_nothing[{m}]"
                    for m in MODELS), expect="the capture allocated",
    ),
    Mutation(
        id="tp-row-parallel-reduction-skipped",
        description="the o-projection's partial sums are never all-reduced across the ranks",
        file="models/decoder.py",
        old="        self._reduce(out)\n", new="",
        gates=TP_EQUALITY,
    ),
    Mutation(
        id="tp-stale-scheduler-output",
        description="rank 0 broadcasts the first scheduler output it ever sent, every step",
        file="vt/engine/tp.py", old="        payload = pickle.dumps(so, protocol=pickle.HIGHEST_PROTOCOL)\n",
        new="        self.stale = getattr(self, 'stale', so)\n"
            "        payload = pickle.dumps(self.stale, protocol=pickle.HIGHEST_PROTOCOL)\n",
        gates=(*TP_EQUALITY,
               f"{TP}::test_a_killed_worker_fails_the_engine_within_bounded_time_by_name"),
        expect="stale",
    ),
    Mutation(
        id="tp-kv-heads-dealt-round-robin",
        description="with fewer KV heads than ranks, rank r keeps KV head r mod n (a split's dealing), not the one "
                    "its query heads read",
        file="vt/parallel.py", old="        return self.rank * num_kv_heads // self.size, 1\n",
        new="        return self.rank % num_kv_heads, 1\n",
        gates=(f"{TP}::test_tp4_replicates_the_kv_heads_and_generates_the_tokens_tp1_does",
               f"{TP}::test_the_ranks_slices_tile_every_tensor[tiny-qwen3-4]"),
    ),
    Mutation(
        id="simulator-wait-ignored",
        description="the stream simulator drops a wait_event: work after a join no longer happens after the joined work",
        file="backends/streams.py",
        old="    def wait(self, stream: Stream, clock: Clock) -> None:\n        _merge(self._clock(stream), clock)\n",
        new="    def wait(self, stream: Stream, clock: Clock) -> None:\n        pass\n",
        gates=(f"{STREAMS}::test_with_the_wait_no_schedule_races_and_every_schedule_is_right",
               *(f"{STREAMS}::test_a_breaks_side_work_joined_in_the_legal_window_never_races[{p}]"
                 for p in STREAM_POLICIES)),
        expect="a race where none may be",
    ),
    Mutation(
        id="adversary-not-adversarial",
        description="the side-streams-late schedule runs side work as soon as it can, so a missing wait reads right",
        file="backends/streams.py", old="        return runnable[0] if forced and runnable else None\n",
        new="        return runnable[0] if runnable else None\n",
        gates=(f"{STREAMS}::test_the_adversary_shows_the_stale_value_a_missing_wait_reads",),
    ),
    Mutation(
        id="cpu-synchronize-allowed-in-capture",
        description="the CPU backend lets a synchronize through an open capture (it still invalidates it)",
        file="backends/cpu.py", old="            raise CaptureUnsupported(\"synchronize during capture\")\n",
        new="            return\n",
        gates=(*(f"{CONF}::test_capture_rule[{r}-{m}-cpu]" for r in ("stream synchronize", "device synchronize")
                 for m in ("global", "thread_local", "relaxed")),
               f"{CONF}::test_segment_rule[join as a synchronize inside the next open segment-cpu]"),
    ),
    Mutation(
        id="tp-split-unchecked",
        description="a model that cannot be split over the ranks starts anyway (its heads divided with a remainder)",
        file="vt/engine/llm.py", old="        check_divisible(ckpt.config, n)\n", new="",
        gates=(f"{TP}::test_a_model_that_cannot_be_split_is_refused_by_name",
               "tests/vt/test_cli.py::test_bad_input_is_one_typed_line_and_exit_2[tp-indivisible]"),
    ),
    Mutation(
        id="tp-size-range-unchecked",
        description="tensor_parallel_size has no upper bound in the config",
        file="vt/engine/config.py", old="1 <= self.tensor_parallel_size <= 8,", new="1 <= self.tensor_parallel_size,",
        gates=(f"{TP}::test_a_model_that_cannot_be_split_is_refused_by_name",),
    ),
    Mutation(
        id="tp-death-unexplained",
        description="a step that fails because a worker died raises the raw socket error, not WorkerDied",
        file="vt/engine/llm.py", old="            raise self.workers.explain(e) from e\n", new="            raise\n",
        gates=(f"{TP}::test_a_killed_worker_fails_the_engine_within_bounded_time_by_name",),
    ),
    Mutation(
        id="serve-ignores-dead-engine",
        description="vt serve keeps running after its engine died",
        file="vt/cli.py",
        old="    server.llm.on_dead = lambda e: setattr(uv, \"should_exit\", True)  # a dead engine serves nothing: exit 1\n",
        new="",
        gates=(f"{TP_SERVE}::test_a_killed_worker_fails_the_stream_and_the_server_exits_1",
               f"{TP_SERVE}::test_a_worker_killed_while_the_server_idles_stops_it_within_seconds"),
    ),
    Mutation(
        id="idle-engine-never-checked",
        description="an idle engine never checks its health: a worker killed between requests goes unnoticed",
        file="vt/server/async_llm.py",
        old="                if not busy and not self._healthy():\n                    return\n", new="",
        gates=(f"{TP_SERVE}::test_a_worker_killed_while_the_server_idles_stops_it_within_seconds",),
    ),
    Mutation(
        id="tp-cuda-check-raw",
        description="-tp with the CUDA backend and no CuPy lets ModuleNotFoundError escape the device check",
        file="vt/engine/tp.py",
        old="    except Exception as e:  # noqa: BLE001 - no CuPy, or no driver: the CUDA backend's own refusal\n",
        new="    except ValueError as e:\n",
        gates=("tests/vt/test_cli.py::test_the_cuda_backend_without_cupy_is_one_typed_line",),
    ),
    Mutation(
        id="tp-startup-wait-unbounded",
        description="rank 0 waits for its workers' start-up with no deadline: a worker stuck loading hangs it",
        file="vt/engine/tp.py", old="            if time.monotonic() > deadline:\n", new="            if False:\n",
        gates=(f"{TP}::test_a_worker_that_never_gets_ready_ends_the_startup_wait_at_its_deadline",),
    ),
    Mutation(
        id="tp-startup-death-unnoticed",
        description="a worker that dies while loading is found only at the start-up deadline, not by its exit code",
        file="vt/engine/tp.py",
        old="        while self.store.add(READY_KEY, 0) < len(self.procs):\n            self.check_alive()\n",
        new="        while self.store.add(READY_KEY, 0) < len(self.procs):\n",
        gates=(f"{TP}::test_a_worker_that_dies_while_loading_is_named_before_the_deadline",),
    ),
    Mutation(
        id="serve-busy-port-raw",
        description="vt serve on a port in use lets the raw OSError escape instead of one typed line",
        file="vt/server/serve.py",
        old="        raise ConfigError(f\"could not listen on {host}:{port}",
        new="        raise\n        raise ConfigError(f\"could not listen on {host}:{port}",
        gates=(f"{CLI}::test_serve_on_a_port_in_use_is_one_typed_line_and_exit_2",),
    ),
    Mutation(
        id="runner-baseline-unbounded",
        description="the mutation runner waits for unmutated gates with no limit: one hang stalls CI silently",
        file="mutations/runner.py",
        old="            return run_gates(sandbox, m, timeout=self.cfg.baseline_timeout)",
        new="            return run_gates(sandbox, m, timeout=None)",
        gates=("tests/mutations/test_runner.py::test_a_hanging_baseline_stops_the_run_naming_it",),
    ),
    Mutation(
        id="runner-timeout-kills-pytest-only",
        description="a mutant's timeout kills pytest but not what its gates started (servers, ranks)",
        file="mutations/judge.py", old="        os.killpg(proc.pid, signal.SIGKILL)\n", new="        proc.kill()\n",
        gates=("tests/mutations/test_runner.py::test_a_timed_out_mutant_takes_what_it_started_with_it",),
    ),
    Mutation(
        id="collective-wait-unwatched",
        description="a gloo collective's wait never asks the watch: a killed peer can hold rank 0 for gloo's timeout",
        file="vt/parallel.py", old="        if watch is not None and polls % 64 == 0:\n            watch()\n",
        new="        if watch is not None and polls % 64 == 0:\n            pass\n",
        gates=(f"{TP}::test_a_collective_wait_ends_as_soon_as_the_watch_finds_a_dead_peer",),
    ),
    Mutation(
        id="server-nagle-on",
        description="the listening socket says protocol 0, so asyncio leaves Nagle on: each SSE frame waits ~40 ms",
        file="vt/server/serve.py", old="        sock = socket.socket(family, kind, proto)\n",
        new="        sock = socket.socket(family, kind)\n",
        gates=(f"{RULE}::test_the_servers_connections_send_each_frame_at_once",),
    ),
]
