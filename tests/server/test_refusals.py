"""Fields vt does not implement are refused by name, never silently ignored, and bodies past the size or
nesting limits get a 4xx with OpenAI's error body, never a 500: driven by the real `openai` client (each
refusal is its BadRequestError) and by raw bodies."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import pytest

from tests.server.refusal import error_of
from vt.server.serve import running_server

openai = pytest.importorskip("openai")

MODEL = "tiny-qwen3"
MSGS = [{"role": "user", "content": "Hi"}]


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, max_model_len=128, num_blocks=64, max_num_seqs=4) as (server, url):
        yield server, url


@pytest.fixture(scope="module")
def client(served):
    return openai.OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0)


# "temprature": a typo, not a field at all; "user": OpenAI's end-user id is a string (a dict was taken in silence)
# "priority": vLLM's, which a first-come-first-served scheduler (vt's) takes only at 0
COMPLETION_REFUSALS = {"suffix": "and then", "best_of": 3, "temprature": 0.5, "user": {"a": [1, 2]}, "priority": 1,
                       "tools": [{"type": "function", "function": {"name": "f"}}]}  # chat's alone
CHAT_REFUSALS = {"tool_choice": {"type": "function", "function": {"name": "f"}},  # without tools: none to call
                 "response_format": {"type": "structural_tag"}, "prompt": "Hi", "echo": True, "user": 5, "priority": -1}


@pytest.mark.parametrize("field", list(COMPLETION_REFUSALS))
def test_a_completion_field_vt_would_ignore_is_a_400_naming_it(client, field: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2,
                                  extra_body={field: COMPLETION_REFUSALS[field]})
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == field and field in err.get("message", ""), err


@pytest.mark.parametrize("field", list(CHAT_REFUSALS))
def test_a_chat_field_vt_would_ignore_is_a_400_naming_it(client, field: str) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2,  # type: ignore[arg-type]
                                       extra_body={field: CHAT_REFUSALS[field]})
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == field and field in err.get("message", ""), err


def test_the_values_that_mean_not_used_are_accepted(client) -> None:
    """echo false, best_of equal to n, an empty logit_bias, a text response format, priority 0: what vt does
    anyway."""
    out = client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, echo=False, best_of=2, n=2,
                                    logit_bias={}, user="someone", extra_body={"priority": 0})
    assert len(out.choices) == 2, "non-vacuity: the request ran"
    chat = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2,  # type: ignore[arg-type]
                                          response_format={"type": "text"})
    assert chat.choices[0].message is not None


def detokenize(url: str, tokens: list[int]) -> str:
    return httpx.post(url + "/detokenize", json={"model": MODEL, "tokens": tokens}, timeout=30).json()["prompt"]


def test_logit_bias_reaches_the_sampler_on_both_endpoints(served, client) -> None:
    """OpenAI's logit_bias (string keys) on completions and chat: +100 on a token makes greedy emit it every
    step; vLLM's allowed_token_ids bounds the draws."""
    url = served[1]
    plain = client.completions.create(model=MODEL, prompt=[5, 6, 7], max_tokens=4, temperature=0).choices[0].text
    tok = 300
    biased = client.completions.create(model=MODEL, prompt=[5, 6, 7], max_tokens=4, temperature=0,
                                       logit_bias={str(tok): 100}).choices[0].text
    assert biased == detokenize(url, [tok] * 4) != plain, (biased, plain)
    chat = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=3, temperature=0,  # type: ignore[arg-type]
                                          logit_bias={str(tok): 100})
    assert chat.choices[0].message.content == detokenize(url, [tok] * 3)
    allowed = [300, 301]
    texts = {detokenize(url, [a, b, c]) for a in allowed for b in allowed for c in allowed}
    drawn = client.completions.create(model=MODEL, prompt=[5, 6, 7], max_tokens=3, temperature=1.0, seed=1, n=4,
                                      extra_body={"allowed_token_ids": allowed, "ignore_eos": True})
    assert all(c.text in texts for c in drawn.choices), [c.text for c in drawn.choices]


@pytest.mark.parametrize("bias", [{"5": 101}, {"five": 1}, {"5": "x"}, {str(10**7): 1.0}, {"5": 1, "05": 2}],
                         ids=["out-of-range", "not-a-token-id", "not-a-number", "outside-the-vocabulary",
                              "one-token-twice"])
