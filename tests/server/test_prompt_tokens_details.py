"""OpenAI's usage.prompt_tokens_details.cached_tokens (vLLM's --enable-prompt-tokens-details): the prompt tokens
the prefix cache served a request, read by the real `openai` client, from a server in this process and from `vt
serve --enable-prompt-tokens-details` (its engine in a process of its own); absent unless the server is asked."""

from __future__ import annotations

import pytest

from tests.server.processes import detailed_server
from vt.server.serve import running_server

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module

MODEL = "tiny-qwen3"
PROMPT = list(range(20, 68))  # three whole blocks of 16


def served_hit(prompt_len: int) -> int:
    """What a prompt of prompt_len tokens, all cached, is served: its whole blocks, all but its last token (which
    it computes for its logits)."""
    return min(prompt_len // 16 * 16, prompt_len - 1)


@pytest.mark.parametrize("how", ["in-process", "vt-serve"])
def test_usage_counts_the_prompt_tokens_the_prefix_cache_served(how: str) -> None:
    with detailed_server(MODEL, how) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        first, again, longer = (client.completions.create(model=MODEL, prompt=p, max_tokens=2)
                                for p in (PROMPT, PROMPT, PROMPT + [5, 6, 7]))
        assert None not in [o.usage.prompt_tokens_details for o in (first, again, longer)], (
            "asked for, usage carries prompt_tokens_details")
        assert first.usage.prompt_tokens_details.cached_tokens == 0, "non-vacuity: nothing was cached yet"
        assert again.usage.prompt_tokens_details.cached_tokens == len(PROMPT) - 1, (
            "sent again, the prompt is served all but its last token")
        assert longer.usage.prompt_tokens_details.cached_tokens == len(PROMPT), "its three whole blocks"
        chat = [{"role": "user", "content": "Hello there, how are you today?"}]
        usage = []
        for _ in range(2):
            stream = client.chat.completions.create(model=MODEL, messages=chat, max_tokens=2, stream=True,
                                                    stream_options={"include_usage": True})
            usage += [c.usage for c in stream if c.usage is not None]
        assert [u.prompt_tokens_details.cached_tokens for u in usage] == [0, served_hit(usage[1].prompt_tokens)], (
            f"a streamed chat's usage chunk, sent twice: {usage}")
        assert usage[1].prompt_tokens > 16, "non-vacuity: the chat prompt holds a whole block"


def test_without_the_flag_usage_carries_no_prompt_tokens_details() -> None:
    with running_server(MODEL, max_model_len=256, num_blocks=64) as (server, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        outs = [client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2) for _ in range(2)]
        assert [o.usage.prompt_tokens_details for o in outs] == [None, None]
        assert server.llm.stats()["prefix_hits"] == len(PROMPT) - 1, "non-vacuity: the second was a hit"
