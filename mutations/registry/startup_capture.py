"""Graphs captured at start-up (issue 26): every decode width, every prefill bucket, the draft's."""

from __future__ import annotations

from mutations.model import Mutation

STARTUP = "tests/engine/test_startup_capture.py"
NO_WAIT = f"{STARTUP}::test_no_request_waits_for_a_capture_and_the_tokens_are_first_uses"
COVERS = f"{STARTUP}::test_startup_capture_covers_the_widest_table_and_the_largest_prefill_bucket"
TP2 = "tests/engine/test_startup_capture_tp.py::test_tp2_ranks_capture_at_startup_in_step_and_generate_the_tp1_tokens"
KINDS = ("plain", "ngram", "draft")

ENTRIES: list[Mutation] = [
    Mutation(
        id="startup-capture-skips-the-widest-table",
        description="the start-up's width ladder stops one bucket short of max_model_len's table: a long "
                    "request waits for a capture",
        file="vt/engine/worker/graph_driver.py",
        old="    return [1 << i for i in range(max_width.bit_length()) if min_width <= 1 << i <= max_width]\n",
        new="    return [1 << i for i in range(max_width.bit_length()) if min_width <= 1 << i < max_width]\n",
        gates=(*(f"{NO_WAIT}[{k}]" for k in KINDS), COVERS, TP2),
        expect="captured on a request's time",
    ),
    Mutation(
        id="startup-capture-skips-the-largest-prefill-bucket",
        description="the start-up captures every prefill bucket but the step budget's: a long prompt's step "
                    "waits for a capture",
        file="vt/engine/worker/graph_driver.py",
        old="        buckets = self.token_ladder if prefill else []\n",
        new="        buckets = self.token_ladder[:-1] if prefill else []\n",
        gates=(*(f"{NO_WAIT}[{k}]" for k in KINDS), COVERS),
    ),
    Mutation(
        id="startup-capture-forgets-the-draft",
        description="the start-up captures the target's graphs but not the draft model's",
        file="vt/engine/worker/runner.py",
        old="        n += draft.capture_all(((1, True),)) if draft is not None else 0\n",
        new="",
        gates=(f"{NO_WAIT}[draft]",),
        expect="captured on a request's time",
    ),
]
