"""The test ids every area uses: the gate test files, the model and schedule names they are parametrized by,
and the helpers and gate tuples several areas share. Nothing here is a mutation.
"""

from __future__ import annotations

POOL = "tests/vt/test_pool.py"
CPU = "tests/backends/test_cpu_backend.py"
CONF = "tests/vt/test_conformance.py"
SCOPE = "tests/vt/test_capture_scope.py"
SEAMS = "tests/seams/test_decode_seams.py"  # the capture guarantees (G1, G8); the driver's others beside it:
SEAMS_REPLAY = "tests/seams/test_decode_seams_replay.py"  # G2, G3, G5, G9, the shared logits buffer
SEAMS_WIDTH = "tests/seams/test_decode_seams_width.py"  # G4
SEAMS_PINS = "tests/seams/test_decode_seams_pins.py"  # G7
SEAMS_ENGINE = "tests/seams/test_decode_seams_engine.py"
ORACLE = "tests/models/test_oracle.py"
CAP = "tests/engine/test_capacity.py"
GEN = "tests/engine/test_generation.py"
BATCH = "tests/engine/test_input_batch.py"
CUDA = "tests/backends/test_cuda_backend.py"
MODEL = "tests/backends/test_cupy_model.py"
SPEC = "tests/engine/test_spec_decode.py"
SPEC_REFUSALS = "tests/engine/test_spec_decode_refusals.py"
MODELS = ("tiny-qwen3", "tiny-qwen3-moe")
ARCH = "tests/models/test_architectures.py"
ARCH_ERR = "tests/models/test_checkpoint_errors.py"
ARCH_NAMES = ("qwen3-yarn", "qwen3-moe", "qwen2", "llama3")
DTYPES = "tests/vt/test_dtypes.py"
GUAR = "tests/engine/test_guarantees.py"
CLI = "tests/vt/test_cli.py"
CLI_RUNS = "tests/vt/test_cli_runs.py"
CLI_CACHE_DIR = "tests/vt/test_cli_cache_dir.py"
CLI_LADDERS = "tests/vt/test_cli_ladders.py"
API = "tests/engine/test_offline_api.py"
API_ORACLE = "tests/engine/test_offline_api_oracle.py"  # chat() and logprobs against transformers
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


def FILC(test: str, *ids: str) -> tuple[str, ...]:
    return tuple(f"{FIL}::{test}[{i}]" for i in ids)


def bf16_vs_hf(*archs: str) -> tuple[str, ...]:
    return tuple(f"{ARCH}::test_dtype_bfloat16_computes_as_transformers_bf16_does[{a}]" for a in archs)


def g1() -> tuple[str, ...]:
    """The G1 seam cases (zero allocations in capture)."""
    return tuple(f"{SEAMS}::test_G1_capture_allocates_nothing_after_drain[{m}-B{b}]"
                 for m in MODELS for b in (1, 3, 8, 13))


def g8() -> tuple[str, ...]:
    """The speculative seam cases (target verify q=5 and draft q=1 keys)."""
    return tuple(f"{SEAMS}::test_G8_spec_keys_capture_nothing[{m}-q{q}-B{b}]"
                 for m in (*MODELS, "tiny-qwen3-draft") for q in (1, 5) for b in (1, 3, 8))


def per_model(test: str, suffix: str = "") -> tuple[str, ...]:
    return tuple(f"{test}[{m}{suffix}]" for m in MODELS)


# Every seam case whose guarantee is false by design on the bypass lane (skipped there).
SEAM_GUARANTEES = (
    *g1(),
    *per_model(f"{SEAMS}::test_G1_without_the_pregrow_the_capture_dies_as_on_the_gpu", "-cpu"),
    *per_model(f"{SEAMS_REPLAY}::test_G2_replayed_logits_equal_eager_logits_bit_for_bit"),
    *per_model(f"{SEAMS_WIDTH}::test_G4_graph_is_rebuilt_not_reused_after_the_block_table_width_changes"),
    *per_model(f"{SEAMS_ENGINE}::test_G6_engine_tokens_identical_with_graphs_on_and_off"),
    *per_model(f"{SEAMS_PINS}::test_G7_drain_never_frees_a_live_graphs_temporaries"),
    *per_model(f"{SEAMS_PINS}::test_G7_retiring_one_of_two_graphs_keeps_the_pins_the_other_holds"),
    f"{SEAMS_ENGINE}::test_G6_vt_generate_identical_under_VT_CUDAGRAPH_0[pool-lane]",
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
    "test_G5_draft_entries_never_outnumber_live_requests_after_a_step",
    "test_G5_preempted_and_resumed_requests_are_disabled_not_crashed",
    "test_ladder_reports_the_acceptance_rate",
    "test_G6_speculative_sampling_draws_from_the_target_distribution",
)) + (f"{SPEC_REFUSALS}::test_G4_a_broken_position_invariant_raises",)

STREAMS = "tests/backends/test_stream_order.py"
ENGINE_STREAMS = "tests/engine/test_engine_streams.py"
TP = "tests/engine/test_tensor_parallel.py"
TP4 = "tests/engine/test_tp4.py"
TP_SHARDS = "tests/engine/test_tp_shards.py"
TP_REFUSALS = "tests/engine/test_tp_refusals.py"  # apart from the shards' checkpoints
TP_DEATH = "tests/engine/test_tp_death.py"
TP_SEAMS = "tests/seams/test_tp_seams.py"
TP_SERVE = "tests/server/test_tp_serve.py"
TP_SERVE_IDLE = "tests/server/test_tp_serve_idle.py"  # apart: the idle check's mutant runs one TP server
TP_MODELS = ("tiny-qwen3", "tiny-qwen3-moe", "qwen2", "llama3", "qwen2-mqa")
TP_EQUALITY = (*(f"{TP}::test_tp2_generates_the_tokens_tp1_does[{n}]" for n in TP_MODELS),
               f"{TP4}::test_tp4_replicates_the_kv_heads_and_generates_the_tokens_tp1_does")
PIECES = "tests/seams/test_piecewise_seams.py"
PIECE_STEPS = ("one-5", "two-40", "chunk-at-32")
PIECE_SEAMS = tuple(f"{PIECES}::test_P1_a_buckets_capture_allocates_nothing_after_drain[{m}-{s}]"
                    for m in MODELS for s in PIECE_STEPS)
STREAM_POLICIES = ("in order", "side streams late", "seeded 0", "seeded 1")
