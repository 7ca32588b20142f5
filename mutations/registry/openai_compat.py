"""Compatibility with evaluation harnesses and OpenAI clients (issue 31): echo, the API key."""

from __future__ import annotations

from mutations.model import Mutation

ECHO = "tests/server/test_echo.py"
ROUTES = "tests/server/test_vllm_routes.py"

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
]