def test_a_bad_logit_bias_is_a_400_naming_it(client, bias: dict) -> None:
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, logit_bias=bias)  # type: ignore[arg-type]
    err = e.value.body
    assert isinstance(err, dict) and "logit_bias" in err.get("message", ""), err


def test_a_logit_bias_key_past_pythons_digit_limit_is_a_400_naming_it(client) -> None:
    """A key of 4,300+ digits is decimal text that int() refuses with a ValueError (Python's limit on converting a
    string to an int): it was a 500 with a traceback. No token id is that long: a 400 naming logit_bias."""
    with pytest.raises(openai.APIStatusError) as e:
        client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, logit_bias={"9" * 5000: 1})
    err = e.value.body
    assert e.value.status_code == 400, (e.value.status_code, err)
    assert isinstance(err, dict) and err.get("param") == "logit_bias" and "digits" in err.get("message", ""), err
    fine = client.completions.create(model=MODEL, prompt="Hi", max_tokens=2, logit_bias={"9" * 2: 1})
    assert fine.choices, "non-vacuity: a key of a few digits is served"


@pytest.mark.parametrize("depth", [200, 100_000], ids=["deep", "200-kb-of-brackets"])
def test_a_body_nested_past_the_limit_is_a_400_never_a_500(served, depth: int) -> None:
    url = served[1]
    raw = f'{{"model": "{MODEL}", "prompt": {"[" * depth}{"]" * depth}}}'
    r = httpx.post(url + "/v1/completions", content=raw, headers={"content-type": "application/json"}, timeout=60)
    assert r.status_code == 400, (r.status_code, r.text[:200])
    assert "nests" in r.json()["error"]["message"] and r.json()["error"]["type"] == "invalid_request_error"
    shallow = f'{{"model": "{MODEL}", "prompt": [[5, 6]], "max_tokens": 2}}'
    ok = httpx.post(url + "/v1/completions", content=shallow, headers={"content-type": "application/json"}, timeout=60)
    assert ok.status_code == 200, "non-vacuity: a body inside the limits is served"
    assert httpx.get(url + "/health", timeout=30).status_code == 200


