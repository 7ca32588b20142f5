"""Compatibility with evaluation harnesses and OpenAI clients (issue 31): echo, the API key."""

from __future__ import annotations

from mutations.model import Mutation

ECHO = "tests/server/test_echo.py"
ROUTES = "tests/server/test_vllm_routes.py"
LM_EVAL = "tests/server/test_lm_eval.py"

ENTRIES: list[Mutation] = [
    Mutation(
        id="echo-drops-the-prompt",
        description="echo without logprobs returns the completion alone, not the prompt before it",
        file="vt/server/app.py", old="            return prompt_text + text, None\n",
        new="            return text, None\n",
        gates=(f"{ECHO}::test_echo_puts_the_prompt_before_the_completion",),
    ),
    Mutation(
        id="api-key-not-checked",
        description="the /v1 routes serve whoever asks, whatever key they send",
        file="vt/server/app.py", old='        if request.headers.get("authorization") != want:\n', new="        if False:\n",
        gates=(f"{ROUTES}::test_the_v1_routes_want_the_key_and_the_others_do_not",),
    ),
    Mutation(
        id="echo-drops-the-prompt-logprobs",
        description="echo with logprobs returns the prompt's text but not its tokens' logprobs: lm-eval's "
                    "loglikelihoods all read 0",
        file="vt/server/protocol.py", old="    if echo and logprobs is not None:", new="    if False:",
        gates=(f"{ECHO}::test_the_prompt_tokens_logprobs_equal_transformers",
               f"{ECHO}::test_echo_with_max_tokens_0_answers_the_prompt_alone_scored",
               f"{LM_EVAL}::test_lm_eval_through_vt_serve_equals_its_hf_model"),
    ),
    Mutation(
        id="chat-template-flag-ignored",
        description="--chat-template is read and checked, then the checkpoint's template is used anyway",
        file="vt/engine/front/llm_engine.py", old="        if cfg.chat_template is not None:\n", new="        if False:\n",
        gates=("tests/server/test_chat_template.py::test_the_server_renders_chat_with_the_given_template",),
    ),
    Mutation(
        id="logprob-ranks-off-by-one",
        description="the offline API's Logprob objects rank the likeliest token 0, not 1 as vLLM's do",
        file="vt/engine/core/request.py", old="Logprob(v, r + 1 if r < n else None, decode(t))",
        new="Logprob(v, r if r < n else None, decode(t))",
        gates=("tests/engine/test_tokenizer_api.py::test_offline_logprobs_are_vllms_logprob_objects",),
    ),
]
