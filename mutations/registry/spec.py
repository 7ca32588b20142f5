"""Speculative decoding (issue 7): draft contexts keyed by request, the position invariant, pruning, proposals,
rejection sampling, the draft's position limit; with the mutation sandbox's untracked files, attention over
hidden slots and the pool's per-thread recordings, which landed with it.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import (
    POOL,
    SPEC,
    SPEC_LOSSLESS,
    SPEC_PROPOSAL_GATES,
    SPEC_REFUSALS,
    SPEC_ROW_MOVE_GATES,
)

ENTRIES: list[Mutation] = [
    Mutation(
        id="sandbox-drops-untracked-files",
        description="the mutation sandbox copies only files in the git index, losing new modules",
        file="mutations/sandbox.py", old='"--cached", "--others", "--exclude-standard"', new='"--cached"',
        gates=("tests/mutations/test_runner_scope.py::test_the_sandbox_takes_the_tree_as_it_is_on_disk_minus_ignored_files",),
        expect="an untracked, not ignored file belongs in the sandbox",
    ),
    Mutation(
        id="spec-context-keyed-by-row",
        description="draft contexts are keyed by batch row: a moved request lands on its neighbour's context",
        file="vt/engine/spec_decode/proposers.py",
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
        file="vt/engine/spec_decode/proposers.py",
        old="        if ctx is not None and ctx.length + ctx.owed != r.position:\n",
        new="        if ctx is not None and ctx.length + ctx.owed != r.position:\n            return None\n",
        gates=(f"{SPEC_REFUSALS}::test_G4_a_broken_position_invariant_raises",),
    ),
    Mutation(
        id="spec-row-keyed-and-reset-context-stands",
        description="row-keyed contexts, and a missing one silently reset at the row's position: no crash, "
                    "lossless tokens, the keeper keeps proposing, but from the wrong context",
        file="vt/engine/spec_decode/proposers.py",
        old='        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return req_id  # never the batch row: rows move under condense, swap and reorder\n\n    def add(self, batch: InputBatch, reqs: list[NewRequestData]) -> None:\n        fresh = [r for r in reqs if r.can_speculate]\n        self.disabled.update(r.req_id for r in reqs if not r.can_speculate)\n        # a prefix cached through its last token leaves the draft nothing to prefill: both groups hold its KV\n        prefills = [r for r in fresh if r.num_cached < len(r.token_ids)]\n        if prefills:  # the draft prefills what the target prefilled, into its own group\'s blocks (through its\n            # driver\'s piecewise graphs), behind the prefix both groups\' cached blocks hold; it keeps the KV and\n            # never reads the logits back\n            self.driver.pool.release(self.driver.prefill([(r.token_ids[r.num_cached:], batch.blocks(r.req_id, DRAFT),\n                                                           r.num_cached) for r in prefills]))\n        for r in fresh:\n            self.contexts[self._key(batch, r.req_id)] = DraftContext(r.req_id, length=len(r.token_ids))\n\n    def drop(self, req_ids: Iterable[str]) -> None:\n        for rid in req_ids:\n            self.contexts.pop(rid, None)\n            self.disabled.discard(rid)\n\n    def _context(self, batch: InputBatch, r: SpecRequest) -> DraftContext | None:\n        """The request\'s context, with the position invariant checked: never silenced."""\n        ctx = self.contexts.get(self._key(batch, r.req_id))\n        if ctx is not None and ctx.length + ctx.owed != r.position:\n            raise DraftPositionMismatch(f"request {r.req_id}: draft context holds {ctx.length} positions "\n                                        f"(+{ctx.owed} owed) but its row is at position {r.position}")\n        return ctx\n',
        new='        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return str(batch.row_of[req_id])\n\n    def add(self, batch: InputBatch, reqs: list[NewRequestData]) -> None:\n        fresh = [r for r in reqs if r.can_speculate]\n        self.disabled.update(r.req_id for r in reqs if not r.can_speculate)\n        # a prefix cached through its last token leaves the draft nothing to prefill: both groups hold its KV\n        prefills = [r for r in fresh if r.num_cached < len(r.token_ids)]\n        if prefills:  # the draft prefills what the target prefilled, into its own group\'s blocks (through its\n            # driver\'s piecewise graphs), behind the prefix both groups\' cached blocks hold; it keeps the KV and\n            # never reads the logits back\n            self.driver.pool.release(self.driver.prefill([(r.token_ids[r.num_cached:], batch.blocks(r.req_id, DRAFT),\n                                                           r.num_cached) for r in prefills]))\n        for r in fresh:\n            self.contexts[self._key(batch, r.req_id)] = DraftContext(r.req_id, length=len(r.token_ids))\n\n    def drop(self, req_ids: Iterable[str]) -> None:\n        for rid in req_ids:\n            self.contexts.pop(rid, None)\n            self.disabled.discard(rid)\n\n    def _context(self, batch: InputBatch, r: SpecRequest) -> DraftContext | None:\n        """The request\'s context, with the position invariant checked: never silenced."""\n        ctx = self.contexts.get(self._key(batch, r.req_id))\n        if ctx is None and r.req_id not in self.disabled:\n            ctx = self.contexts[self._key(batch, r.req_id)] = DraftContext(r.req_id, length=r.position)\n        if ctx is not None and ctx.length + ctx.owed != r.position:\n            raise DraftPositionMismatch(f"request {r.req_id}: draft context holds {ctx.length} positions "\n                                        f"(+{ctx.owed} owed) but its row is at position {r.position}")\n        return ctx\n',
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
        file="vt/engine/spec_decode/proposers.py", old="            self.contexts.pop(rid, None)\n            self.disabled.discard(rid)\n",
        new="            pass\n",
        gates=(f"{SPEC}::test_G5_draft_entries_never_outnumber_live_requests_after_a_step",
               f"{SPEC}::test_G5_preempted_and_resumed_requests_are_disabled_not_crashed"),
    ),
    Mutation(
        id="spec-propose-call-deleted",
        description="the draft never proposes: every step is a plain decode in a verify-shaped batch",
        file="vt/engine/worker/runner.py", old="        proposals = self.proposer.propose(self.batch, asks)",
        new="        proposals = {}",
        gates=SPEC_PROPOSAL_GATES,
    ),
    Mutation(
        id="spec-sampling-always-accepts",
        description="verification accepts a draft token the target did not sample: the output follows the draft",
        file="vt/engine/sample/rejection.py", old="        if d != t:\n", new="        if False:\n",
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
        file="vt/engine/sample/rejection.py", old="            return [*out, t]\n", new="            return [*out, d]\n",
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
        file="backends/kernels/decode_attention.py",
        old="        v = np.where(valid[:, :, None, None], widen_host(vf[slots]), 0)  # 0 * NaN is NaN: never let one in\n",
        new="        v = widen_host(vf[slots])\n",
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
        description="a draft whose max_position_embeddings is below max_model_len is accepted at start-up",
        file="vt/engine/front/llm_engine.py",
        old="        if self.cfg.max_model_len > limit:",
        new="        if False:",
        gates=(f"{SPEC_REFUSALS}::test_a_draft_too_short_for_max_model_len_is_refused_at_startup",),
    ),
]