@pytest.mark.parametrize("route,body", [
    ("/v1/completions", '{"prompt": "Hi", "max_tokens": %s}'),
    ("/v1/chat/completions", '{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": %s}'),
    ("/detokenize", '{"tokens": [5, %s]}'),
], ids=["completions", "chat", "detokenize"])
def test_an_integer_past_pythons_digit_limit_is_a_400_never_a_500(served, route: str, body: str) -> None:
    """json.loads raises ValueError (not JSONDecodeError) for an integer literal of 4,300+ digits."""
    url = served[1]
    headers = {"content-type": "application/json"}
    r = httpx.post(url + route, content=body % ("9" * 5000), headers=headers, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["type"] == "invalid_request_error", (r.status_code, r.text[:300])
    assert "digits" in r.json()["error"]["message"]
    fine = httpx.post(url + route, content=body % "2", headers=headers, timeout=60)
    assert fine.status_code == 200, "non-vacuity: the same body with a small integer is served"


@pytest.mark.parametrize("route,field,body", [
    ("/v1/completions", "stop", '{"prompt": "Hi", "max_tokens": 2, "stop": ["ok", "\\ud800"]}'),
    ("/v1/completions", "prompt", '{"prompt": "Hi \\udfff", "max_tokens": 2}'),
    ("/v1/chat/completions", "messages", '{"messages": [{"role": "user", "content": "\\ud800"}], "max_tokens": 2}'),
    ("/tokenize", "prompt", '{"prompt": "a \\ud800"}'),
], ids=["stop", "prompt", "chat-content", "tokenize"])
def test_a_lone_surrogate_is_a_400_naming_its_field_and_leaves_nothing_behind(served, route: str, field: str,
                                                                               body: str) -> None:
    """JSON's "\\ud800" escape parses into a Python str that no tokenizer or pipe can encode: refused with the
    field it sits in, before the engine sees it, and no request state stays behind."""
    server, url = served
    r = httpx.post(url + route, content=body, headers={"content-type": "application/json"}, timeout=60)
    err = error_of(r, 400)
    assert err.get("param") == field and "surrogate" in err.get("message", ""), err
    assert server.llm._streams == {} and server.llm._adds == {}, "no stream or pending add of it left behind"
    fine = httpx.post(url + route, content=body.replace("\\ud800", "x").replace("\\udfff", "x"), timeout=60,
                      headers={"content-type": "application/json"})
    assert fine.status_code == 200, "non-vacuity: the same body with text in its place is served"


REFUSED_SHAPES = {  # (route, body, the param the 400 names, text its message holds)
    "stream-option-unknown": ("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream": True,
                                                  "stream_options": {"include_usage": True, "foo": True}},
                              "stream_options", "stream_options.foo: is not a stream option"),
    "stream-option-not-bool": ("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream": True,
                                                   "stream_options": {"include_usage": "no"}},
                               "stream_options", "expected a boolean"),
    "max-tokens-ill-typed": ("/v1/chat/completions", {"messages": MSGS, "max_tokens": "abc",
                                                      "max_completion_tokens": 3}, "max_tokens", "expected int"),
    "max-tokens-conflict": ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 2, "max_completion_tokens": 3},
                            "max_tokens", "give one of them"),
    "message-unknown-key": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi", "speaker": "bob"}],
                                                     "max_tokens": 2}, "messages", "messages[0].speaker"),
    "message-name-not-text": ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi", "name": 5}],
                                                       "max_tokens": 2}, "messages", "messages[0].name"),
    "message-tool-calls": ("/v1/chat/completions", {"messages": [*MSGS, {"role": "assistant", "content": "",
                                                                         "tool_calls": []}], "max_tokens": 2},
                           "messages", "messages[1].tool_calls"),
    "min-tokens-past-the-default": ("/v1/completions", {"prompt": "Hi", "min_tokens": 50}, "min_tokens",
                                    "the default when max_tokens is not given"),
    "logit-bias-outside-the-vocabulary": ("/v1/completions", {"prompt": "Hi", "max_tokens": 2,
                                                              "logit_bias": {"999999999": 5}},
                                          "logit_bias", "outside the vocabulary"),
    "allowed-ids-outside-the-vocabulary": ("/v1/completions", {"prompt": "Hi", "max_tokens": 2,
                                                               "allowed_token_ids": [5, 999999]},
                                           "allowed_token_ids", "outside the vocabulary"),
    "stop-ids-outside-the-vocabulary": ("/v1/completions", {"prompt": "Hi", "max_tokens": 2,
                                                            "stop_token_ids": [999999]},
                                        "stop_token_ids", "outside the vocabulary"),
}


@pytest.mark.parametrize("case", sorted(REFUSED_SHAPES))
def test_a_value_vt_would_misread_or_ignore_is_a_400_naming_its_field(served, case: str) -> None:
    """Values that were served wrong or silently (an unknown stream option, `"no"` read as true, max_tokens lost
    beside max_completion_tokens, a message's unknown key or tool calls dropped, a name not text, min_tokens capped
    by the default max_tokens) or refused under the wrong param (ids outside the vocabulary blamed on the prompt)."""
    route, body, param, says = REFUSED_SHAPES[case]
    r = httpx.post(served[1] + route, json=body, timeout=60)
    err = error_of(r, 400)
    assert err.get("param") == param and says in err.get("message", ""), (r.status_code, r.text[:300])


def test_the_same_shapes_within_the_rules_are_served(served) -> None:
    """Non-vacuity for the refusals above: each field at a value vt reads."""
    url = served[1]
    ok = [("/v1/completions", {"prompt": "Hi", "max_tokens": 2, "stream": True,
                               "stream_options": {"include_usage": False, "continuous_usage_stats": True}}),
          ("/v1/chat/completions", {"messages": MSGS, "max_tokens": 3, "max_completion_tokens": 3}),
          ("/v1/completions", {"prompt": "Hi", "min_tokens": 4, "logit_bias": {"5": 1}, "allowed_token_ids": [5, 6],
                               "stop_token_ids": [7]})]
    for route, body in ok:
        assert httpx.post(url + route, json=body, timeout=60).status_code == 200, (route, body)


