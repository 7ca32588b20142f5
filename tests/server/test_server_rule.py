"""The server rule (DESIGN.md, Server): no response byte before the engine produced the request's first
result or its error; an error before the first token is the whole response; a failure after it is one
error frame and then [DONE]; a client that goes away frees its blocks within one engine step. Load, SIGTERM
and a request queued behind a dying engine are in test_server_load.py (no mutant's gate: its mutants need
not run them)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import threading
import time

import httpx
import pytest

from vt.errors import ConfigError
from vt.server.serve import listen_socket, running_server

MODEL = "tiny-qwen3"
HOLD_S = 3.0  # how long a held engine waits for a disconnect to be noticed before it carries on
GRACE_S = 0.5  # how long a held engine must keep the response silent (not a performance bound)
MARK = 499  # a victim's prompt starts with this token


@pytest.fixture
def served():
    with running_server(MODEL, max_model_len=256, num_blocks=256, max_num_seqs=16) as (server, url):
        yield server, url


@contextlib.contextmanager
def engine_held_until_the_abort_is_asked(llm):
    """From its third step the engine waits (up to HOLD_S) until the server asks for an abort: the request
    cannot finish before the client has looked at it and gone away, however slow the machine."""
    runner = llm.engine.runner
    real = runner.execute

    def execute(so):
        out = real(so)
        deadline = time.monotonic() + HOLD_S
        while llm.num_steps >= 2 and not llm.aborts and time.monotonic() < deadline:
            time.sleep(0.002)
        return out

    runner.execute = execute
    try:
        yield
    finally:
        runner.execute = real


@contextlib.contextmanager
def streaming_until_the_first_frame(llm, url: str, body: dict):
    """Inside: the engine is held, the response has streamed its first frame and the client is still there
    (the line iterator is kept: a finalized one closes the connection). On exit the client goes away."""
    with engine_held_until_the_abort_is_asked(llm):
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            lines = r.iter_lines()
            next(line for line in lines if line.startswith("data: {"))
            yield


def frames_of(lines: list[str]) -> list:
    return [line[6:] if line == "data: [DONE]" else json.loads(line[6:]) for line in lines if line]


def test_no_byte_is_sent_while_the_engine_is_held_inside_sampling(served) -> None:
    server, url = served
    runner, held, seen = server.llm.engine.runner, threading.Event(), {}
    real = runner._sample_eager
    entered = threading.Event()

    def sample_held(*a, **kw):
        entered.set()
        assert held.wait(30), "the test never released the engine"
        return real(*a, **kw)

    runner._sample_eager = sample_held
    first_token: dict[str, float] = {}
    server.llm.on_finished = lambda r, prev=server.llm.on_finished: (first_token.setdefault("t", r.first_token_time),
                                                                      prev(r))

    def client() -> None:
        body = {"model": MODEL, "prompt": "Hello", "max_tokens": 4, "stream": True, "temperature": 0}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            seen["headers"] = time.monotonic()
            for line in r.iter_lines():
                if line.startswith("data: {") and json.loads(line[6:]).get("choices"):
                    seen.setdefault("first_chunk", time.monotonic())
                seen.setdefault("lines", []).append(line)

    t = threading.Thread(target=client)
    t.start()
    try:
        assert entered.wait(30), "non-vacuity: the engine reached sampling for this request"
        time.sleep(GRACE_S)
        assert "headers" not in seen, "the response began while the engine was held, before any result"
    finally:  # a failed assertion releases the engine too: else the server's shutdown waits out its 30 s hold
        held.set()
        t.join(60)
        runner._sample_eager = real
    frames = frames_of(seen["lines"])
    assert frames[-1] == "[DONE]" and frames[0]["choices"], "the first frame carries the first result"
    assert seen["headers"] >= first_token["t"] and seen["first_chunk"] >= first_token["t"], (
        "the client saw its first chunk after the engine's first token (TTFT cannot lie)")


def _fail_first_sample(server) -> None:
    runner = server.llm.engine.runner
    real = runner._sample_eager

    def failing(*a, **kw):
        wait = real(*a, **kw)
        runner._sample_eager = real

        def failed():
            res = wait()
            res.ids[:] = -1  # as a row of non-finite logits
            return res

        return failed

    runner._sample_eager = failing


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "stream"])
def test_an_error_before_the_first_token_is_the_whole_response(served, stream: bool) -> None:
    server, url = served
    _fail_first_sample(server)
    r = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 4, "stream": stream},
                   timeout=60)
    assert r.status_code == 500 and "non-finite" in r.json()["error"]["message"]
    assert not r.text.startswith("data:"), "no SSE frame"
    ok = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "Hi", "max_tokens": 4}, timeout=60)
    assert ok.status_code == 200, "the next request is served"


def test_a_failure_after_the_first_token_is_one_error_frame_then_done(served) -> None:
    server, url = served
    runner = server.llm.engine.runner
    real, calls = runner._decode, {"n": 0}

    def decode(req_ids):
        wait = real(req_ids)

        def waited():
            res = wait()
            for i, rid in enumerate(req_ids):
                if int(runner.batch.tokens(rid)[0]) == MARK:
                    calls["n"] += 1
                    if calls["n"] == 3:
                        res.ids[i] = -1
            return res

        return waited

    runner._decode = decode
    results: dict[str, list] = {}

    def stream(name: str, prompt: list[int]) -> None:
        body = {"model": MODEL, "prompt": prompt, "max_tokens": 12, "stream": True, "ignore_eos": True}
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
            results[name] = [r.status_code, frames_of(list(r.iter_lines()))]

    threads = [threading.Thread(target=stream, args=(n, p)) for n, p in (("victim", [MARK, 7, 8]),
                                                                           ("neighbour", [9, 7, 8]))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    runner._decode = real
    status, frames = results["victim"]
    assert status == 200 and frames[-1] == "[DONE]" and "error" in frames[-2], frames[-3:]
    assert any(f["choices"] and f["choices"][0]["text"] is not None for f in frames[:-2]), "tokens came first"
    assert "non-finite" in frames[-2]["error"]["message"]
    n_status, n_frames = results["neighbour"]
    assert n_status == 200 and n_frames[-1] == "[DONE]" and not any("error" in f for f in n_frames[:-1])
    assert calls["n"] >= 3, "non-vacuity: the victim reached its third decode step"


def test_a_client_that_goes_away_frees_its_blocks_within_one_engine_step(served) -> None:
    """Counted from the moment the server learns of the disconnect (the abort is asked): at most the step
    in flight runs before the blocks are free. The disconnect itself must be noticed, without a hang."""
    server, url = served
    llm, kv = server.llm, server.llm.engine.kv_manager
    body = {"model": MODEL, "prompt": [5] * 40, "max_tokens": 200, "stream": True, "ignore_eos": True}
    with streaming_until_the_first_frame(llm, url, body):
        assert kv.num_used > 0, "non-vacuity: the request holds blocks while it streams"
        steps_at_close = llm.num_steps
    deadline = time.monotonic() + 5
    while (kv.num_used or not llm.aborts) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert kv.num_used == 0 and llm.num_aborted == 1, "the disconnect was noticed and the request aborted"
    assert len(llm.aborts) == 1, "the disconnect was noticed: the server asked the engine to abort"
    (asked, applied, used_after), = llm.aborts.values()
    assert applied is not None and applied - asked <= 1, f"{applied - asked} steps ran before the abort was applied"
    assert used_after == 0, f"{used_after} blocks still in use right after the abort"
    assert llm.num_steps - steps_at_close < 190, "aborted, not run to its 200 tokens"
    metrics = httpx.get(url + "/metrics", timeout=30).text
    assert "vt_kv_blocks_used 0.0" in metrics and "vt_requests_aborted_total 1.0" in metrics


def test_a_fatal_engine_error_mid_stream_is_an_error_frame_then_done_and_health_goes_503(served, capsys) -> None:
    server, url = served
    runner = server.llm.engine.runner
    real, calls = runner.execute, {"n": 0}

    def execute(so):
        calls["n"] += 1
        if calls["n"] == 4:
            raise RuntimeError("injected: the device fell over")
        return real(so)

    runner.execute = execute
    body = {"model": MODEL, "prompt": [5, 6, 7], "max_tokens": 50, "stream": True, "ignore_eos": True}
    with httpx.stream("POST", url + "/v1/completions", json=body, timeout=60) as r:
        status, frames = r.status_code, frames_of(list(r.iter_lines()))
    assert status == 200 and frames[-1] == "[DONE]" and "error" in frames[-2]
    assert "injected" in frames[-2]["error"]["message"] and frames[0].get("choices"), "tokens, then the error"
    assert httpx.get(url + "/health", timeout=30).status_code == 503
    late = httpx.post(url + "/v1/completions", json={"model": MODEL, "prompt": "hi"}, timeout=30)
    assert late.status_code == 503 and late.json()["error"]["message"]
    err = capsys.readouterr().err
    assert "Traceback" in err and "requests in flight" in err, "the fatal error printed its traceback and requests"


def test_a_non_streaming_client_that_goes_away_is_aborted_too(served) -> None:
    server, url = served
    llm, kv = server.llm, server.llm.engine.kv_manager
    body = {"model": MODEL, "prompt": [5] * 16, "max_tokens": 235, "ignore_eos": True}
    with engine_held_until_the_abort_is_asked(llm), pytest.raises(httpx.ReadTimeout):  # the client gives up
        httpx.post(url + "/v1/completions", json=body, timeout=httpx.Timeout(5.0, read=0.05))
    deadline = time.monotonic() + 5
    while (kv.num_used or llm.num_aborted == 0) and time.monotonic() < deadline:
        time.sleep(0.005)
    assert llm.num_aborted == 1 and kv.num_used == 0, "the request was aborted and its blocks freed"
    assert len(llm.aborts) == 1, "the disconnect was noticed: the server asked the engine to abort"
    (asked, applied, used_after), = llm.aborts.values()
    assert applied is not None and applied - asked <= 1 and used_after == 0
    assert httpx.get(url + "/health", timeout=30).status_code == 200


def test_a_disconnect_frees_the_draft_state_too() -> None:
    with running_server(MODEL, max_model_len=256, num_blocks=256, speculative_model="tiny-qwen3-draft",
                        num_speculative_tokens=2) as (server, url):
        llm, proposer, kv = server.llm, server.llm.engine.runner.proposer, server.llm.engine.kv_manager
        body = {"model": MODEL, "prompt": [5] * 20, "max_tokens": 200, "stream": True, "ignore_eos": True}
        with streaming_until_the_first_frame(llm, url, body):
            assert proposer.contexts and kv.num_used > 0, "non-vacuity: draft state and blocks while streaming"
        deadline = time.monotonic() + 5
        while (proposer.contexts or kv.num_used) and time.monotonic() < deadline:
            time.sleep(0.005)
        assert not proposer.contexts and kv.num_used == 0, "the draft's context and both KV groups are free"
        assert len(llm.aborts) == 1, "the disconnect was noticed: the server asked the engine to abort"
        (asked, applied, used_after), = llm.aborts.values()
        assert applied - asked <= 1 and used_after == 0
        assert llm.num_steps - applied <= 1, "the runner dropped the draft context at the next engine step"


def test_the_servers_connections_send_each_frame_at_once() -> None:
    """Nagle is off (TCP_NODELAY) on every connection the server accepts, as uvicorn accepts them (asyncio on
    vt's listening socket): with it on, a small SSE frame waits for the client's delayed ACK (~40 ms), and
    TTFT measured by clients includes that wait."""
    sock = listen_socket("127.0.0.1", 0)
    nodelay: list[int] = []

    class Accepted(asyncio.Protocol):
        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            nodelay.append(transport.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))

    async def connect_once() -> None:
        server = await asyncio.get_running_loop().create_server(Accepted, sock=sock)
        _, writer = await asyncio.open_connection("127.0.0.1", sock.getsockname()[1])
        while not nodelay:
            await asyncio.sleep(0.01)
        writer.close()
        server.close()

    asyncio.run(asyncio.wait_for(connect_once(), 30))
    assert len(nodelay) == 1, "non-vacuity: one connection was accepted"
    assert nodelay[0] != 0, "Nagle is on for the server's connections: each small frame waits for an ACK"


def test_an_impossible_port_is_refused_not_wrapped_to_another() -> None:
    """getaddrinfo wraps a port past 65535 (99999 -> 34463): unchecked, the server would listen where
    nobody asked it to."""
    with pytest.raises(ConfigError, match=r"--port 99999: must be in \[0, 65535\]"):
        listen_socket("127.0.0.1", 99999)
    sock = listen_socket("127.0.0.1", 0)  # non-vacuity: a port in range is listened on
    assert sock.getsockname()[1] > 0
    sock.close()
