"""Fuzzed request bodies against the OpenAI-compatible server: every one gets a 200 or a 4xx with the OpenAI error
body, never a 500, and the engine stays up. Apart from test_openai_server.py: no mutant names this test (~9 s of
that file's 11), and its mutant runs its gate file whole."""

from __future__ import annotations

import httpx
import pytest

from vt.server.serve import running_server

pytest.importorskip("hypothesis")  # a dev dependency, as the openai client beside it is

MODEL = "tiny-qwen3"


@pytest.fixture(scope="module")
def served():
    with running_server(MODEL, max_model_len=256, num_blocks=256, max_num_seqs=16) as (server, url):
        yield server, url


# ---- fuzzed bodies ----------------------------------------------------------------------------------
def _json_values():
    from hypothesis import strategies as st

    scalars = (st.none() | st.booleans() | st.integers(-10, 300) | st.sampled_from([2**31, 2**63, -(2**63), 10**30])
               | st.floats(-5, 5, allow_nan=False) | st.text(max_size=8))
    return st.recursive(scalars, lambda c: st.lists(c, max_size=4) | st.dictionaries(st.text(max_size=6), c,
                                                                                        max_size=3), max_leaves=8)


FIELDS = ["model", "prompt", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "top_k",
          "n", "stop", "seed", "logprobs", "top_logprobs", "stream", "stream_options", "min_tokens",
          "presence_penalty", "ignore_eos"]


def test_fuzzed_bodies_get_a_200_or_a_4xx_never_a_500(served) -> None:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    url = served[1]
    statuses: set[int] = set()

    @settings(max_examples=120, deadline=None, suppress_health_check=list(HealthCheck))
    @given(path=st.sampled_from(["/v1/completions", "/v1/chat/completions"]),
           changes=st.dictionaries(st.sampled_from(FIELDS), _json_values(), max_size=3),
           from_valid=st.booleans())
    def check(path: str, changes: dict, from_valid: bool) -> None:
        """A valid body with a few fields fuzzed, or fuzzed fields alone."""
        valid = {"model": MODEL, "max_tokens": 4} | ({"messages": [{"role": "user", "content": "Hi"}]} if "chat" in path
                                                     else {"prompt": "Hi"})
        body = {**(valid if from_valid else {}), **changes}
        if isinstance(body.get("max_tokens"), int) or isinstance(body.get("max_completion_tokens"), int):
            body["n"] = 1  # keep an example's work small; n is fuzzed where max_tokens is not
        r = httpx.post(url + path, json=body, timeout=120)
        statuses.add(r.status_code)
        assert r.status_code in (200, 400, 404), (r.status_code, body, r.text[:300])
        if r.status_code != 200:
            err = r.json()["error"]
            assert err["message"] and err["type"] == "invalid_request_error"
        elif body.get("stream") is True:
            assert r.text.rstrip().endswith("data: [DONE]")

    check()
    assert {200, 400} <= statuses, f"non-vacuity: the fuzz reached both answers ({sorted(statuses)})"
    assert httpx.get(url + "/health", timeout=30).status_code == 200, "no fuzzed body took the engine down"
