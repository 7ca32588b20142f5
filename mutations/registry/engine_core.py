"""Engine core (issue 11): KV capacity with a draft, the update step, the n-gram index, the import layers of vt/,
the driver's input checks.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import CAP, SEAMS_REPLAY, SPEC, SPEC_ROW_MOVE_GATES, per_model

ENTRIES: list[Mutation] = [
    Mutation(
        id="kv-draft-memory-uncounted",
        description="the start-up capacity check counts the target's KV blocks only, not the draft's in the same pool",
        file="vt/engine/config.py", old="        groups = self.num_kv_groups\n", new="        groups = 1\n",
        gates=(f"{CAP}::test_startup_counts_the_drafts_kv_with_the_targets",), expect="DID NOT RAISE",
    ),
    Mutation(
        id="update-keeps-a-finished-request",
        description="the engine's update step finishes a request without handing it to the scheduler: its blocks stay taken",
        file="vt/engine/front/llm_engine.py", old="        self.scheduler.finish(r)  # its blocks, in every KV group, are free before the step ends\n",
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
        file="vt/engine/front/llm_engine.py", old="                    if r.status is Status.FINISHED:\n                        break\n", new="",
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
        file="vt/engine/spec_decode/proposers.py",
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
        file="vt/engine/worker/graph_driver.py", old="        _check_inputs(inp)\n", new="",
        gates=tuple(f"{SEAMS_REPLAY}::test_G9_inputs_of_another_shape_or_dtype_are_refused_by_name[{f}]"
                    for f in ("tokens", "positions", "block_tables")),
    ),
]

SPLIT = "tests/engine/test_detokenize_split.py"
ENTRIES += [
    Mutation(
        id="front-drops-the-text-it-detokenized",
        description="the engine process's front asks the core for no text, then keeps the core's empty text "
                    "instead of decoding the ids: answers lose their text",
        file="vt/engine/core/proc.py",
        old="                s.text = s.detok.text if reason is None or stop is not None else s.detok.flush()",
        new="                s.text = s.text[:keep] + add",
        gates=(f"{SPLIT}::test_the_front_makes_the_text_the_core_did_not_send",
               "tests/server/test_engine_process.py::test_the_engine_process_answers_as_the_engine_thread_does"),
    ),
    Mutation(
        id="front-asks-the-core-for-every-text",
        description="the front never takes detokenization off the core: every step decodes every request there",
        file="vt/engine/core/proc.py",
        old="        here = self.tokenizer is not None and params.detokenize and not params.stop\n",
        new="        here = False\n",
        gates=(f"{SPLIT}::test_the_core_is_asked_for_text_only_where_stop_strings_need_it",),
    ),
    Mutation(
        id="detokenize-false-ignored",
        description="detokenize=False is accepted and the engine decodes the text anyway",
        file="vt/engine/front/llm_engine.py", old="resolved.skip_special_tokens) if resolved.detokenize else NO_TEXT)",
        new="resolved.skip_special_tokens) if True else NO_TEXT)",
        gates=(f"{SPLIT}::test_detokenize_false_gives_the_same_tokens_and_no_text",),
    ),
    Mutation(
        id="front-reader-dies-quietly",
        description="the front's reader ends on an exception of its own without failing anything: streams in flight "
                    "wait forever and the server keeps running on a front that reads nothing",
        file="vt/engine/core/proc.py",
        old="        except Exception as e:  # noqa: BLE001 - this front's own failure: said, never a reader that dies quietly\n"
            "            traceback.print_exc()\n"
            "            self._resets.put(None)\n"
            "            o.die(EngineDeadError(f\"the front failed on the engine's output: {type(e).__name__}: {e}\"))",
        new="        except Exception:  # noqa: BLE001\n            return",
        gates=(f"{SPLIT}::test_a_front_that_fails_on_the_engines_output_says_so_instead_of_a_silent_reader",),
    ),
    Mutation(
        id="detok-invalid-prefix-fatal",
        description="a byte-fallback output whose window DecodeStream refuses raises out of the detokenizer: one "
                    "request's odd bytes stop the engine",
        file="vt/engine/front/detokenizer.py",
        old="                if \"invalid prefix\" not in str(e).lower():\n                    raise\n",
        new="                raise\n",
        gates=("tests/engine/test_detokenizer.py::"
               "test_a_byte_fallback_output_that_unmakes_a_released_character_goes_on",),
    ),
    Mutation(
        id="detokenize-false-beside-stop-strings-accepted",
        description="detokenize=False is accepted beside stop strings, which are then never found (no text)",
        file="vt/engine/sample/params.py",
        old="        if not isinstance(self.detokenize, bool) or (self.stop and not self.detokenize):",
        new="        if not isinstance(self.detokenize, bool):",
        gates=(f"{SPLIT}::test_detokenize_false_gives_the_same_tokens_and_no_text",),
        expect="DID NOT RAISE",
    ),
]
