"""The engine core in its own process (issue 28, as vLLM's EngineCore): the server's answers equal those of the
engine on a thread of the server's process, token for token and byte for byte in the text (stop strings,
n > 1, logprobs, prompt logprobs, echo, streaming); the settled configuration and the engine's numbers reach the
front; bad input is refused by the front; and a dead engine process fails the requests in flight with one
error frame, /health answers 503 and `vt serve` exits 1."""

from __future__ import annotations

import json

import httpx
import pytest

from tests.helpers import guarding
from vt.server.serve import running_server

KW = dict(backend="cpu", max_model_len=256, num_blocks=96, max_num_seqs=4)
BODIES = [
    {"prompt": "hello world", "max_tokens": 12, "temperature": 0},
    {"prompt": "the quick brown fox", "max_tokens": 16, "temperature": 0.8, "seed": 3, "n": 2, "stop": [" two"]},
    # a stop string of two tokens: its first was sent as text a step before the second cut it off
    {"prompt": "the quick brown fox", "max_tokens": 16, "temperature": 0.8, "seed": 4, "stop": ["\x18\x18"]},
    {"prompt": [5, 6, 7, 8], "max_tokens": 10, "temperature": 0, "logprobs": 3, "echo": True},
    {"prompt": "abc abc abc", "max_tokens": 8, "temperature": 0, "prompt_logprobs": 2},
    {"prompt": "streamed text", "max_tokens": 14, "temperature": 0.5, "seed": 9, "stream": True, "logprobs": 1},
]


def _answer(url: str, body: dict) -> object:
    body = {"model": "tiny-qwen3", **body}
    if not body.get("stream"):
        r = httpx.post(url + "/v1/completions", json=body, timeout=60)
        out = r.json()
        return r.status_code, out.get("choices"), out.get("usage")
    text, tokens, reasons = {}, {}, {}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        for line in r.iter_lines():
            if not line.startswith("data: {"):
                continue
            for c in json.loads(line[6:]).get("choices", []):
                text[c["index"]] = text.get(c["index"], "") + c["text"]
                tokens[c["index"]] = tokens.get(c["index"], []) + (c["logprobs"] or {}).get("tokens", [])
                reasons[c["index"]] = c["finish_reason"] or reasons.get(c["index"])
    return r.status_code, text, tokens, reasons


def _all_answers(engine_process: bool) -> tuple[list, dict]:
    with running_server("tiny-qwen3", engine_process=engine_process, **KW) as (server, url):
        answers = [_answer(url, b) for b in BODIES]
        models = httpx.get(url + "/v1/models").json()["data"][0]
        metrics = httpx.get(url + "/metrics").text
        bad = httpx.post(url + "/v1/completions", json={"model": "tiny-qwen3", "prompt": [99999]}, timeout=30)
    return answers, {"max_model_len": models["max_model_len"], "metrics": metrics, "bad": bad}


def test_the_engine_process_answers_as_the_engine_thread_does() -> None:
    got, info = _all_answers(engine_process=True)
    want, ref = _all_answers(engine_process=False)
    for body, g, w in zip(BODIES, got, want):
        assert g == w, f"{body}: through the engine process {g}, on a thread {w}"
    assert all(a[0] == 200 for a in got) and len(got[1][1]) == 2, "non-vacuity: every body answered, n=2 twice"
    assert any(c["finish_reason"] == "stop" for c in got[1][1]), "non-vacuity: a stop string ended a sample"
    assert info["max_model_len"] == ref["max_model_len"] == KW["max_model_len"]
    assert 'vllm:prefix_cache_queries_total{model_name="tiny-qwen3"} 0.0' not in info["metrics"], (
        "the engine process's numbers reach /metrics")
    assert info["bad"].status_code == 400 and "outside the vocabulary" in info["bad"].json()["error"]["message"]