class TokenizerSpy:
    """The engine's tokenizer, noting each text it encodes: (which call, the text's length, the thread)."""

    def __init__(self, real: Any) -> None:
        self.real, self.calls = real, []  # type: ignore[var-annotated]

    def _note(self, how: str, texts: list[str]) -> None:
        self.calls += [(how, len(t), threading.current_thread().name) for t in texts]

    def encode(self, text: str, *args: Any, **kw: Any) -> Any:
        self._note("encode", [text])
        return self.real.encode(text, *args, **kw)

    def encode_batch(self, texts: list[str], *args: Any, **kw: Any) -> Any:
        self._note("encode_batch", texts)
        return self.real.encode_batch(texts, *args, **kw)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)


LONG_PROMPT_ROUTES = {
    "completions": ("/v1/completions", lambda text: {"prompt": text, "max_tokens": 1}),
    "chat": ("/v1/chat/completions", lambda text: {"messages": [{"role": "user", "content": text}], "max_tokens": 1}),
    "tokenize": ("/tokenize", lambda text: {"prompt": text}),
    "tokenize-messages": ("/tokenize", lambda text: {"messages": [{"role": "user", "content": text}]}),
}


@pytest.fixture(scope="module")
def served_by_a_core_process():
    """The engine core in its own process: the front's tokenizer then serves the server's text alone (an engine on a
    thread would detokenize with it too, which takes the real tokenizer only)."""
    with running_server(MODEL, engine_process=True, max_model_len=128, num_blocks=64, max_num_seqs=4) as served:
        yield served


