"""vLLM's return_token_ids over the real `openai` client: each choice carries the ids it generated (a stream's frames,
the ids new since the last frame, adding up to the whole answer's, with none lost while text is held back), and the
prompt's ids come back once (completions: on each choice's first frame; chat: on the response, or the stream's first
chunk). The ids are the offline API's for the same prompt."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams
from vt.server.serve import running_server

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module

MODEL = "tiny-qwen3"
PROMPT = "The engine schedules requests in steps"
MESSAGES = [{"role": "user", "content": "Hello world"}]
IDS = {"return_token_ids": True}


@pytest.fixture(scope="module")
def client():
    with running_server(MODEL, max_model_len=256, num_blocks=64) as (_, url):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


@pytest.fixture(scope="module")
def offline() -> LLM:
    return LLM(MODEL, backend="cpu", max_model_len=256, num_blocks=64)


def extra(obj) -> dict:
    return obj.model_extra or {}


def test_a_completion_carries_the_offline_apis_ids_and_its_stream_adds_up_to_them(client, offline) -> None:
    # a stop string holds text back while tokens arrive: the frames' ids must not be lost with the held text
    kw = {"model": MODEL, "prompt": PROMPT, "max_tokens": 24, "temperature": 0, "stop": ["zzz"], "seed": 0}
    whole = client.completions.create(**kw, extra_body=IDS).choices[0]
    out = offline.generate([PROMPT], SamplingParams(temperature=0, max_tokens=24, stop=["zzz"]))[0]
    assert extra(whole)["token_ids"] == out.outputs[0].token_ids, (extra(whole)["token_ids"], out.outputs[0])
    assert extra(whole)["prompt_token_ids"] == out.prompt_token_ids
    frames = [c.choices[0] for c in client.completions.create(**kw, stream=True, extra_body=IDS) if c.choices]
    # a slow reader may get steps merged into one frame (the stream sends the latest); two frames are enough
    assert len(frames) >= 2, "non-vacuity: the answer came in several frames"
    assert [t for f in frames for t in extra(f)["token_ids"]] == extra(whole)["token_ids"]
    assert extra(frames[0]).get("prompt_token_ids") == out.prompt_token_ids, extra(frames[0])
    assert all("prompt_token_ids" not in extra(f) for f in frames[1:]), "the prompt's ids come once"
    bare = client.completions.create(**kw).choices[0]
    assert "token_ids" not in extra(bare) and "prompt_token_ids" not in extra(bare), "only when asked for"


def test_a_chat_answer_carries_its_ids_and_the_prompts_on_the_response(client, offline) -> None:
    kw = {"model": MODEL, "messages": MESSAGES, "max_tokens": 10, "temperature": 0}
    r = client.chat.completions.create(**kw, extra_body=IDS)  # type: ignore[call-overload]
    out = offline.chat(MESSAGES, SamplingParams(temperature=0, max_tokens=10))[0]
    assert extra(r.choices[0])["token_ids"] == out.outputs[0].token_ids
    assert extra(r)["prompt_token_ids"] == out.prompt_token_ids
    chunks = list(client.chat.completions.create(**kw, stream=True, extra_body=IDS))  # type: ignore[call-overload]
    assert extra(chunks[0]).get("prompt_token_ids") == out.prompt_token_ids, extra(chunks[0])
    assert all("prompt_token_ids" not in extra(c) for c in chunks[1:])
    assert [t for c in chunks[1:] for ch in c.choices for t in extra(ch).get("token_ids", [])] == \
        out.outputs[0].token_ids


def test_return_token_ids_must_be_a_boolean(client) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=2, extra_body={"return_token_ids": "yes"})
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == "return_token_ids", err


def test_return_tokens_as_token_ids_names_each_logprob_token_by_its_id_and_the_request_overrides_the_flag(
        client) -> None:
    kw = {"model": MODEL, "prompt": PROMPT, "max_tokens": 6, "temperature": 0, "logprobs": 2, "echo": True}
    r = client.completions.create(**kw, extra_body={**IDS, "return_tokens_as_token_ids": True}).choices[0]
    ids = [*extra(r)["prompt_token_ids"], *extra(r)["token_ids"]]
    assert r.logprobs is not None and r.logprobs.tokens == [f"token_id:{t}" for t in ids], r.logprobs.tokens
    assert all(k.startswith("token_id:") for d in r.logprobs.top_logprobs[1:] for k in d)
    plain = client.completions.create(**kw).choices[0]
    assert plain.logprobs is not None and r.logprobs.text_offset == plain.logprobs.text_offset, \
        "the offsets still index the text"
    assert plain.logprobs.tokens and not any(t.startswith("token_id:") for t in plain.logprobs.tokens), \
        "non-vacuity: by default tokens are text"
    chat = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4,  # type: ignore[arg-type]
                                          temperature=0, logprobs=True, top_logprobs=1,
                                          extra_body={**IDS, "return_tokens_as_token_ids": True}).choices[0]
    assert chat.logprobs is not None and [c.token for c in chat.logprobs.content or []] == [
        f"token_id:{t}" for t in extra(chat)["token_ids"]]


def test_the_servers_flag_makes_ids_the_default_and_a_request_may_ask_for_text() -> None:
    with running_server(MODEL, max_model_len=256, num_blocks=64, return_tokens_as_token_ids=True) as (_, url):
        c = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        kw = {"model": MODEL, "prompt": PROMPT, "max_tokens": 3, "temperature": 0, "logprobs": 1}
        by_flag = c.completions.create(**kw).choices[0].logprobs
        asked = c.completions.create(**kw, extra_body={"return_tokens_as_token_ids": False}).choices[0].logprobs
    assert by_flag is not None and all(t.startswith("token_id:") for t in by_flag.tokens), by_flag
    assert asked is not None and not any(t.startswith("token_id:") for t in asked.tokens), asked