def test_the_settled_configuration_comes_back_from_the_engine_process() -> None:
    """max_model_len 0 is the checkpoint's, capped by the KV cache: only the core knows it once it has started."""
    kw = {**KW, "max_model_len": 0, "num_blocks": 40}
    # a front left with the unsettled 0 cannot even size its metrics' token buckets (ValueError)
    with guarding("the front serves the configuration the core settled, not max_model_len 0", ValueError):
        with running_server("tiny-qwen3", engine_process=True, **kw) as (_, url):
            got = httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"]
    with running_server("tiny-qwen3", engine_process=False, **kw) as (_, url):
        want = httpx.get(url + "/v1/models").json()["data"][0]["max_model_len"]
    assert got == want and 0 < want <= 40 * 16, f"the core's settled max_model_len {want}, the front says {got}"


def test_a_request_refused_before_its_add_is_queued_leaves_nothing_behind() -> None:
    """With the engine core in its own process, AsyncLLM.generate tokenizes before it queues the add, and the
    add's message must encode: a request refused there (token ids outside the vocabulary, which the HTTP layer
    also checks first) raises its RequestError, and neither its stream nor its pending add stays in the tables
    (each such request used to leave both, to be failed at shutdown)."""
    import asyncio

    from vt.engine.sample.params import SamplingParams
    from vt.errors import RequestError

    async def ask(llm, prompt: list[int], rid: str) -> list:
        return [out async for out in llm.generate(prompt, SamplingParams(max_tokens=2), rid)]

    with running_server("tiny-qwen3", engine_process=True, **KW) as (server, _):
        llm = server.llm
        assert llm._core is not None, "non-vacuity: the engine runs in its own process"
        for i in range(3):
            with pytest.raises(RequestError):
                asyncio.run(ask(llm, [5, 10**6], f"refused-{i}"))
        assert llm._streams == {} and llm._adds == {}, "the refused requests' state left behind"
        assert asyncio.run(ask(llm, [5, 6], "served"))[-1].finished, "non-vacuity: ids inside the vocabulary run"


def test_a_dead_engine_process_is_said_once_by_health_and_by_a_late_request() -> None:
    """/health after the engine process died, and a request after it, say why once: it read "the engine stopped:
    the engine stopped: its process exited ..." (the reason already says it stopped)."""
    import os
    import signal
    import time

    with running_server("tiny-qwen3", engine_process=True, **KW) as (server, url):
        core = server.llm._core
        assert core is not None and httpx.get(url + "/health", timeout=30).status_code == 200, "non-vacuity: alive"
        os.kill(core.proc.pid, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while server.llm.is_alive and time.monotonic() < deadline:
            time.sleep(0.02)
        health = httpx.get(url + "/health", timeout=30)
        late = httpx.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 2}, timeout=30)
    for r in (health, late):
        said = r.json()["error"]["message"]
        assert r.status_code == 503 and "process exited" in said, (r.status_code, said)
        assert said.count("the engine stopped") == 1, said


BROKEN_BUILD = """
import sys
from vt.server import app
def broken(*args, **kwargs):
    raise RuntimeError("planted: the metrics could not be built")
app.Metrics = broken
from vt.server.serve import make_server
try:
    make_server("tiny-qwen3", engine_process=sys.argv[1] == "process", backend="cpu", max_model_len=64, num_blocks=16)
except RuntimeError as e:
    print("raised:", e, flush=True)
"""


@pytest.mark.parametrize("mode", ["process", "thread"])
def test_a_server_that_fails_to_build_stops_its_engine_and_the_interpreter_exits(mode: str) -> None:
    """The engine starts before the app is built: a failure building the app must stop the engine's process or
    thread, or `vt serve` would print the error and then never exit (the interpreter waits on them)."""
    import subprocess
    import sys

    try:
        done = subprocess.run([sys.executable, "-c", BROKEN_BUILD, mode], capture_output=True, text=True, timeout=15)
    except subprocess.TimeoutExpired as e:  # it exits in ~2.5 s; a hang is waited out 15 s, once per mutant run
        raise AssertionError(f"the build failed, and the interpreter was still running 15 s later: {e.stdout}") from e
    assert "raised: planted" in done.stdout, f"non-vacuity: the planted failure was met: {done.stdout}{done.stderr}"
    assert done.returncode == 0, done.stderr[-2000:]
