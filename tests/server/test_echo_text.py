"""echo on completions, the text: the prompt comes before the completion, once, streamed or not. Apart from
test_echo.py, whose logprobs are checked against transformers (its import and forward passes): this test's
mutant needs neither."""

from __future__ import annotations

import pytest

from vt.server.serve import running_server

openai = pytest.importorskip("openai")

MODEL = "tiny-qwen3"


@pytest.fixture(scope="module")
def client():
    with running_server(MODEL, max_model_len=128, num_blocks=64, max_num_seqs=4) as (_, url):
        yield openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)


def test_echo_puts_the_prompt_before_the_completion(client) -> None:
    plain = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0)
    echoed = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0, echo=True)
    assert echoed.choices[0].text == "Once upon a time" + plain.choices[0].text
    assert plain.choices[0].text, "non-vacuous: the completion is not empty"
    streamed = "".join(ch.choices[0].text for ch in client.completions.create(
        model=MODEL, prompt="Once upon a time", max_tokens=4, temperature=0, echo=True, stream=True) if ch.choices)
    assert streamed == echoed.choices[0].text, "streamed, the prompt comes once, first"
