"""vLLM's `cache_salt` request field over the OpenAI API, read by the real `openai` client (`extra_body`): a prompt
is served cached prefix blocks only under the salt it was cached with, in a server in this process and from `vt
serve` (its engine in a process of its own: the salt crosses the wire). A salt that is not a non-empty string is a
400 naming the field, with vLLM's words."""

from __future__ import annotations

import pytest

from tests.server.processes import detailed_server

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module

MODEL = "tiny-qwen3"
PROMPT = list(range(20, 68))  # three whole blocks of 16


@pytest.mark.parametrize("how", ["in-process", "vt-serve"])
def test_a_prompt_is_served_its_cached_prefix_only_under_its_own_salt(how: str) -> None:
    with detailed_server(MODEL, how) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)

        def cached(salt: str | None, chat: bool = False) -> int:
            extra = {} if salt is None else {"cache_salt": salt}
            if chat:
                out = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x " * 40}],
                                                     max_tokens=2, extra_body=extra)
            else:
                out = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, extra_body=extra)
            return out.usage.prompt_tokens_details.cached_tokens

        first = [cached(s) for s in ("tenant-a", "tenant-b", None)]
        assert first == [0, 0, 0], f"each salt (and none) computes the prompt itself: {first}"
        again = [cached(s) for s in ("tenant-a", "tenant-b", None)]
        assert again == [len(PROMPT) - 1] * 3, f"sent again under its own salt, each is served its prefix: {again}"
        chats = [cached(s, chat=True) for s in ("tenant-a", "tenant-b", "tenant-a")]
        assert chats[:2] == [0, 0] and chats[2] > 16, f"chat completions take the salt too: {chats}"


@pytest.mark.parametrize("how", ["in-process", "vt-serve"])
@pytest.mark.parametrize("salt", ["", 7])
def test_a_salt_that_is_not_a_non_empty_string_is_a_400_naming_the_field(salt: object, how: str) -> None:
    """The engine refuses it (every front's one check), and the server names the field, through either engine."""
    with detailed_server(MODEL, how) as url:
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, extra_body={"cache_salt": salt})
        error = e.value.body
        assert error["param"] == "cache_salt" and "must be a non-empty string" in error["message"], error
        ok = client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, extra_body={"cache_salt": "s"})
        assert ok.usage.completion_tokens == 2, "non-vacuity: a good salt is served"
