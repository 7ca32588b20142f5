"""Clients that leave before their first token: a request still queued behind others is aborted then, never
prefilled for nobody (streamed or whole). Apart from test_server_rule.py, whose mutants need not run these."""

from __future__ import annotations

import threading
import time

import httpx
import pytest

from vt.server.serve import running_server

MODEL = "tiny-qwen3"
BLOCKER, LEAVER = 497, 498  # first prompt token of the request that holds the engine / of the one that leaves
HOLD_S = 5.0  # the blocker's steps wait (up to this) for the leaver's abort, however slow the machine


@pytest.fixture
def served():
    with running_server(MODEL, max_model_len=256, num_blocks=64, max_num_seqs=1) as (server, url):
        yield server, url


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
def test_a_client_that_leaves_while_queued_is_aborted_and_never_prefilled(served, stream: bool) -> None:
    server, url = served
    llm, runner = server.llm, server.llm.engine.runner
    admitted: list[int] = []  # the first prompt token of every request the engine admitted
    gone = threading.Event()  # the leaver's client has given up (and the server had time to notice)
    real = runner.execute

    def execute(so):
        admitted.extend(r.token_ids[0] for r in so.new_reqs)
        out = real(so)
        gone.wait(HOLD_S)  # the blocker holds the only seat until the leaver has left
        return out

    runner.execute = execute

    def blocker() -> None:
        body = {"model": MODEL, "prompt": [BLOCKER] + [5] * 10, "max_tokens": 8, "ignore_eos": True}
        httpx.post(url + "/v1/completions", json=body, timeout=60)

    t = threading.Thread(target=blocker)
    t.start()
    deadline = time.monotonic() + 30
    while BLOCKER not in admitted and time.monotonic() < deadline:
        time.sleep(0.005)
    assert BLOCKER in admitted, "non-vacuity: the blocker holds the engine's one seat"
    body = {"model": MODEL, "prompt": [LEAVER] + [6] * 10, "max_tokens": 8, "ignore_eos": True, "stream": stream}
    with pytest.raises(httpx.ReadTimeout):  # no byte came: the client gives up and closes the connection
        with httpx.stream("POST", url + "/v1/completions", json=body, timeout=httpx.Timeout(60, read=0.5)) as r:
            r.read()
    deadline = time.monotonic() + 2  # the server polls for a disconnect every 50 ms
    while len(llm._streams) > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    gone.set()
    t.join(60)
    deadline = time.monotonic() + 10
    while llm.engine.has_unfinished() and time.monotonic() < deadline:
        time.sleep(0.01)
    runner.execute = real
    assert BLOCKER in admitted and not llm.engine.has_unfinished(), "non-vacuity: the blocker ran to its end"
    assert LEAVER not in admitted, "the leaver was prefilled after its client had gone"
    assert llm.engine.kv_manager.num_used == 0
