"""Faults planted in the engine thread's own handling: a request the engine fails to add is that request's
HTTP 500 alone (the next one is served); any other error there ends every stream in flight with an error
frame and turns /health to 503, never a stream left waiting. The record of aborts stays bounded."""

from __future__ import annotations

import contextlib
import json
import threading
import time

import httpx
import pytest

from vt.server.serve import running_server

MODEL = "tiny-qwen3"
POISON = 496  # a prompt starting with this token makes the planted add fail


@pytest.fixture
def served():
    with running_server(MODEL, max_model_len=256, num_blocks=64, max_num_seqs=4) as (server, url):
        yield server, url


def _completion(url: str, first: int, **kw) -> httpx.Response:
    body = {"model": MODEL, "prompt": [first, 5, 6], "max_tokens": 4, "ignore_eos": True} | kw
    return httpx.post(url + "/v1/completions", json=body, timeout=60)


def test_a_request_the_engine_fails_to_add_is_a_500_alone(served) -> None:
    server, url = served
    engine = server.llm.engine
    real = engine.add_request

    def add_request(prompt, params=None, request_id=None, cache_salt=None):
        if list(prompt)[0] == POISON:
            real(prompt, params, request_id, cache_salt)  # queued, then the planted bug: the engine must take it back
            raise RuntimeError("planted: add_request failed after queueing")
        return real(prompt, params, request_id, cache_salt)

    engine.add_request = add_request
    bad = _completion(url, POISON)
    assert bad.status_code == 500, bad.text
    assert bad.json()["error"]["type"] == "internal_server_error" and "planted" in bad.json()["error"]["message"]
    good = _completion(url, 7)
    assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 4, good.text
    assert httpx.get(url + "/health", timeout=30).status_code == 200, "one failed add takes nothing else down"
    assert engine.kv_manager.num_used == 0 and not engine.has_unfinished(), "the failed add left nothing queued"


def test_an_endpoints_unexpected_error_is_logged_before_its_500_is_answered(served, caplog) -> None:
    """A bug of ours in a handler: the client gets OpenAI's 500 body naming it, and its traceback is in vt's log by
    the time the client has that answer (not written after it, beside whatever the client does next)."""
    server, url = served

    def stats() -> dict:
        raise RuntimeError("planted: the engine's numbers could not be read")

    server.llm.stats = stats
    r = httpx.get(url + "/metrics", timeout=30)
    logged = [(m.getMessage(), str(m.exc_info[1])) for m in caplog.records if m.name == "vt.server" and m.exc_info]
    assert r.status_code == 500 and r.json()["error"]["type"] == "internal_server_error", r.text
    assert "planted" in r.json()["error"]["message"], r.text
    if not logged:  # failing: uvicorn writes the traceback on its thread now; CPython 3.11's ast (a traceback's
        time.sleep(1.0)  # carets) is not safe in two threads at once, so pytest formats this failure after it
    assert len(logged) == 1 and "GET /metrics" in logged[0][0] and "planted" in logged[0][1], \
        f"the 500's traceback in vt's log before the answer: {[(m.name, m.getMessage()) for m in caplog.records]}"
    del server.llm.stats
    assert httpx.get(url + "/metrics", timeout=30).status_code == 200, "non-vacuity: /metrics serves unplanted"


def test_an_unexpected_error_mid_stream_is_logged_then_one_error_frame_and_done(served, caplog, monkeypatch) -> None:
    """A bug of ours after the 200: the stream ends as any failure after the 200 does (one error frame, then
    [DONE]), its traceback in vt's log; never a connection cut mid-stream."""
    from vt.server.app import Answer

    server, url = served
    real = Answer._choice

    def choice(self, i, out, c, whole):
        if out.finished:  # the last output: always reached, however the engine's outputs were merged
            raise RuntimeError("planted: a choice could not be built")
        return real(self, i, out, c, whole)

    monkeypatch.setattr(Answer, "_choice", choice)
    body = {"model": MODEL, "prompt": [7, 5, 6], "max_tokens": 8, "ignore_eos": True, "stream": True}
    frames, cut = [], None
    try:
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            frames = [line[6:] for line in r.iter_lines() if line.startswith("data: ")]
    except httpx.HTTPError as e:  # the connection cut mid-stream
        cut = e
    logged = [(m.getMessage(), str(m.exc_info[1])) for m in caplog.records if m.name == "vt.server" and m.exc_info]
    if not logged:  # failing: see the test above
        time.sleep(1.0)
    assert cut is None and frames and frames[-1] == "[DONE]", f"the stream ends with [DONE] ({cut!r}): {frames}"
    errors = [json.loads(f)["error"] for f in frames[:-1] if f.startswith('{"error"')]
    assert len(errors) == 1 and errors[0]["type"] == "internal_server_error" and "planted" in errors[0]["message"]
    assert frames[-2].startswith('{"error"'), f"the error frame is the stream's last before [DONE]: {frames}"
    assert len(logged) == 1 and "planted" in logged[0][1], f"its traceback in vt's log: {caplog.records}"
    monkeypatch.undo()
    good = _completion(url, 7)
    assert good.status_code == 200 and good.json()["usage"]["completion_tokens"] == 4, "the server serves on"


def test_an_error_in_the_engine_threads_handling_ends_every_stream_never_a_hang(served) -> None:
    server, url = served
    llm = server.llm
    started = threading.Event()
    frames: list = []

    def streamer() -> None:
        body = {"model": MODEL, "prompt": [7, 5, 6], "max_tokens": 200, "ignore_eos": True, "stream": True}
        with contextlib.suppress(httpx.ReadTimeout):  # a stream left waiting: the assertion below says so
            with httpx.stream("POST", url + "/v1/completions", json=body, timeout=httpx.Timeout(60, read=8)) as r:
                for line in r.iter_lines():
                    if line.startswith("data: "):
                        started.set()
                        frames.append(line[6:])

    t = threading.Thread(target=streamer)
    t.start()
    assert started.wait(30), "non-vacuity: the stream began"

    def broken_abort(request_id):
        raise RuntimeError("planted: abort handling failed")

    llm.engine.abort = broken_abort
    llm.abort("anything")  # the engine thread's handling of this command raises
    t.join(30)
    assert not t.is_alive() and frames[-1] == "[DONE]", "the stream in flight ended: it did not wait forever"
    assert frames[-1] == "[DONE]" and "error" in json.loads(frames[-2]), frames[-2:]
    deadline = time.monotonic() + 10
    while httpx.get(url + "/health", timeout=30).status_code != 503 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert httpx.get(url + "/health", timeout=30).status_code == 503, "/health says the engine is gone"


def test_the_record_of_aborts_keeps_the_newest_only(served, monkeypatch: pytest.MonkeyPatch) -> None:
    server, url = served
    llm = server.llm
    monkeypatch.setattr(type(llm), "MAX_ABORT_RECORDS", 4)
    for i in range(10):
        llm.abort(f"gone-{i}")
    assert len(llm.aborts) <= 4, f"{len(llm.aborts)} records: one per disconnect, never pruned"
    assert "gone-9" in llm.aborts, "non-vacuity: the newest abort is recorded"
