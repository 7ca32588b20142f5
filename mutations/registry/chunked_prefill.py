"""Chunked prefill (issue 15): the token budget, decodes before prefill chunks, prompt logprobs on recompute;
with two typed errors of `vt bench serve` and `vt serve` (an unreachable server, an impossible port).
"""

from __future__ import annotations

from mutations.model import Mutation
from mutations.registry.gates import CHUNK, CLI, RULE

ENTRIES: list[Mutation] = [
    Mutation(
        id="chunk-budget-off-by-one",
        description="a prefill chunk takes one token more than the step's budget leaves",
        file="vt/engine/core/scheduler.py", old="        return 0 if self.num_spec_tokens else max(budget, 0)",
        new="        return 0 if self.num_spec_tokens else max(budget + 1, 0)",
        gates=tuple(f"{CHUNK}::test_chunked_runs_generate_what_the_unchunked_run_does[{b}]" for b in (16, 33, 64)),
    ),
    Mutation(
        id="prefill-chunks-before-decodes",
        description="prefill chunks take the budget before the decodes: a long prompt starves decoding requests",
        file="vt/engine/core/scheduler.py",
        old="        budget = self.cfg.max_num_batched_tokens - self._decode(out)\n        budget = self._continue_prefills(out, budget)\n",
        new="        budget = self._continue_prefills(out, self.cfg.max_num_batched_tokens)\n        if budget > 0:\n            budget -= self._decode(out)\n",
        gates=(f"{CHUNK}::test_a_mixed_step_is_one_forward_and_one_sampler_launch",
               f"{CHUNK}::test_decodes_go_first_and_are_never_starved_by_a_long_prompt",
               *(f"{CHUNK}::test_chunked_runs_generate_what_the_unchunked_run_does[{b}]" for b in (16, 33, 64)),
               f"{CHUNK}::test_prompt_logprobs_come_chunk_by_chunk",
               f"{CHUNK}::test_a_preempted_chunked_prefill_recomputes_to_the_same_tokens_and_prompt_logprobs"),
    ),

    Mutation(
        id="prompt-logprobs-appended-on-recompute",
        description="a request preempted mid-prefill appends its rescored prompt logprobs instead of replacing them",
        file="vt/engine/front/llm_engine.py", old="r.prompt_logprobs = [*(r.prompt_logprobs or [None])[:first], *scored]",
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
]