@pytest.mark.parametrize("route", list(LONG_PROMPT_ROUTES))
def test_a_long_prompt_is_tokenized_off_the_event_loop_with_the_gil_released(served_by_a_core_process,
                                                                             monkeypatch: pytest.MonkeyPatch,
                                                                             route: str) -> None:
    """Tokenizing a prompt of megabytes takes seconds. tokenizers' encode holds the GIL all along, so even on a worker
    thread it froze the event loop (every stream, /health) for seconds; its encode_batch releases it. On every
    route a long prompt's text is encoded through the call that releases the GIL, on a worker thread; a short one's
    stays on the loop."""
    from vt.server.app import OFF_LOOP_CHARS

    server, url = served_by_a_core_process
    spy = TokenizerSpy(server.llm.engine.tokenizer)
    monkeypatch.setattr(server.llm.engine, "tokenizer", spy)
    path, body = LONG_PROMPT_ROUTES[route]
    long = "the quick brown fox " * (OFF_LOOP_CHARS // 20 + 1)
    r = httpx.post(url + path, json=body(long), timeout=60)
    assert r.status_code == 200 or "max_model_len" in r.text, r.text[:300]  # long past the context: refused after
    assert httpx.post(url + path, json=body("Hi"), timeout=60).status_code == 200
    loop = "vt-uvicorn"  # the event loop's thread (running_server)
    longs = [c for c in spy.calls if c[1] >= len(long)]
    shorts = [c for c in spy.calls if c[1] < len(long)]
    assert longs and shorts, f"non-vacuity: both prompts were tokenized: {spy.calls}"
    assert all(how == "encode_batch" for how, _, _ in longs), f"the long prompt went through encode, holding the " \
                                                              f"GIL: {longs}"
    assert all(thread != loop for _, _, thread in longs), f"the long prompt was tokenized on the loop: {longs}"
    assert all(thread == loop for _, _, thread in shorts), f"a short prompt left the loop: {shorts}"


@pytest.mark.parametrize("route,body,param", [
    ("/tokenize", {"prompt": "Hi", "add_bos": True}, "add_bos"),
    ("/tokenize", {"messages": MSGS, "add_generation_prompt": "no"}, "add_generation_prompt"),
    ("/detokenize", {"tokens": [5, 6], "skip_special_tokens": True}, "skip_special_tokens"),
    ("/tokenize", {"messages": MSGS, "prompt": "Hi"}, "prompt"),
    ("/tokenize", {"prompt": "Hi", "add_generation_prompt": False}, "add_generation_prompt"),
], ids=["tokenize-unknown", "tokenize-flag-a-string", "detokenize-unknown", "tokenize-a-prompt-beside-messages",
        "tokenize-a-chat-flag-beside-a-prompt"])
def test_the_tokenizer_routes_refuse_what_they_do_not_read(served, route: str, body: dict, param: str) -> None:
    """/tokenize reads a prompt or chat messages (vLLM's TokenizeCompletionRequest or TokenizeChatRequest), never
    both: a prompt beside messages was dropped, and add_generation_prompt beside a prompt meant nothing."""
    url = served[1]
    r = httpx.post(url + route, json=body, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == param, (r.status_code, r.text[:300])
    fine = {k: v for k, v in body.items() if k != param}
    assert httpx.post(url + route, json=fine, timeout=60).status_code == 200, "non-vacuity: without it, served"


def test_chats_top_logprobs_out_of_range_names_itself(client) -> None:
    """Chat's count of alternatives is top_logprobs (its logprobs is a bool): the refusal's message and param both
    name it (the message said "logprobs" where the param said "top_logprobs")."""
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2,  # type: ignore[arg-type]
                                       logprobs=True, top_logprobs=100)
    err = e.value.body
    assert isinstance(err, dict) and err.get("param") == "top_logprobs", err
    assert err.get("message", "").startswith("top_logprobs: must be in [0, "), err


def answered(call: Any) -> tuple[int, Any]:
    """The HTTP status the openai client met calling call(), and the error body (200 and None: no error)."""
    try:
        call()
    except openai.APIStatusError as e:
        return e.status_code, e.body
    return 200, None


NOT_JSON = "Unsupported Media Type: Only 'application/json' is allowed"  # vLLM's validate_json_request


@pytest.mark.parametrize("route", ["completions", "chat"])
def test_a_body_not_sent_as_json_is_a_400_on_the_openai_routes(client, route: str) -> None:
    """vLLM refuses a JSON route's body whose Content-Type is not application/json (a 400 since its
    RequestValidationError, 415 before); vt read any body as JSON whatever it said it was."""
    create = client.completions.create if route == "completions" else client.chat.completions.create
    kw: dict = {"prompt": "Hi"} if route == "completions" else {"messages": MSGS}
    status, err = answered(lambda: create(model=MODEL, max_tokens=2, extra_headers={"Content-Type": "text/plain"},
                                          **kw))
    assert status == 400 and isinstance(err, dict) and NOT_JSON in err.get("message", ""), (status, err)
    assert err.get("type") == "invalid_request_error", err
    fine = create(model=MODEL, max_tokens=2, extra_headers={"Content-Type": "application/json; charset=utf-8"}, **kw)
    assert fine.choices, "non-vacuity: the same body, said to be JSON (with a charset), is served"


@pytest.mark.parametrize("route,body", [("/tokenize", {"prompt": "Hi"}), ("/detokenize", {"tokens": [5, 6]})])
def test_a_body_not_sent_as_json_is_a_400_on_the_tokenizer_routes(served, route: str, body: dict) -> None:
    url = served[1]
    import json

    for ctype in ("text/plain", None):  # a wrong type, and none at all
        headers = {"content-type": ctype} if ctype else {}
        r = httpx.post(url + route, content=json.dumps(body), headers=headers, timeout=60)
        assert r.status_code == 400 and NOT_JSON in r.json()["error"]["message"], (ctype, r.status_code, r.text[:300])
    assert httpx.post(url + route, json=body, timeout=60).status_code == 200, "non-vacuity: as JSON, served"


def test_min_tokens_past_what_the_context_leaves_is_a_400_when_max_tokens_is_not_given(client) -> None:
    """vLLM caps the default max_tokens to what max_model_len leaves after the prompt before it validates
    (get_max_tokens), so min_tokens past that room is a 400 naming min_tokens, as with an explicit max_tokens; vt
    answered 200 with fewer tokens than min_tokens promised."""
    prompt = [5] * 124  # max_model_len 128: room for 4 tokens, under the default max_tokens of 16
    status, err = answered(lambda: client.completions.create(model=MODEL, prompt=prompt, extra_body={
        "min_tokens": 10, "ignore_eos": True}))
    assert status == 400 and isinstance(err, dict) and err.get("param") == "min_tokens", (status, err)
    fits = client.completions.create(model=MODEL, prompt=prompt, extra_body={"min_tokens": 4, "ignore_eos": True})
    assert fits.usage.completion_tokens == 4, "non-vacuity: min_tokens the room holds is served, all of it"


@pytest.mark.parametrize("n", [0, 2])
def test_chat_prompt_logprobs_on_a_stream_is_a_400_never_dropped(client, n: int) -> None:
    """A chat stream has no place for prompt_logprobs (vLLM returns them in the whole response only, and refuses
    them with stream=True: "`prompt_logprobs` are not available when `stream=True`."); vt dropped them in silence.
    vLLM lets 0 through to be dropped; vt refuses it too, since it would be ignored."""
    status, err = answered(lambda: list(client.chat.completions.create(
        model=MODEL, messages=MSGS, max_tokens=2, stream=True, extra_body={"prompt_logprobs": n})))
    assert status == 400 and isinstance(err, dict) and err.get("param") == "prompt_logprobs", (status, err)
    assert "not available when `stream=True`" in err.get("message", ""), err
    whole = client.chat.completions.create(model=MODEL, messages=MSGS, max_tokens=2,  # type: ignore[arg-type]
                                           extra_body={"prompt_logprobs": n})
    assert whole.model_extra and whole.model_extra["prompt_logprobs"][1], "non-vacuity: served whole, with them"


@pytest.mark.parametrize("penalty", ["repetition_penalty", "frequency_penalty"])
def test_a_penalty_under_speculative_decoding_is_refused_naming_the_penalty(penalty: str) -> None:
    """Penalties are not supported with speculative decoding: the 400 named the prompt as its param."""
    with running_server(MODEL, max_model_len=128, num_blocks=64, max_num_seqs=4, speculative_model="[ngram]",
                        num_speculative_tokens=3) as (_, url):
        ngram = openai.OpenAI(base_url=url + "/v1", api_key="unused", max_retries=0)
        status, err = answered(lambda: ngram.completions.create(model=MODEL, prompt="Hi", max_tokens=2,
                                                                extra_body={penalty: 1.2}))
        fine = ngram.completions.create(model=MODEL, prompt="Hi", max_tokens=2)
    assert status == 400 and isinstance(err, dict) and err.get("param") == penalty, (status, err)
    assert "speculative decoding" in err.get("message", ""), err
    assert fine.choices, "non-vacuity: without a penalty, served"


PARTS = [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]


def test_chat_text_parts_are_joined_with_newlines_as_vllm_joins_them(served, client) -> None:
    """A message's text parts are one text, joined with "\\n" (vLLM's chat_utils, the "string" content format); vt
    joined them with nothing ("Hellothere")."""
    url = served[1]

    def tokens(content: object) -> list[int]:
        r = httpx.post(url + "/tokenize", json={"messages": [{"role": "user", "content": content}]}, timeout=60)
        assert r.status_code == 200, r.text
        return r.json()["tokens"]

    assert tokens(PARTS) == tokens("Hello\nthere"), "the parts, joined with a newline"
    assert tokens("Hello\nthere") != tokens("Hellothere"), "non-vacuity: the joiner shows in the tokens"
    chat = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PARTS}],  # type: ignore
                                          max_tokens=1)
    assert chat.usage.prompt_tokens == len(tokens(PARTS)), "chat renders the parts as /tokenize does"


@pytest.mark.parametrize("part,where", [
    ({"type": "text", "text": "Hi", "cache_control": {"type": "ephemeral"}}, "messages[0].content[0].cache_control"),
    ({"type": "image_url", "image_url": {"url": "http://x/a.png"}}, "messages[0].content[0]"),
], ids=["unknown-key-in-a-text-part", "image-part"])
def test_a_content_part_vt_would_not_read_is_a_400_naming_where_it_sits(client, part: dict, where: str) -> None:
    """Unknown keys inside a content part are refused by name, as unknown keys of a message already are."""
    status, err = answered(lambda: client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": [part]}], max_tokens=1))  # type: ignore[list-item]
    assert status == 400 and isinstance(err, dict) and err.get("param") == "messages", (status, err)
    assert err.get("message", "").startswith(where), err
    ok = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": PARTS}],  # type: ignore
                                        max_tokens=1)
    assert ok.choices, "non-vacuity: text parts alone are served"
