"""The OpenAI-compatible server, driven by the real `openai` client (sync and async, streaming and not),
httpx and a raw SSE parser, over a real uvicorn server on loopback."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest

from vt.server.serve import running_server

openai = pytest.importorskip("openai")  # a dev dependency; a GPU image without it skips this CPU-lane module
AsyncOpenAI, OpenAI = openai.AsyncOpenAI, openai.OpenAI

MODEL = "tiny-qwen3"


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, max_model_len=256, num_blocks=256, max_num_seqs=16) as (server, url):
        yield server, url


@pytest.fixture(scope="module")
def client(served):
    return OpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0)


def sse(lines: list[str]) -> list[dict | str]:
    """Raw SSE frames: JSON objects, and the final '[DONE]'."""
    out: list[dict | str] = []
    for line in lines:
        if not line:
            continue
        assert line.startswith("data: "), f"not an SSE data line: {line!r}"
        data = line[6:]
        out.append(data if data == "[DONE]" else json.loads(data))
    return out


def stream_raw(url: str, path: str, body: dict) -> tuple[int, list[dict | str]]:
    with httpx.stream("POST", url + path, json=body, timeout=60) as r:
        lines = list(r.iter_lines())
        return r.status_code, sse(lines) if r.status_code == 200 else [json.loads("".join(lines))]


def test_models_lists_the_served_model(client) -> None:
    assert [m.id for m in client.models.list().data] == [MODEL]


def test_a_completion_is_the_offline_apis_completion(client) -> None:
    from vt import LLM, SamplingParams

    got = client.completions.create(model=MODEL, prompt="Hello there", max_tokens=12, temperature=0)
    want = LLM(MODEL, max_model_len=256, num_blocks=64).generate("Hello there", SamplingParams(temperature=0,
                                                                                               max_tokens=12))[0]
    assert got.choices[0].text == want.text and got.choices[0].text, "non-vacuity: text was generated"
    assert got.usage.prompt_tokens == len(want.prompt_token_ids)
    assert got.usage.completion_tokens == len(want.token_ids)
    streamed = "".join(c.choices[0].text for c in client.completions.create(
        model=MODEL, prompt="Hello there", max_tokens=12, temperature=0, stream=True) if c.choices)
    assert streamed == want.text, "streamed deltas add up to the whole"


def test_chat_streams_a_role_frame_then_content_then_done(served) -> None:
    status, frames = stream_raw(served[1], "/v1/chat/completions", {
        "model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8, "stream": True,
        "temperature": 0, "ignore_eos": True, "stream_options": {"include_usage": True}})
    assert status == 200 and frames[-1] == "[DONE]"
    chunks = [f for f in frames if isinstance(f, dict)]
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    usage = chunks[-1]["usage"]
    assert chunks[-1]["choices"] == [] and usage["completion_tokens"] == 8, "usage closes the stream"
    assert usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    assert content == "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[1:-1])


def test_continuous_usage_counts_every_token_so_far(served) -> None:
    _, frames = stream_raw(served[1], "/v1/completions", {
        "model": MODEL, "prompt": [5, 6, 7, 8], "max_tokens": 10, "stream": True, "ignore_eos": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    counts = [f["usage"]["completion_tokens"] for f in frames if isinstance(f, dict) and f["choices"]]
    assert counts == sorted(counts) and counts[-1] == 10 and len(counts) > 1
    assert all(f["usage"]["prompt_tokens"] == 4 for f in frames if isinstance(f, dict))


def test_n_samples_logprobs_stop_and_seed(client) -> None:
    kw = dict(model=MODEL, prompt="Once upon", max_tokens=8, temperature=1.0, seed=7, n=3, logprobs=2)
    a, b = client.completions.create(**kw), client.completions.create(**kw)
    assert [c.text for c in a.choices] == [c.text for c in b.choices], "seeded: the same samples twice"
    assert sorted(c.index for c in a.choices) == [0, 1, 2] and len({c.text for c in a.choices}) > 1
    assert a.usage.completion_tokens == sum(len(c.logprobs.tokens) for c in a.choices)
    assert all(len(c.logprobs.top_logprobs[0]) >= 1 for c in a.choices)
    for c in a.choices:  # each token's offset in the choice's text: where the text of the tokens before ends
        want = [sum(len(t) for t in c.logprobs.tokens[:j]) for j in range(len(c.logprobs.tokens))]
        assert c.logprobs.text_offset == want and want[-1] > 0
    stop_at = a.choices[0].text[2:4]
    if stop_at.strip():
        cut = client.completions.create(**{**kw, "n": 1, "stop": [stop_at], "logprobs": None})
        assert stop_at not in cut.choices[0].text


def test_chat_with_max_completion_tokens_and_logprobs(client) -> None:
    r = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "Hello"}],
                                       max_completion_tokens=6, temperature=0, logprobs=True, top_logprobs=2)
    c = r.choices[0]
    assert c.message.role == "assistant" and r.usage.completion_tokens <= 6
    assert len(c.logprobs.content) == r.usage.completion_tokens and len(c.logprobs.content[0].top_logprobs) == 2


def test_completions_top_logprobs_hold_the_sampled_token_beside_the_top_n(client) -> None:
    """OpenAI's completions (and vLLM's) give up to logprobs + 1 alternatives a token: the top n and, always, the
    token itself (at logprobs=0, that token alone); echo's prompt tokens likewise hold the prompt's own token. vt
    gave the top n alone. Chat's top_logprobs stay exactly top_logprobs entries, as vLLM's: there the sampled token
    is the content item itself."""
    kw = dict(model=MODEL, max_tokens=24, temperature=1.0, seed=3, extra_body={"ignore_eos": True})
    lp = client.completions.create(prompt="Once upon", logprobs=1, **kw).choices[0].logprobs
    pairs = list(zip(lp.tokens, lp.token_logprobs, lp.top_logprobs))
    # (keyed by text: two byte tokens that decode alike, "\ufffd", share a key, so the key is what is checked)
    assert all(tok in top and len(top) <= 2 for tok, own, top in pairs), pairs
    assert any(len(top) == 2 and top[tok] == own < max(top.values()) for tok, own, top in pairs), \
        "non-vacuity: a token drawn below the top one, beside it"
    lp0 = client.completions.create(prompt="Once upon", logprobs=0, **kw).choices[0].logprobs
    assert [top for top in lp0.top_logprobs] == [{t: v} for t, v in zip(lp0.tokens, lp0.token_logprobs)]
    echo = client.completions.create(model=MODEL, prompt=[5, 77, 300, 12, 9, 400], max_tokens=1, logprobs=1,
                                     echo=True, temperature=0).choices[0].logprobs
    prompt = list(zip(echo.tokens, echo.token_logprobs, echo.top_logprobs))[1:6]
    assert all(tok in top for tok, own, top in prompt), prompt
    assert any(own < max(top.values()) for _, own, top in prompt), "non-vacuity: a prompt token below the top one"
    chat = client.chat.completions.create(messages=[{"role": "user", "content": "Hi"}], logprobs=True,
                                          top_logprobs=1, **kw).choices[0].logprobs.content
    assert all(len(item.top_logprobs) == 1 for item in chat), "chat: exactly top_logprobs alternatives"
    assert any(item.token != item.top_logprobs[0].token for item in chat), "non-vacuity: one drawn below the top"


def test_a_stream_of_several_prompts_interleaves_their_choices_as_produced(client) -> None:
    """The engine runs a request's prompts side by side, so their frames come as produced, as vLLM merges its
    generators (merge_async_iterators): choice 1 waited for choice 0's end and then came as one late lump. Every
    choice still ends with its finish reason, and usage (last) counts both."""
    seen: list[tuple[int, str | None]] = []
    usage = None
    for chunk in client.completions.create(model=MODEL, prompt=[[5, 6, 7], [8, 9, 10]], max_tokens=40, temperature=0,
                                           stream=True, stream_options={"include_usage": True},
                                           extra_body={"ignore_eos": True}):
        seen += [(c.index, c.finish_reason) for c in chunk.choices]
        usage = chunk.usage or usage
    end_of_0 = seen.index((0, "length"))
    assert sum(i == 0 for i, _ in seen) > 2 and (1, "length") in seen, f"non-vacuity: both streamed, ended: {seen}"
    assert sum(i == 1 for i, _ in seen[:end_of_0]) > 1, f"choice 1 waited for choice 0 to end: {seen}"
    assert usage is not None and usage.completion_tokens == 80, usage


def test_the_async_client_streams_concurrently(served) -> None:
    async def main() -> list[int]:
        aclient = AsyncOpenAI(base_url=served[1] + "/v1", api_key="unused", max_retries=0)

        async def one(i: int) -> int:
            tokens = 0
            async for chunk in await aclient.completions.create(
                    model=MODEL, prompt=[10 + i, 20, 30], max_tokens=6, temperature=0, stream=True,
                    stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
                tokens = chunk.usage.completion_tokens if chunk.usage else tokens
            return tokens

        out = await asyncio.gather(*(one(i) for i in range(8)))
        whole = await aclient.completions.create(model=MODEL, prompt=[10, 20, 30], max_tokens=6, temperature=0,
                                                 extra_body={"ignore_eos": True})
        await aclient.close()
        return [*out, whole.usage.completion_tokens]

    assert asyncio.run(main()) == [6] * 9


# ---- bad input: a 4xx with the OpenAI error shape, never a 500 -----------------------------------
BAD = [
    ("malformed JSON", b"{not json", 400),
    ("not an object", b"[1, 2]", 400),
    ("unknown model", {"model": "gpt-9", "prompt": "hi"}, 404),
    ("prompt missing", {"model": MODEL}, 400),
    ("prompt a number", {"model": MODEL, "prompt": 5}, 400),
    ("negative max_tokens", {"model": MODEL, "prompt": "hi", "max_tokens": -1}, 400),
    ("huge max_tokens", {"model": MODEL, "prompt": "hi", "max_tokens": 10**9}, 400),
    ("max_tokens a string", {"model": MODEL, "prompt": "hi", "max_tokens": "8"}, 400),
    ("prompt beyond max_model_len", {"model": MODEL, "prompt": [5] * 300}, 400),
    ("negative temperature", {"model": MODEL, "prompt": "hi", "temperature": -0.5}, 400),
    ("top_p out of range", {"model": MODEL, "prompt": "hi", "top_p": 3}, 400),
    ("stream_options without stream", {"model": MODEL, "prompt": "hi", "stream_options": {"include_usage": True}},
     400),
    ("token id outside the vocabulary", {"model": MODEL, "prompt": [10**7]}, 400),
    ("top_k past int64", {"model": MODEL, "prompt": "hi", "top_k": 2**63}, 400),
    ("min_tokens holding off too many stop ids", {"model": MODEL, "prompt": "hi", "min_tokens": 2,
                                                  "stop_token_ids": list(range(40))}, 400),
]
CHAT_BAD = [
    ("messages not a list", {"model": MODEL, "messages": "hi"}, 400),
    ("message without role", {"model": MODEL, "messages": [{"content": "hi"}]}, 400),
    ("top_logprobs without logprobs", {"model": MODEL, "messages": [{"role": "user", "content": "hi"}],
                                       "top_logprobs": 2}, 400),
]


def _check_error(r: httpx.Response, status: int) -> None:
    """OpenAI's error object: a message, the type invalid_request_error for a client's mistake, param, and
    code (model_not_found for an unknown model, else null)."""
    assert r.status_code == status, r.text
    err = r.json()["error"]
    assert isinstance(err["message"], str) and err["message"] and {"type", "param", "code"} <= set(err)
    assert err["type"] == "invalid_request_error" and err["code"] == ("model_not_found" if status == 404 and
                                                                       "model" in err["message"] else None)


@pytest.mark.parametrize("what, body, status", BAD, ids=[b[0] for b in BAD])
def test_bad_completion_requests_get_a_4xx_with_the_openai_error_body(served, what, body, status) -> None:
    for stream in (False, True):
        content = body if isinstance(body, bytes) else json.dumps({**body, **({"stream": True} if stream and
                                                                                "stream_options" not in body
                                                                                else {})}).encode()
        r = httpx.post(served[1] + "/v1/completions", content=content, headers={"content-type": "application/json"},
                       timeout=30)
        _check_error(r, status)


@pytest.mark.parametrize("what, body, status", CHAT_BAD, ids=[b[0] for b in CHAT_BAD])
def test_bad_chat_requests_get_a_4xx_with_the_openai_error_body(served, what, body, status) -> None:
    _check_error(httpx.post(served[1] + "/v1/chat/completions", json=body, timeout=30), status)


def test_an_oversize_body_is_413_and_unknown_routes_are_json_errors(served) -> None:
    big = b'{"model": "' + b"x" * (5 << 20) + b'"}'
    _check_error(httpx.post(served[1] + "/v1/completions", content=big, timeout=60), 413)
    _check_error(httpx.get(served[1] + "/v1/nothing", timeout=30), 404)
    _check_error(httpx.get(served[1] + "/v1/completions", timeout=30), 405)
    assert httpx.get(served[1] + "/health", timeout=30).status_code == 200


def test_the_openai_client_raises_its_typed_errors(client) -> None:
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="nope", prompt="hi")
    with pytest.raises(openai.BadRequestError, match="max_tokens"):
        client.completions.create(model=MODEL, prompt="hi", max_tokens=100_000)


def test_a_seed_is_any_int64_reproducibly_and_nothing_past_it(served) -> None:
    """vLLM's protocol takes seed in torch.long's range (OpenAI sets none): a negative seed draws the same text twice
    and apart from the others; a seed past int64 is a 400 naming it."""
    from tests.server.refusal import error_of

    url, body = served[1] + "/v1/completions", {"model": MODEL, "prompt": "Once upon", "max_tokens": 8,
                                                "temperature": 1.0, "ignore_eos": True}
    texts = []
    for seed in (-1, -1, 2**63 - 1, -(2**63)):
        r = httpx.post(url, json={**body, "seed": seed}, timeout=60)
        assert r.status_code == 200, f"seed={seed} is an int64: {r.status_code} {r.text[:300]}"
        texts.append(r.json()["choices"][0]["text"])
    assert texts[0] == texts[1] and texts[0], "non-vacuity: text, the same for the same seed"
    assert texts[0] not in texts[2:], "seed -1 draws as another seed does"
    for seed in (-(2**63) - 1, 2**63, 2**64 - 1):
        err = error_of(httpx.post(url, json={**body, "seed": seed}, timeout=60))
        assert f"seed={seed}" in err["message"], err


# ---- metrics ---------------------------------------------------------------------------------------
def test_metrics_are_prometheus_text_with_the_engine_figures(served, client) -> None:
    client.completions.create(model=MODEL, prompt="count me", max_tokens=4, temperature=0,
                              extra_body={"ignore_eos": True})
    text = httpx.get(served[1] + "/metrics", timeout=30).text
    from prometheus_client.parser import text_string_to_metric_families

    fams = {f.name: f for f in text_string_to_metric_families(text)}
    for name in ("vt_num_requests_running", "vt_num_requests_waiting", "vt_kv_blocks_used",
                 "vt_time_to_first_token_seconds", "vt_time_per_output_token_seconds",
                 "vt_e2e_request_latency_seconds", "vt_prompt_tokens", "vt_generation_tokens", "vt_num_preemptions",
                 "vt_graph_replays", "vt_eager_steps", "vt_pool_misses"):
        assert name in fams, f"{name} missing from /metrics"
    gen = next(s.value for s in fams["vt_generation_tokens"].samples if s.name.endswith("_total"))
    ttft_count = next(s.value for s in fams["vt_time_to_first_token_seconds"].samples if s.name.endswith("_count"))
    assert gen >= 4 and ttft_count >= 1
    vllm = ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
            "vllm:prefix_cache_queries", "vllm:prefix_cache_hits", "vllm:num_preemptions",
            "vllm:time_to_first_token_seconds", "vllm:time_per_output_token_seconds",
            "vllm:e2e_request_latency_seconds", "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success")
    for name in vllm:  # vLLM's names, each with its model_name label: a vLLM dashboard reads them unchanged
        assert name in fams, f"{name} missing from /metrics"
        assert all(s.labels.get("model_name") == MODEL for s in fams[name].samples), f"{name}: model_name label"
    queries = next(s.value for s in fams["vllm:prefix_cache_queries"].samples if s.name.endswith("_total"))
    assert queries >= 2, "the completion's prompt tokens were looked up in the prefix cache"
    vgen = next(s.value for s in fams["vllm:generation_tokens"].samples if s.name.endswith("_total"))
    assert vgen == gen, "vLLM's generation-token counter is fed as vt's is"
    from seams.lanes import is_bypass_lane

    replays = next(s.value for s in fams["vt_graph_replays"].samples)
    assert replays > 0 or is_bypass_lane(), "non-vacuity: decode steps replayed (graphs are off in the bypass lane)"
