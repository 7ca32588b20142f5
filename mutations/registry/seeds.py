"""Seeds: draws keyed by (seed, output position) (issue 13), through row moves and recompute; with min_tokens,
prompt logprobs and the graph slots' shared logits buffer.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import API, API_ORACLE, SEAMS_REPLAY, SEEDS

ENTRIES: list[Mutation] = [
    Mutation(
        id="seed-counter-keyed-by-row",
        description="a request's draw position is keyed by its batch row: neighbours and row moves change its tokens",
        file="vt/engine/worker/runner.py", old="        counter = num_tokens - ip[:, NUM_PROMPT] + b.ahead[rows] + offsets\n",
        new="        counter = num_tokens - ip[:, NUM_PROMPT] + b.ahead[rows] + offsets + 7 * rows\n",
        gates=(f"{SEEDS}::test_a_seeded_request_draws_the_same_tokens_whatever_runs_beside_it",
               f"{SEEDS}::test_the_target_really_moves_rows_and_still_draws_the_same",
               f"{SEEDS}::test_a_preempted_seeded_request_resumes_the_same_draws"),
    ),
    Mutation(
        id="seed-counter-restarts-on-recompute",
        description="a recomputed request is readmitted with all its tokens counted as prompt: its draws restart",
        file="vt/engine/core/scheduler.py", old="NewRequestData(req.id, req.all_ids, len(req.prompt_ids), blocks,",
        new="NewRequestData(req.id, req.all_ids, len(req.all_ids), blocks,",
        gates=(f"{SEEDS}::test_a_preempted_seeded_request_resumes_the_same_draws",),
    ),
    Mutation(
        id="min-tokens-bans-nothing",
        description="min_tokens is accepted but EOS and stop ids are never banned: the output may stop early",
        file="vt/engine/worker/runner.py", old="        ip[:, NUM_BANNED] *= counter < b.min_tokens[rows]",
        new="        ip[:, NUM_BANNED] *= False",
        gates=(f"{API}::test_min_tokens_holds_off_eos_and_stop_ids_then_lets_them_stop",
               f"{API}::test_min_tokens_over_only_banned_allowed_tokens_is_refused_before_it_runs"),  # its guard
    ),
    Mutation(
        id="prompt-logprobs-off-by-one",
        description="prompt logprobs score each position's own token instead of the next one",
        file="vt/engine/worker/runner.py", old="for t in toks[c.start + 1 : upto + 1]]", new="for t in toks[c.start : upto]]",
        gates=(f"{API_ORACLE}::test_prompt_logprobs_score_each_prompt_token_as_transformers_does",),
    ),

    Mutation(
        id="slot-owns-its-logits",
        description="every graph slot allocates its own [rows, vocab] logits buffer",
        file="vt/engine/worker/graph_driver.py", old="        self.logits = driver.logits.view((n, c.vocab_size))\n",
        new="        self.logits = b.empty((n, c.vocab_size), F32)\n",
        gates=(f"{SEAMS_REPLAY}::test_the_graph_slots_share_one_logits_buffer",),
    ),
]
