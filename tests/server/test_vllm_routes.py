"""vLLM's routes beside the OpenAI API (/tokenize, /detokenize, /version) and the API key, driven by httpx and
the real `openai` client."""

from __future__ import annotations

import httpx
import pytest

from vt.errors import ConfigError
from vt.server.serve import make_server, running_server

openai = pytest.importorskip("openai")

MODEL = "tiny-qwen3"
KEY = "sk-vt-test"


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, max_model_len=128, num_blocks=64, max_num_seqs=4, api_key=KEY) as (server, url):
        yield server, url


def test_tokenize_and_detokenize_round_trip(served) -> None:
    server, url = served
    tok = httpx.post(url + "/tokenize", json={"model": MODEL, "prompt": "Hello world, the quick fox"}, timeout=30)
    body = tok.json()
    want = server.llm.engine.tokenizer.encode("Hello world, the quick fox", add_special_tokens=True).ids
    assert tok.status_code == 200 and body["tokens"] == list(want) and body["count"] == len(want) > 2
    assert body["max_model_len"] == 128
    back = httpx.post(url + "/detokenize", json={"tokens": body["tokens"]}, timeout=30).json()
    assert back["prompt"] == server.llm.engine.tokenizer.decode(want, skip_special_tokens=False)
    assert "quick fox" in back["prompt"], "non-vacuous: the text came back"


def test_tokenize_renders_chat_messages_with_the_template(served) -> None:
    _, url = served
    msgs = [{"role": "user", "content": "Hi there"}]
    body = httpx.post(url + "/tokenize", json={"messages": msgs}, timeout=30).json()
    text = httpx.post(url + "/detokenize", json={"tokens": body["tokens"]}, timeout=30).json()["prompt"]
    assert "Hi there" in text and text != "Hi there", "the template wrapped the message"


@pytest.mark.parametrize("body", [{"tokens": [1, -3]}, {"tokens": "abc"}, {"tokens": [10**9]}, {"tokens": [True]}])
def test_detokenize_refuses_what_is_not_token_ids(served, body: dict) -> None:
    r = httpx.post(served[1] + "/detokenize", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "tokens", r.text


@pytest.mark.parametrize("body", [{"messages": "hi"}, {"messages": [{"content": "no role"}]}, {"prompt": 5},
                                  {"prompt": "x", "add_special_tokens": "yes"}])
def test_tokenize_refuses_bad_input_with_a_400(served, body: dict) -> None:
    r = httpx.post(served[1] + "/tokenize", json=body, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["message"], r.text


def test_version(served) -> None:
    r = httpx.get(served[1] + "/version", timeout=30)
    assert r.status_code == 200 and isinstance(r.json()["version"], str) and r.json()["version"]


def test_the_v1_routes_want_the_key_and_the_others_do_not(served) -> None:
    _, url = served
    wrong = openai.OpenAI(base_url=url + "/v1", api_key="not-it", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as e:
        wrong.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
    assert isinstance(e.value.body, dict) and e.value.body.get("code") == "invalid_api_key", e.value.body
    assert httpx.get(url + "/v1/models", timeout=30).status_code == 401, "no key at all: refused"
    right = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
    assert right.completions.create(model=MODEL, prompt="Hi", max_tokens=2).choices, "the key lets it through"
    assert httpx.get(url + "/health", timeout=30).status_code == 200, "health stays open, as vLLM's"


def test_an_empty_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="empty key"):
        make_server(MODEL, api_key=" ")
