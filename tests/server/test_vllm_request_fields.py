"""Request fields vLLM's OpenAI server takes that vt refused as unknown (include_stop_str_in_output,
skip_special_tokens, /tokenize's return_token_strs), and the response details it lays out as vLLM does: chat choices
carry stop_reason as completions do, and a refusal names the field the client gave (max_completion_tokens,
messages)."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.server.refusal import error_of
from vt.server.serve import running_server

ASK = [{"role": "user", "content": "Hi"}]
ROUTES = {"completions": ("/v1/completions", {"prompt": "Hello there"}),
          "chat": ("/v1/chat/completions", {"messages": ASK})}


@pytest.fixture(scope="module")
def served():
    with running_server("tiny-qwen3", max_model_len=128, num_blocks=64, max_num_seqs=4) as (server, url):
        yield server, url


def answer(url: str, route: str, **fields: Any) -> dict[str, Any]:
    """The first choice of a greedy answer on route, with its text under "text" on both endpoints."""
    path, body = ROUTES[route]
    r = httpx.post(url + path, json={**body, "temperature": 0, "max_tokens": 12, **fields}, timeout=60)
    assert r.status_code == 200, f"{route} refused {fields}: {r.text[:300]}"
    choice = r.json()["choices"][0]
    return {**choice, "text": choice["message"]["content"] if route == "chat" else choice["text"]}


def a_stop_string(url: str, route: str) -> str:
    """Two characters from the middle of the unstopped greedy answer: a stop string that is sure to be met."""
    text = answer(url, route)["text"]
    assert len(text) >= 6, f"non-vacuity: an answer long enough to hold a stop string: {text!r}"
    return text[3:5]


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_include_stop_str_in_output_keeps_the_stop_string(served, route: str) -> None:
    url = served[1]
    stop = a_stop_string(url, route)
    cut = answer(url, route, stop=[stop])
    kept = answer(url, route, stop=[stop], include_stop_str_in_output=True)
    assert cut["finish_reason"] == "stop" and not cut["text"].endswith(stop), f"non-vacuity: the stop cut it: {cut}"
    assert kept["text"] == cut["text"] + stop, f"the stop string {stop!r} was not kept: {kept['text']!r}"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_chat_and_completion_choices_carry_the_stop_reason(served, route: str) -> None:
    """vLLM's stop_reason: the stop string (or token id) that ended the choice; chat's choices lacked it."""
    url = served[1]
    stop = a_stop_string(url, route)
    choice = answer(url, route, stop=[stop])
    assert choice["finish_reason"] == "stop", f"non-vacuity: the stop string ended it: {choice}"
    assert choice.get("stop_reason") == stop, f"{route}'s choice does not say what stopped it: {choice}"


@pytest.mark.parametrize("route", sorted(ROUTES))
def test_skip_special_tokens_false_keeps_their_text(served, route: str) -> None:
    """vLLM's skip_special_tokens: true (the default) leaves special tokens out of the text, false keeps them."""
    server, url = served
    eos = sorted(server.llm.engine.eos_ids)[0]
    forced = dict(max_tokens=3, ignore_eos=True, logit_bias={str(eos): 100})
    skipped = answer(url, route, **forced)
    assert skipped["text"] == "", f"non-vacuity: three special tokens, left out by default: {skipped['text']!r}"
    kept = answer(url, route, **forced, skip_special_tokens=False)
    want = server.llm.engine.tokenizer.decode([eos] * 3, skip_special_tokens=False)
    assert want and kept["text"] == want, f"skip_special_tokens false gave {kept['text']!r}, not {want!r}"


@pytest.mark.parametrize("body", [{"prompt": "Hello world"}, {"messages": ASK}], ids=["prompt", "messages"])
def test_tokenize_returns_the_token_strings_when_asked(served, body: dict) -> None:
    server, url = served
    asked = httpx.post(url + "/tokenize", json={**body, "return_token_strs": True}, timeout=30)
    assert asked.status_code == 200, asked.text[:300]
    got = asked.json()
    want = [server.llm.engine.tokenizer.id_to_token(t) for t in got["tokens"]]
    assert got["count"] > 1, f"non-vacuity: tokens to name: {got}"
    assert got["token_strs"] == want, f"token_strs {got['token_strs']} are not the tokens' strings {want}"
    plain = httpx.post(url + "/tokenize", json=body, timeout=30).json()
    assert plain["token_strs"] is None, "vLLM's default: no strings unless asked"


def test_a_too_large_max_completion_tokens_is_refused_under_its_own_name(served) -> None:
    url = served[1]
    r = httpx.post(url + "/v1/chat/completions", json={"messages": ASK, "max_completion_tokens": 1000}, timeout=30)
    err = error_of(r, 400)
    assert err.get("param") == "max_completion_tokens" and "max_completion_tokens=1000" in err.get("message", ""), err
    older = httpx.post(url + "/v1/chat/completions", json={"messages": ASK, "max_tokens": 1000}, timeout=30)
    assert error_of(older, 400).get("param") == "max_tokens", "non-vacuity: the older name is named as given"


def test_a_too_long_chat_prompt_names_the_messages(served) -> None:
    url = served[1]
    long = [{"role": "user", "content": "hello " * 200}]
    err = error_of(httpx.post(url + "/v1/chat/completions", json={"messages": long}, timeout=30), 400)
    assert err.get("param") == "messages" and "max_model_len" in err.get("message", ""), err
    text = httpx.post(url + "/v1/completions", json={"prompt": "hello " * 200}, timeout=30)
    assert error_of(text, 400).get("param") == "prompt", "non-vacuity: a completion's prompt is still the prompt"
