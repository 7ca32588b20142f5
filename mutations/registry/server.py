"""The server rule (issue 14): no byte before the first result, errors after a 200, [DONE] after an error frame,
aborts on disconnect, usage over n samples.
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import OAI, RULE

ENTRIES: list[Mutation] = [
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
]
