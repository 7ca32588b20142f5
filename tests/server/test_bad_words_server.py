"""vLLM's `bad_words` request field over the OpenAI API, read by the real `openai` client (`extra_body`): the server
generates what the offline API generates with the same words banned (tests/engine/test_bad_words.py shows what
a ban is), in completions and chat completions; a value that is not a list of words is a 400 naming it."""

from __future__ import annotations

import pytest

from vt import LLM, SamplingParams
from vt.server.serve import running_server

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module

MODEL = "tiny-qwen3"
PROMPT = "Hello world"


def test_the_server_bans_the_words_the_offline_api_bans_and_refuses_a_bad_value() -> None:
    offline = LLM(MODEL, backend="cpu", max_model_len=256, num_blocks=64)
    base = offline.generate(PROMPT, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)
    word = offline.get_tokenizer().decode(base[0].outputs[0].token_ids[2:4])  # two tokens of its greedy output
    sp = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True, bad_words=[word])
    want = offline.generate(PROMPT, sp, use_tqdm=False)[0].outputs[0].text
    assert want != base[0].outputs[0].text, "non-vacuity: the ban changes the greedy output"
    with running_server(MODEL, max_model_len=256, num_blocks=64) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        got = client.completions.create(model=MODEL, prompt=PROMPT, max_tokens=16, temperature=0,
                                        extra_body={"ignore_eos": True, "bad_words": [word]})
        assert got.choices[0].text == want, "completions: the offline API's tokens under the same ban"
        messages = [{"role": "user", "content": PROMPT}]
        plain = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
        chat_base = offline.chat(messages, plain, use_tqdm=False)[0].outputs[0]
        chat_word = offline.get_tokenizer().decode(chat_base.token_ids[2:4])  # two tokens of the chat's own output
        offline_chat = offline.chat(messages, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True,
                                                             bad_words=[chat_word]), use_tqdm=False)[0].outputs[0]
        assert offline_chat.text != chat_base.text, "non-vacuity: the ban changes the chat's greedy output"
        chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=16, temperature=0,
                                              extra_body={"ignore_eos": True, "bad_words": [chat_word]})
        assert chat.choices[0].message.content == offline_chat.text, "chat completions: the offline chat's tokens"
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, extra_body={"bad_words": [""]})
        assert e.value.body["param"] == "bad_words" and "list of words" in e.value.body["message"], e.value.body


def test_an_engine_refusal_of_bad_words_names_the_field() -> None:
    """The engine's own refusals (here: a word of two tokens under speculative decoding) are a 400 whose param is
    bad_words, not the prompt."""
    with running_server(MODEL, max_model_len=256, num_blocks=64, speculative_model="[ngram]",
                        num_speculative_tokens=2) as (_, url):
        client = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        with pytest.raises(openai.BadRequestError) as e:
            client.completions.create(model=MODEL, prompt="Hello", max_tokens=2,
                                      extra_body={"bad_words": ["x capital"]})
        assert e.value.body["param"] == "bad_words" and "speculative decoding" in e.value.body["message"], e.value.body
        ok = client.completions.create(model=MODEL, prompt="Hello", max_tokens=2, extra_body={"bad_words": ["x"]})
        assert ok.usage.completion_tokens == 2, "non-vacuity: a one-token word is served with speculation"
