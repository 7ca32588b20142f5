"""Guarantees no test guarded (issue 19): start-up capacity, side-stream allocations in a capture, graph pins,
draft state per request, requeue order, speculative lookahead, a checkpoint's zeros, slot staging.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import CONF, GUAR, SEAMS_PINS, SEAMS_WIDTH, per_model

ENTRIES: list[Mutation] = [
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
        gates=per_model(f"{SEAMS_PINS}::test_G7_retiring_one_of_two_graphs_keeps_the_pins_the_other_holds"),
        expect="the surviving graph replayed over blocks the drain freed",
    ),
    Mutation(
        id="spec-draft-keyed-by-prompt",
        description="draft contexts are keyed by the prompt's tokens: two identical prompts share one context",
        file="vt/engine/spec_decode/proposers.py",
        old="        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return req_id",
        new="        self.contexts: dict[str, DraftContext] = {}\n\n    def _key(self, batch: InputBatch, req_id: str) -> str:\n        return str(batch.tokens(req_id)[:4].tolist())",
        gates=(f"{GUAR}::test_identical_prompts_keep_their_own_draft_state",),
        expect="two identical prompts shared draft state",
    ),
    Mutation(
        id="preempted-requeued-at-the-back",
        description="a preempted request goes to the back of the queue, behind later arrivals",
        file="vt/engine/core/scheduler.py", old="        self.waiting.appendleft(req)", new="        self.waiting.append(req)",
        gates=(f"{GUAR}::test_a_preempted_request_goes_back_to_the_front_of_the_queue",),
        expect="waits ahead of the later arrival",
    ),
    Mutation(
        id="spec-lookahead-unclamped",
        description="speculative lookahead is not clamped at max_model_len: the last steps overrun the block table",
        file="vt/engine/core/scheduler.py",
        old="return k if k and req.can_speculate and req.num_tokens + k <= self.cfg.max_model_len else 0",
        new="return k if k and req.can_speculate else 0",
        gates=tuple(f"{GUAR}::test_speculation_near_max_model_len_finishes_with_length[{s}]" for s in ("draft", "ngram")),
        expect="broke an engine invariant",
    ),
    Mutation(
        id="checkpoint-zero-read-as-unset",
        description="a generation_config.json value of 0 is read as unset: temperature 0 samples at 1.0",
        file="vt/engine/sample/params.py",
        old="picked[name] = explicit if explicit is not None else gen.get(name, neutral)",
        new="picked[name] = explicit if explicit is not None else (gen.get(name) or neutral)",
        gates=(f"{GUAR}::test_a_checkpoint_temperature_of_zero_is_greedy",),
    ),
    Mutation(
        id="driver-stages-first-block-only",
        description="the slot's staging copies only each row's first block: graphed and eager steps agree, both wrong",
        file="vt/engine/worker/graph_driver.py", old="        tables[:B, :W] = inp.block_tables",
        new="        tables[:B, :1] = inp.block_tables[:, :1]",
        gates=per_model(f"{SEAMS_WIDTH}::test_G4_graph_is_rebuilt_not_reused_after_the_block_table_width_changes"),
        expect="disagrees with an independent forward",
    ),
]
